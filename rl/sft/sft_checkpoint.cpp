// What an SFT checkpoint records beyond weights and optimizer, so that `sft --resume` continues
// exactly: the configuration, the LR schedule, the data cursor and a fingerprint of the data.
#include <filesystem>

#include "rl/sft/sft.h"
#include "rl/run_folder.h"
#include "runtime/error.h"

namespace sqlrl::rl {
namespace fs = std::filesystem;

uint64_t sft_data_fingerprint(const std::vector<SftSequence>& data) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  };
  mix(data.size());
  for (const SftSequence& s : data) {
    mix(s.tokens.size());
    for (size_t i = 0; i < s.tokens.size(); ++i) mix(static_cast<uint64_t>(static_cast<uint32_t>(s.tokens[i])) << 1 | s.mask[i]);
  }
  return h;
}

nlohmann::ordered_json sft_config_json(const SftConfig& c) {
  nlohmann::ordered_json j;
  j["epochs"] = c.epochs;
  j["max_steps"] = c.max_steps;
  j["micro_batch_tokens"] = c.micro_batch_tokens;
  j["grad_accum"] = c.grad_accum;
  j["lr"] = c.lr;  // a float widened to double: reads back to the same float
  j["warmup_ratio"] = c.warmup_ratio;
  j["min_lr_ratio"] = c.min_lr_ratio;
  j["decay"] = c.decay == LrDecay::Cosine ? "cosine" : "constant";
  j["adam_beta1"] = c.adamw.beta1;
  j["adam_beta2"] = c.adamw.beta2;
  j["adam_eps"] = c.adamw.eps;
  j["weight_decay"] = c.adamw.weight_decay;
  j["max_grad_norm"] = c.max_grad_norm;
  j["seed"] = c.seed;
  j["shuffle"] = c.shuffle;
  j["save_every"] = c.save_every;
  j["share_group"] = c.share_group;
  return j;
}

SftConfig sft_config_from_json(const nlohmann::json& j) {
  SftConfig c;
  c.epochs = j.at("epochs").get<int64_t>();
  c.max_steps = j.at("max_steps").get<int64_t>();
  c.micro_batch_tokens = j.at("micro_batch_tokens").get<int64_t>();
  c.grad_accum = j.at("grad_accum").get<int64_t>();
  c.lr = j.at("lr").get<float>();
  c.warmup_ratio = j.at("warmup_ratio").get<float>();
  c.min_lr_ratio = j.at("min_lr_ratio").get<float>();
  const std::string decay = j.at("decay").get<std::string>();
  check(decay == "cosine" || decay == "constant", "decay '", decay, "' is not cosine or constant");
  c.decay = decay == "cosine" ? LrDecay::Cosine : LrDecay::Constant;
  c.adamw.beta1 = j.at("adam_beta1").get<float>();
  c.adamw.beta2 = j.at("adam_beta2").get<float>();
  c.adamw.eps = j.at("adam_eps").get<float>();
  c.adamw.weight_decay = j.at("weight_decay").get<float>();
  c.max_grad_norm = j.at("max_grad_norm").get<float>();
  c.seed = j.at("seed").get<uint64_t>();
  c.shuffle = j.at("shuffle").get<bool>();
  c.save_every = j.at("save_every").get<int64_t>();
  c.share_group = j.value("share_group", int64_t{0});  // absent in checkpoints from before it existed
  return c;
}

SftCheckpoint read_sft_checkpoint(const std::string& checkpoint) {
  const nlohmann::json j = read_trainer_state(checkpoint, "sft");
  const std::string path = (fs::path(checkpoint) / "trainer_state.json").string();
  SftCheckpoint ck;
  ck.path = checkpoint;
  std::string field;
  try {
    auto at = [&](const char* key) -> const nlohmann::json& {
      field = key;
      return j.at(key);
    };
    ck.config = sft_config_from_json(at("config"));
    const nlohmann::json& c = at("cursor");
    field = "cursor";
    ck.cursor.epoch = c.at("epoch").get<int64_t>();
    ck.cursor.micro = c.at("micro").get<int64_t>();
    ck.cursor.updates = at("updates").get<int64_t>();
    ck.cursor.planned = at("planned_updates").get<int64_t>();
    ck.cursor.total_steps = at("total_steps").get<int64_t>();
    ck.cursor.warmup_steps = at("warmup_steps").get<int64_t>();
    ck.train_step = at("step").get<int64_t>();
    ck.data_fingerprint = at("data_fingerprint").get<uint64_t>();
    ck.sequences = at("sequences").get<int64_t>();
    if (j.contains("run")) ck.run = j["run"];
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": field '", field, "': ", e.what());
  }
  check(ck.cursor.epoch >= 0 && ck.cursor.micro >= 0 && ck.cursor.updates >= 0 && ck.cursor.updates <= ck.cursor.planned,
        path, ": cursor epoch ", ck.cursor.epoch, " micro ", ck.cursor.micro, " after ", ck.cursor.updates, " of ",
        ck.cursor.planned, " updates is not a position in a run");
  return ck;
}

}  // namespace sqlrl::rl
