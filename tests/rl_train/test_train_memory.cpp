// The trainer runs the memory plan: for budgets that make the planner choose no mode, layer
// recomputation, and bf16 AdamW moments, a real GRPO run (CPU, the toy environment) reports the
// modes read back from its live buffers (executed_modes), and they equal plan_memory's for the
// same model and budget; RUN/memory_plan.txt is the plan, and `llm_sqlrl plan` prints the same
// text from the checkpoint's config.json and the same numbers. bf16 moments survive a resume.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "model/memory_plan.h"
#include "rl/train_memory.h"
#include "runtime/file_io.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/test_util.h"
#include "weights/checkpoint.h"

namespace sqlrl::rl {
namespace {

using testing::fresh_dir;
using testing::toy_config;
using testing::toy_env;

// The train step's peak for forced modes, with the KV cache at the least the rollout runs with
// (one group): what the planner compares with the budget (model/memory_plan.cpp).
int64_t train_peak(const TrainEnv& env, Choice bf16, Choice recompute) {
  MemoryPlanOptions o = grpo_memory_plan_options(env);
  o.device_bytes = int64_t(1) << 40, o.reserve_bytes = 0;
  o.bf16_moments = bf16, o.recompute = recompute;
  MemoryPlan p = plan_memory(env.model.config, o);
  const int64_t per_seq = (o.rollout_sequence_tokens + o.kv_block_size - 1) / o.kv_block_size;
  return p.peak_bytes - (p.kv_blocks - o.min_rollout_sequences * per_seq) * p.kv_block_bytes;
}

struct PlannedRun {
  QwenConfig config;
  MemoryPlan plan;
  MemoryPlanOptions options;
  TrainSummary summary;
  std::string dir;
};

PlannedRun train_with_budget(const std::string& name, int64_t budget_bytes, int64_t steps = 1) {
  TrainConfig c = toy_config(fresh_dir(name));
  c.max_steps = steps;
  c.memory_gb = static_cast<double>(budget_bytes) / 1e9;
  PlannedRun r;
  r.dir = c.out;
  TrainEnv env = toy_env(c);
  r.config = env.model.config;
  r.options = grpo_memory_plan_options(env);
  EXPECT_EQ(r.options.device_bytes, budget_bytes);
  r.plan = plan_memory(env.model.config, r.options);
  r.summary = run_training(env, /*quiet=*/true);
  return r;
}

void expect_executed_as_planned(const PlannedRun& r) {
  ASSERT_TRUE(r.plan.fits) << r.plan.problem;
  EXPECT_EQ(r.summary.modes, r.plan.modes) << "executed: " << r.summary.modes.describe()
                                           << "\nplanned:  " << r.plan.modes.describe();
  EXPECT_EQ(read_file_text(r.dir + "/memory_plan.txt"), format_memory_plan(r.config, r.plan, r.options));
}

TEST(TrainMemory, TheTrainerRunsThePlannedModes) {
  TrainEnv probe = toy_env(toy_config(fresh_dir("memory_probe")));
  const int64_t L = probe.model.config.num_hidden_layers;
  const int64_t store_all = train_peak(probe, Choice::Off, Choice::Off);
  const int64_t recompute_all = train_peak(probe, Choice::Off, Choice::On);
  ASSERT_LT(recompute_all, store_all);

  // Room for everything: no mode.
  PlannedRun plain = train_with_budget("memory_plain", store_all + (int64_t(64) << 20));
  expect_executed_as_planned(plain);
  EXPECT_EQ(plain.plan.modes.recomputed_layers(), 0);
  EXPECT_FALSE(plain.plan.modes.bf16_moments);

  // One byte short of storing every layer: layers are recomputed, the moments stay fp32.
  PlannedRun recompute = train_with_budget("memory_recompute", store_all - 1);
  expect_executed_as_planned(recompute);
  EXPECT_GT(recompute.plan.modes.recomputed_layers(), 0);
  EXPECT_LE(recompute.plan.modes.recomputed_layers(), L);
  EXPECT_FALSE(recompute.plan.modes.bf16_moments);

  // One byte short of fp32 moments with every layer recomputed: bf16 moments.
  PlannedRun bf16 = train_with_budget("memory_bf16", recompute_all - 1);
  expect_executed_as_planned(bf16);
  EXPECT_TRUE(bf16.plan.modes.bf16_moments);

  // Too little for anything: refused before the run folder is touched, naming the problem.
  TrainConfig tight = toy_config(fresh_dir("memory_tight"));
  tight.memory_gb = 1e-6;  // 1000 bytes
  TrainEnv env = toy_env(tight);
  try {
    run_training(env, true);
    ADD_FAILURE() << "a 1000-byte budget was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the memory plan does not fit"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(tight.out + "/metrics.jsonl"));
}

// `llm_sqlrl plan` on the run's checkpoint with the trainer's numbers prints the file the run
// wrote: the command and the trainer share one planner and one set of inputs.
TEST(TrainMemory, PlanCommandPrintsWhatTheRunExecuted) {
  TrainEnv probe = toy_env(toy_config(fresh_dir("memory_probe_cli")));
  PlannedRun r = train_with_budget("memory_cli", train_peak(probe, Choice::Off, Choice::Off) - 1);
  ASSERT_TRUE(r.plan.fits) << r.plan.problem;
  const MemoryPlanOptions& o = r.options;
  char memory[64];
  std::snprintf(memory, sizeof memory, "%.12g", static_cast<double>(o.device_bytes) / 1e9);
  const std::string cmd = str_cat(SQLRL_BINARY, " plan --device cpu --weights ", r.dir,
                                  "/checkpoints/step-1/config.json --memory ", memory, " --reserve 0 --seq ",
                                  o.tokens_per_micro_batch, " --logprob-chunk ", o.logprob_chunk_tokens,
                                  " --rollout-seq ", o.rollout_sequence_tokens, " --rollout-seqs ", o.rollout_sequences,
                                  " --group ", o.min_rollout_sequences, " --kv-block ", o.kv_block_size,
                                  " --kv-cache-blocks ", o.kv_blocks, " --rollout-mean-tokens ", o.rollout_mean_tokens);
  sqlrl::testing::CommandResult out = sqlrl::testing::run_command(cmd);
  ASSERT_EQ(out.exit_code, 0) << cmd << "\n" << out.output;
  EXPECT_EQ(out.output, read_file_text(r.dir + "/memory_plan.txt")) << cmd;
}

// bf16 moments are saved as BF16 tensors and read back exactly: two steps in one run and one
// step + resume + one step end on the same weights and moments, bit for bit.
TEST(TrainMemory, Bf16MomentsResumeBitForBit) {
  auto config = [](const std::string& name, int64_t steps) {
    TrainConfig c = toy_config(fresh_dir(name));
    c.max_steps = steps;
    c.bf16_moments = "on";
    return c;
  };
  TrainConfig full = config("memory_bf16_full", 2);
  {
    TrainEnv env = toy_env(full);
    run_training(env, true);
  }
  TrainConfig part = config("memory_bf16_part", 1);
  {
    TrainEnv env = toy_env(part);
    run_training(env, true);
  }
  TrainConfig again = part;
  again.max_steps = 2;
  again.resume = part.out;
  {
    TrainEnv env = toy_env(again);
    TrainSummary s = run_training(env, true);
    EXPECT_TRUE(s.modes.bf16_moments);
  }
  const std::string a = full.out + "/checkpoints/step-2", b = part.out + "/checkpoints/step-2";
  OptimizerState oa = load_optimizer(a + "/optimizer.safetensors", toy_env(full).model.num_params, true);
  OptimizerState ob = load_optimizer(b + "/optimizer.safetensors", toy_env(full).model.num_params, true);
  EXPECT_EQ(oa.m16, ob.m16);
  EXPECT_EQ(oa.v16, ob.v16);
  EXPECT_EQ(oa.adam_step, ob.adam_step);
  EXPECT_GE(oa.adam_step, 1);
  EXPECT_EQ(load_model(a).params, load_model(b).params);
  // Not all zero: the moments did move (a run that never stored them would also "match").
  size_t nonzero = 0;
  for (uint16_t x : oa.v16) nonzero += x != 0;
  EXPECT_GT(nonzero, oa.v16.size() / 2);
}

}  // namespace
}  // namespace sqlrl::rl
