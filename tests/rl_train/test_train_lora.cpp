// GRPO with a LoRA adapter (TrainEnv::adapter, model/lora.h) through the real loop: only the
// adapter trains (the base's bytes never change), checkpoints hold it in PEFT's two files and no
// weights, resume continues bit for bit, a checkpoint of the other kind is refused, and the KL
// reference is the base with the adapter off.
#include <fstream>
#include <nlohmann/json.hpp>

#include "rl/optimizer.h"
#include "runtime/philox.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

using sql::testing::file_bytes;

LoraConfig toy_lora() {
  LoraConfig c;
  c.rank = 4;
  c.alpha = 8;
  c.target_pattern = "all-linear";
  return c;
}

// PEFT's initialisation (B = 0: the policy starts as the base). The toy reward is rarely earned
// by a random model, so every step gets groups with varying rewards (half_flat_scorer) and makes
// an update: a step without one would let "unchanged" pass for "frozen".
void add_adapter(TrainEnv& env, uint64_t seed = 11) {
  env.adapter = std::make_unique<LoraAdapter>(init_adapter(toy_lora(), env.model.config, seed));
  half_flat_scorer(env, nullptr);
}

// Runs f and checks that it throws an error whose text holds `part`.
template <typename F>
void expect_error(F f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one with '" << part << "'";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

std::vector<nlohmann::json> metrics(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::vector<std::string> metric_lines_without_time(const std::string& dir) {
  std::vector<std::string> out;
  for (nlohmann::json j : metrics(dir)) {
    j.erase("time"), j.erase("rollout");  // the clock's and the schedule's figures
    out.push_back(j.dump());
  }
  return out;
}

TEST(TrainLora, TrainsTheAdapterAloneAndCheckpointsItInPeftFiles) {
  TrainConfig c = toy_config(fresh_dir("lora_train"));
  c.max_steps = 3;
  c.save_every = 3;
  TrainEnv env = toy_env(c);
  add_adapter(env);
  const std::vector<float> base = env.model.params, adapter = env.adapter->params;
  const TrainSummary s = run_training(env, true);
  ASSERT_EQ(s.last_step, 3);
  EXPECT_TRUE(env.model.params == base) << "a LoRA step changed the frozen base";
  EXPECT_FALSE(env.adapter->params == adapter) << "three steps left the adapter as it was";
  // B started at zero: a trained B is what makes the adapter act at all.
  double b_sq = 0;
  for (const LoraView& v : env.adapter->table)
    if (v.is_b)
      for (int64_t i = 0; i < v.numel(); ++i) b_sq += double(env.adapter->params[v.offset + i]) * env.adapter->params[v.offset + i];
  EXPECT_GT(b_sq, 0.0);

  const std::string ckpt = checkpoint_dir(c.out, 3);
  EXPECT_TRUE(std::filesystem::exists(ckpt + "/adapter_config.json"));
  EXPECT_TRUE(std::filesystem::exists(ckpt + "/adapter_model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(ckpt + "/model.safetensors")) << "a LoRA checkpoint wrote the frozen base";
  EXPECT_TRUE(is_adapter_checkpoint(ckpt));
  const LoraAdapter saved = load_adapter(ckpt, env.model);
  EXPECT_TRUE(saved.params == env.adapter->params);
  EXPECT_EQ(saved.table.front().hf_name, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  // The optimizer holds the adapter's moments, not the model's.
  const OptimizerState opt = load_optimizer(ckpt + "/optimizer.safetensors", env.adapter->num_params);
  EXPECT_EQ(moments_size(opt), env.adapter->num_params);
  EXPECT_LT(env.adapter->num_params, env.model.num_params);
}

TEST(TrainLora, GradAccumShardsTheAdapterGradient) {
  TrainConfig c = toy_config(fresh_dir("lora_accum"));
  c.max_steps = 2;
  c.grad_accum = 2;
  TrainEnv env = toy_env(c);
  add_adapter(env);
  const std::vector<float> base = env.model.params, adapter = env.adapter->params;
  run_training(env, true);
  EXPECT_TRUE(env.model.params == base);
  EXPECT_FALSE(env.adapter->params == adapter);
}

TEST(TrainLora, ResumeContinuesBitForBit) {
  const int64_t k = 2, total = 4;
  TrainConfig full = toy_config(fresh_dir("lora_resume_full"));
  full.max_steps = total;
  full.save_every = 2;
  {
    TrainEnv env = toy_env(full);
    add_adapter(env);
    run_training(env, true);
  }
  TrainConfig part = toy_config(fresh_dir("lora_resume_part"));
  part.max_steps = k;
  part.save_every = 2;
  {
    TrainEnv env = toy_env(part);
    add_adapter(env);
    run_training(env, true);
  }
  TrainConfig again = part;
  again.resume = part.out;
  again.max_steps = total;
  {
    TrainEnv env = toy_env(again);
    add_adapter(env, /*seed=*/99);  // resume must replace these draws with the checkpoint's adapter
    TrainSummary s = run_training(env, true);
    EXPECT_EQ(s.first_step, k);
  }
  const std::vector<std::string> a = metric_lines_without_time(full.out), b = metric_lines_without_time(part.out);
  ASSERT_EQ(a.size(), static_cast<size_t>(total));
  ASSERT_EQ(b.size(), static_cast<size_t>(total));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
  const std::string ca = checkpoint_dir(full.out, total), cb = checkpoint_dir(part.out, total);
  EXPECT_EQ(file_bytes(ca + "/adapter_model.safetensors"), file_bytes(cb + "/adapter_model.safetensors"));
  EXPECT_EQ(file_bytes(ca + "/optimizer.safetensors"), file_bytes(cb + "/optimizer.safetensors"));
  EXPECT_TRUE(file_bytes(checkpoint_dir(full.out, k) + "/adapter_model.safetensors") !=
              file_bytes(ca + "/adapter_model.safetensors"))
      << "steps 3-4 left the adapter as it was";
}

TEST(TrainLora, ACheckpointOfTheOtherKindIsRefused) {
  TrainConfig c = toy_config(fresh_dir("lora_kinds"));
  c.max_steps = 1;
  c.save_every = 1;
  TrainEnv lora_env = toy_env(c);
  add_adapter(lora_env);
  run_training(lora_env, true);
  const std::string lora_ckpt = checkpoint_dir(c.out, 1);

  TrainConfig f = toy_config(fresh_dir("lora_kinds_full"));
  f.max_steps = 1;
  f.save_every = 1;
  TrainEnv full_env = toy_env(f);
  run_training(full_env, true);
  const std::string full_ckpt = checkpoint_dir(f.out, 1);

  QwenModel model = toy_env(c).model;
  expect_error([&] { load_checkpoint_weights(lora_ckpt, model, nullptr); }, "holds a LoRA adapter");
  LoraAdapter adapter = init_adapter(toy_lora(), model.config, 1);
  expect_error([&] { load_checkpoint_weights(full_ckpt, model, &adapter); }, "holds full weights");
  LoraConfig other = toy_lora();
  other.rank = 2;
  LoraAdapter small = init_adapter(other, model.config, 1);
  expect_error([&] { load_checkpoint_weights(lora_ckpt, model, &small); }, "rank 4");
  // And the right kind loads the saved adapter.
  load_checkpoint_weights(lora_ckpt, model, &adapter);
  EXPECT_TRUE(adapter.params == lora_env.adapter->params);
}

// The KL reference of a LoRA run is the base itself, run without the adapter: starting from an
// adapter that already changes the model (B != 0, as `--adapter` gives), the first step's KL to
// the reference is positive. A reference that ran with the adapter would read 0.
TEST(TrainLora, TheKlReferenceIsTheBaseWithTheAdapterOff) {
  TrainConfig c = toy_config(fresh_dir("lora_kl"));
  c.max_steps = 1;
  c.kl_coef = 0.1;
  TrainEnv env = toy_env(c);
  add_adapter(env);
  for (const LoraView& v : env.adapter->table)
    if (v.is_b)
      for (int64_t i = 0; i < v.numel(); ++i)
        env.adapter->params[v.offset + i] = uniform_from_bits(philox_draw(5, static_cast<uint64_t>(v.offset), static_cast<uint64_t>(i)).v[0]) - 0.5f;
  ASSERT_EQ(env.reference, nullptr);
  run_training(env, true);
  const std::vector<nlohmann::json> m = metrics(c.out);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_GT(m[0]["ref_kl"].get<double>(), 1e-4) << m[0].dump();

  // The control: without the adapter's effect (B = 0), policy and reference agree.
  TrainConfig z = toy_config(fresh_dir("lora_kl_zero"));
  z.max_steps = 1;
  z.kl_coef = 0.1;
  TrainEnv zero = toy_env(z);
  add_adapter(zero);
  run_training(zero, true);
  EXPECT_NEAR(metrics(z.out)[0]["ref_kl"].get<double>(), 0.0, 1e-9);
}

}  // namespace
}  // namespace sqlrl::rl::testing
