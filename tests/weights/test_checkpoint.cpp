// Checkpoints: the transformers-made fixtures (single file, tied, sharded, Qwen2 biases),
// config parsing and presets, the parameter list, checks, inference, sharded saving.
#include <gtest/gtest.h>

#include <cerrno>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "tests/weights/weights_test_util.h"
#include "weights/checkpoint.h"
#include "weights/qwen_params.h"

namespace sqlrl {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::fixture_path;
using testing::read_bytes;
using testing::TempDir;

// Compares every loaded parameter with the sums and leading values transformers' script
// recorded (expected.json), and checks that the loader returned exactly the expected set.
void expect_matches_golden(const std::vector<LoadedParam>& params, const std::string& folder) {
  json expected = json::parse(read_bytes(fixture_path(folder + "/expected.json")));
  size_t seen = 0;
  for (const LoadedParam& p : params) {
    ASSERT_TRUE(expected.contains(p.spec.hf_name)) << p.spec.hf_name;
    const json& want = expected[p.spec.hf_name];
    EXPECT_EQ(p.spec.shape, want["shape"].get<std::vector<int64_t>>());
    std::vector<float> values = to_floats(p.tensor);
    double sum = 0, abs_sum = 0;
    for (float v : values) {
      sum += v;
      abs_sum += std::fabs(v);
    }
    // Same values summed in another order: the difference is rounding of a float64 sum.
    EXPECT_NEAR(sum, want["sum"].get<double>(), 1e-9 * (1 + abs_sum)) << p.spec.hf_name;
    EXPECT_NEAR(abs_sum, want["abs_sum"].get<double>(), 1e-9 * (1 + abs_sum)) << p.spec.hf_name;
    const json& first = want["first"];
    for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(values[i], first[i].get<double>()) << p.spec.hf_name << i;
    ++seen;
  }
  EXPECT_EQ(seen, expected.size());
}

TEST(Checkpoint, Qwen3TiedFromTransformers) {
  Checkpoint c = open_checkpoint(fixture_path("weights/qwen3_tiny"));
  QwenConfig cfg = checkpoint_config(c);
  EXPECT_EQ(cfg.arch, QwenArch::Qwen3);
  EXPECT_EQ(cfg.vocab_size, 256);
  EXPECT_EQ(cfg.hidden_size, 64);
  EXPECT_EQ(cfg.intermediate_size, 128);
  EXPECT_EQ(cfg.num_hidden_layers, 2);
  EXPECT_EQ(cfg.num_attention_heads, 4);
  EXPECT_EQ(cfg.num_key_value_heads, 2);
  EXPECT_EQ(cfg.head_dim, 16);
  EXPECT_TRUE(cfg.tie_word_embeddings);
  EXPECT_FALSE(cfg.attention_bias);
  EXPECT_EQ(cfg.torch_dtype, "bfloat16");  // transformers 4.57 writes it as "dtype"
  EXPECT_EQ(cfg.bos_token_id, 1);
  EXPECT_EQ(cfg.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_DOUBLE_EQ(cfg.rope_theta, 1e6);
  EXPECT_TRUE(cfg.inferred.empty());
  EXPECT_EQ(c.find("lm_head.weight"), nullptr);
  CheckReport report = check_checkpoint(c, qwen_parameters(cfg), cfg);
  EXPECT_TRUE(report.ok()) << report.str();
  std::vector<LoadedParam> params = load_qwen_weights(c, cfg, DType::F32, cpu_device());
  EXPECT_EQ(params.size(), 1u + 2 * 11 + 1);  // embed, 11 per layer (q/k norms, no biases), final norm
  EXPECT_EQ(params[3].spec.name, "L0.wk");
  expect_matches_golden(params, "weights/qwen3_tiny");
}

TEST(Checkpoint, Qwen3ShardedWithBiasesFromTransformers) {
  Checkpoint c = open_checkpoint(fixture_path("weights/qwen3_bias_sharded"));
  EXPECT_EQ(c.files.size(), 3u);
  QwenConfig cfg = checkpoint_config(c);
  EXPECT_TRUE(cfg.attention_bias);
  EXPECT_TRUE(cfg.has_o_bias());
  EXPECT_FALSE(cfg.tie_word_embeddings);
  std::vector<LoadedParam> params = load_qwen_weights(c, cfg, DType::F32, cpu_device());
  EXPECT_EQ(params.size(), 1u + 2 * 15 + 2);  // + q/k/v/o biases per layer, + lm_head
  EXPECT_EQ(params.back().spec.hf_name, "lm_head.weight");
  expect_matches_golden(params, "weights/qwen3_bias_sharded");
}

TEST(Checkpoint, Qwen2BiasesFromTransformers) {
  Checkpoint c = open_checkpoint(fixture_path("weights/qwen2_tiny"));
  QwenConfig cfg = checkpoint_config(c);
  EXPECT_EQ(cfg.arch, QwenArch::Qwen2);
  EXPECT_EQ(cfg.head_dim, 16);  // no head_dim field: hidden / heads
  EXPECT_TRUE(cfg.has_qkv_bias());
  EXPECT_FALSE(cfg.has_o_bias());
  EXPECT_FALSE(cfg.has_qk_norm());
  std::vector<LoadedParam> params = load_qwen_weights(c, cfg, DType::F32, cpu_device());
  EXPECT_EQ(params.size(), 1u + 2 * 12 + 2);  // q/k/v biases, no q/k norms
  expect_matches_golden(params, "weights/qwen2_tiny");
  // bf16 loading rounds the f32 file values to nearest even.
  std::vector<LoadedParam> bf = load_qwen_weights(c, cfg, DType::BF16, cpu_device());
  std::vector<float> full = to_floats(params[1].tensor), half = to_floats(bf[1].tensor);
  for (size_t i = 0; i < full.size(); ++i) EXPECT_EQ(half[i], bf16_bits_to_f32(f32_to_bf16_bits(full[i])));
}

TEST(Checkpoint, ReportsMissingUnexpectedAndMisShapedByName) {
  Checkpoint c = open_checkpoint(fixture_path("weights/qwen2_tiny"));
  QwenConfig cfg = checkpoint_config(c);
  QwenConfig wrong = cfg;
  wrong.arch = QwenArch::Qwen3;  // expects q/k norms, no biases
  wrong.intermediate_size = 96;
  CheckReport report = check_checkpoint(c, qwen_parameters(wrong), wrong);
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.missing.size(), 4u);     // q_norm, k_norm x 2 layers
  EXPECT_EQ(report.unexpected.size(), 6u);  // q/k/v bias x 2 layers
  EXPECT_EQ(report.mismatched.size(), 6u);  // gate/up/down x 2 layers
  std::string text = report.str();
  EXPECT_NE(text.find("missing    model.layers.0.self_attn.q_norm.weight [16]"), std::string::npos) << text;
  EXPECT_NE(text.find("unexpected model.layers.1.self_attn.v_proj.bias F32 [32]"), std::string::npos) << text;
  EXPECT_NE(text.find("model.layers.0.mlp.up_proj.weight expected [96, 64], file has [128, 64]"), std::string::npos)
      << text;
  try {
    load_qwen_weights(c, wrong, DType::F32, cpu_device());
    FAIL() << "loaded a mismatched checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 missing, 6 unexpected, 6 mis-shaped"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, TiedLmHeadInFileIsIgnoredNotUnexpected) {
  TempDir dir;
  Checkpoint c = open_checkpoint(fixture_path("weights/qwen3_tiny"));
  QwenConfig cfg = checkpoint_config(c);
  std::vector<LoadedParam> params = load_qwen_weights(c, cfg, DType::F32, cpu_device());
  std::vector<Tensor> holder;
  std::vector<TensorRecord> records = records_of(params, holder);
  records.push_back(record_of("lm_head.weight", params[0].tensor, holder));
  save_checkpoint(dir.path.string(), records, cfg);
  Checkpoint with_head = open_checkpoint(dir.path.string());
  CheckReport report = check_checkpoint(with_head, qwen_parameters(cfg), cfg);
  EXPECT_TRUE(report.ok()) << report.str();
  ASSERT_EQ(report.ignored.size(), 1u);
  EXPECT_EQ(report.ignored[0], "lm_head.weight F32 [256, 64]");
}

TEST(Checkpoint, ShardedSaveAndLoadRoundTrip) {
  TempDir dir;
  Checkpoint c = open_checkpoint(fixture_path("weights/qwen3_bias_sharded"));
  QwenConfig cfg = checkpoint_config(c);
  std::vector<LoadedParam> params = load_qwen_weights(c, cfg, DType::F32, cpu_device());
  std::vector<Tensor> holder;
  SaveOptions options;
  options.max_shard_bytes = 100'000;
  std::vector<std::string> written = save_checkpoint(dir.path.string(), records_of(params, holder), cfg, options);
  json index = json::parse(read_bytes(dir.file("model.safetensors.index.json")));
  uint64_t total = 0;
  for (const LoadedParam& p : params) total += p.tensor.nbytes();
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_EQ(index["weight_map"].size(), params.size());
  size_t shards = 0;
  for (const std::string& f : written) shards += f.find("-of-") != std::string::npos;
  EXPECT_GE(shards, 5u);  // ~500 KB in 100 KB shards
  // Each shard respects the limit unless it holds a single larger tensor.
  for (const std::string& f : written) {
    if (f.find("-of-") == std::string::npos) continue;
    SafetensorsFile s = open_safetensors(f);
    uint64_t bytes = 0;
    for (const TensorEntry& e : s.tensors) bytes += e.nbytes();
    EXPECT_TRUE(bytes <= options.max_shard_bytes || s.tensors.size() == 1) << f;
  }
  Checkpoint back = open_checkpoint(dir.path.string());
  QwenConfig cfg_back = checkpoint_config(back);
  EXPECT_EQ(config_to_json(cfg_back), config_to_json(cfg));
  std::vector<LoadedParam> again = load_qwen_weights(back, cfg_back, DType::F32, cpu_device());
  ASSERT_EQ(again.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(to_floats(again[i].tensor), to_floats(params[i].tensor)) << params[i].spec.hf_name;

  // Saving again unsharded replaces the shards and the index.
  save_checkpoint(dir.path.string(), records_of(params, holder), cfg);
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(dir.file("model-00001-of-" + std::string(5 - std::to_string(shards).size(), '0') +
                                   std::to_string(shards) + ".safetensors")));
  EXPECT_EQ(open_checkpoint(dir.path.string()).files.size(), 1u);
}

TEST(Checkpoint, FailedShardedSaveLeavesNothingNew) {
  TempDir dir;
  Checkpoint c = open_checkpoint(fixture_path("weights/qwen2_tiny"));
  QwenConfig cfg = checkpoint_config(c);
  std::vector<LoadedParam> params = load_qwen_weights(c, cfg, DType::F32, cpu_device());
  std::vector<Tensor> holder;
  SaveOptions options;
  options.max_shard_bytes = 100'000;
  auto left = std::make_shared<size_t>(250'000);  // the disk fills up in the third shard
  options.write.write_fn = [left](int fd, const void* data, size_t bytes) -> ssize_t {
    if (*left < bytes) {
      errno = ENOSPC;
      return -1;
    }
    *left -= bytes;
    return ::write(fd, data, bytes);
  };
  EXPECT_THROW(save_checkpoint(dir.path.string(), records_of(params, holder), cfg, options), Error);
  EXPECT_TRUE(fs::is_empty(dir.path));
}

TEST(Checkpoint, ShardIndexMustAgreeWithShards) {
  TempDir dir;
  fs::copy(fixture_path("weights/qwen3_bias_sharded"), dir.path, fs::copy_options::recursive);
  json index = json::parse(read_bytes(dir.file("model.safetensors.index.json")));
  const std::string name = "model.layers.0.mlp.up_proj.weight";
  std::string real_shard = index["weight_map"][name];
  std::string other = real_shard == "model-00001-of-00003.safetensors" ? "model-00002-of-00003.safetensors"
                                                                       : "model-00001-of-00003.safetensors";
  auto expect_error = [&](const json& idx, const std::string& needle) {
    testing::write_bytes(dir.file("model.safetensors.index.json"), idx.dump());
    try {
      open_checkpoint(dir.path.string());
      ADD_FAILURE() << "opened; expected " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  json moved = index;
  moved["weight_map"][name] = other;
  expect_error(moved, "'" + name + "' is listed in " + other + " but found in " + real_shard);
  json dropped = index;
  dropped["weight_map"].erase(name);
  expect_error(dropped, "'" + name + "' of ");
  json extra = index;
  extra["weight_map"]["model.ghost.weight"] = real_shard;
  expect_error(extra, "'model.ghost.weight' is listed in shard");
  json missing_file = index;
  missing_file["weight_map"][name] = "model-00009-of-00009.safetensors";
  expect_error(missing_file, "cannot open");
  json escape = index;
  escape["weight_map"][name] = "../elsewhere.safetensors";
  expect_error(escape, "not a file name in the checkpoint folder");
}

// A LoRA run's checkpoint (PEFT's adapter files beside the optimizer) given as --weights: the
// error says it is an adapter and names the base its adapter_config.json records, instead of
// counting .safetensors files.
TEST(Checkpoint, AnAdapterFolderIsNamedAsOneWithItsBase) {
  TempDir dir;
  testing::write_bytes(dir.file("adapter_config.json"), R"({"r": 4, "base_model_name_or_path": "/models/Qwen3-4B"})");
  fs::copy_file(fixture_path("weights/st_all_dtypes.safetensors"), dir.file("adapter_model.safetensors"));
  fs::copy_file(fixture_path("weights/st_all_dtypes.safetensors"), dir.file("optimizer.safetensors"));
  try {
    open_checkpoint(dir.path.string());
    ADD_FAILURE() << "opened an adapter folder as a model";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("holds a LoRA adapter"), std::string::npos) << what;
    EXPECT_NE(what.find("--adapter"), std::string::npos) << what;
    EXPECT_NE(what.find("/models/Qwen3-4B"), std::string::npos) << what;
  }
}

TEST(Checkpoint, InfersConfigForALoneFileAndSaysSo) {
  TempDir dir;
  fs::copy_file(fixture_path("weights/qwen3_tiny/model.safetensors"), dir.file("qwen3-tiny.safetensors"));
  Checkpoint c = open_checkpoint(dir.file("qwen3-tiny.safetensors"));
  QwenConfig inferred = checkpoint_config(c);
  QwenConfig real = read_config_file(fixture_path("weights/qwen3_tiny/config.json"));
  EXPECT_EQ(inferred.arch, real.arch);
  EXPECT_EQ(inferred.vocab_size, real.vocab_size);
  EXPECT_EQ(inferred.hidden_size, real.hidden_size);
  EXPECT_EQ(inferred.intermediate_size, real.intermediate_size);
  EXPECT_EQ(inferred.num_hidden_layers, real.num_hidden_layers);
  EXPECT_EQ(inferred.head_dim, real.head_dim);
  EXPECT_EQ(inferred.num_attention_heads, real.num_attention_heads);
  EXPECT_EQ(inferred.num_key_value_heads, real.num_key_value_heads);
  EXPECT_EQ(inferred.tie_word_embeddings, real.tie_word_embeddings);
  EXPECT_FALSE(inferred.inferred.empty());
  std::string notes = describe_config(inferred);
  EXPECT_NE(notes.find("inferred          : head_dim = 16 from q_norm.weight"), std::string::npos) << notes;
  EXPECT_TRUE(check_checkpoint(c, qwen_parameters(inferred), inferred).ok());
  // Qwen2 at head_dim 16 cannot be told apart from other head splits: a clear refusal.
  fs::copy_file(fixture_path("weights/qwen2_tiny/model.safetensors"), dir.file("qwen2-tiny.safetensors"));
  try {
    checkpoint_config(open_checkpoint(dir.file("qwen2-tiny.safetensors")));
    FAIL() << "inferred a Qwen2 config with head_dim 128 from 64-wide projections";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add a config.json"), std::string::npos) << e.what();
  }
}

TEST(Config, RejectsWhatWeDoNotImplementByName) {
  auto error_of = [](const std::string& text) -> std::string {
    try {
      parse_config_json(text, "config.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::string base = R"("vocab_size":256,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4)";
  EXPECT_EQ(error_of(R"({"architectures":["Qwen3ForCausalLM"],)" + base + "}"), "");
  EXPECT_NE(error_of(R"({"architectures":["LlamaForCausalLM"],)" + base + "}").find("unsupported architecture 'LlamaForCausalLM'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"qwen3","rope_scaling":{"type":"yarn","factor":4.0},)" + base + "}").find("rope_scaling"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"qwen2","use_sliding_window":true,)" + base + "}").find("use_sliding_window"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"qwen3","hidden_act":"gelu",)" + base + "}").find("hidden_act"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"qwen3","layer_types":["sliding_attention","full_attention"],)" + base + "}").find("sliding_attention"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"qwen3","vocab_size":256,"hidden_size":"64"})").find("'hidden_size' must be an integer"), std::string::npos);
  // 100,000 levels in a field an error quotes (its dump() overflowed the stack): refused by depth.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string field : {"architectures", "vocab_size", "rope_scaling"}) {
    const std::string text = R"({"model_type":"qwen3",")" + field + "\":" + deep + "}";
    // The object is level 1, so its 256th '[' is level 257.
    const std::string want =
        "config.json: JSON nests deeper than 256 levels (at byte " + std::to_string(text.find('[') + 255) + ")";
    EXPECT_EQ(error_of(text).rfind(want, 0), 0u) << field << ": " << error_of(text);
  }
  EXPECT_NE(error_of(R"({"model_type":"qwen3","hidden_size":64})").find("missing required field 'vocab_size'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"qwen3","num_key_value_heads":3,)" + base + "}").find("not a multiple of num_key_value_heads 3"), std::string::npos);
  EXPECT_NE(error_of("{\"model_type\":").find("invalid JSON"), std::string::npos);
  // Defaults as transformers applies them: Qwen3 head_dim 128, Qwen2 hidden/heads; eos lists.
  QwenConfig q3 = parse_config_json(R"({"model_type":"qwen3",)" + base + "}", "c");
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_EQ(q3.num_key_value_heads, 4);
  QwenConfig q2 = parse_config_json(R"({"model_type":"qwen2","eos_token_id":[5,7],)" + base + "}", "c");
  EXPECT_EQ(q2.head_dim, 16);
  EXPECT_EQ(q2.eos_token_ids, (std::vector<int64_t>{5, 7}));
  // Written configs parse back to the same values.
  EXPECT_EQ(config_to_json(parse_config_json(config_to_json(q2), "c")), config_to_json(q2));
}

// Totals published on the model cards (Qwen3: "Number of Parameters" / "(Non-Embedding)";
// Qwen2.5-Coder: the same two lines), in billions as printed there. Non-embedding excludes
// embed_tokens and lm_head.
TEST(Config, PresetParameterCountsMatchTheModelCards) {
  struct Card {
    const char* preset;
    double total, non_embedding;  // billions, as rounded on the card
    double unit;                  // of the last printed digit: cards round some, truncate others
  };
  const Card cards[] = {
      {"qwen3-0.6b", 0.6, 0.44, 0.1},  {"qwen3-1.7b", 1.7, 1.4, 0.1},   {"qwen3-4b", 4.0, 3.6, 0.1},
      {"qwen3-8b", 8.2, 6.95, 0.1},    {"qwen2.5-coder-3b", 3.09, 2.77, 0.01},
      {"qwen2.5-coder-7b", 7.61, 6.53, 0.01},
  };
  // Not compared: qwen2.5-coder-14b, whose card prints 14.7B / 13.1B while its config.json
  // shapes (the same as Qwen2.5-14B's) add up to 14.77B / 13.21B.
  for (const Card& card : cards) {
    QwenConfig c = preset_config(card.preset);
    double total = count_parameters(qwen_parameters(c)) / 1e9;
    double embeddings = (c.tie_word_embeddings ? 1 : 2) * double(c.vocab_size) * double(c.hidden_size) / 1e9;
    EXPECT_NEAR(total, card.total, card.unit) << card.preset;
    EXPECT_NEAR(total - embeddings, card.non_embedding, card.unit) << card.preset;
  }
  EXPECT_THROW(preset_config("qwen3-70b"), Error);
}

}  // namespace
}  // namespace sqlrl
