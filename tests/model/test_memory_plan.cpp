// The memory plan's arithmetic, checked against figures derived by hand from the published
// Qwen3-4B config (36 layers, hidden 2560, intermediate 9728, 32 query / 8 KV heads of 128,
// vocab 151936, tied embeddings).
#include <gtest/gtest.h>

#include <string>

#include "model/memory_plan.h"
#include "runtime/error.h"
#include "tests/test_util.h"

namespace sqlrl {
namespace {

// Parameters counted from the architecture by hand: embedding, per layer the q/k/v/o
// projections, two norms, q/k norms and the three MLP matrices, then the final norm.
int64_t qwen3_4b_params_by_hand() {
  int64_t V = 151936, C = 2560, I = 9728, L = 36, qd = 32 * 128, kvd = 8 * 128, D = 128;
  int64_t layer = C * qd + 2 * C * kvd + qd * C + 2 * C + 2 * D + 3 * C * I;
  return V * C + L * layer + C;
}

TEST(MemoryPlan, Qwen3_4bResidentBytesAreEighteenPerParameter) {
  QwenConfig config = preset_config("qwen3-4b");
  MemoryPlanOptions options;
  MemoryPlan plan = plan_memory(config, options);
  EXPECT_EQ(plan.num_params, qwen3_4b_params_by_hand());
  // bf16 weights 2 + fp32 master 4 + fp32 grads 4 + AdamW m, v 8 bytes per parameter.
  EXPECT_EQ(plan.resident_total, 18 * plan.num_params);
  options.bf16_gradients = true;
  EXPECT_EQ(plan_memory(config, options).resident_total, 16 * plan.num_params);
  options.reference_model = true;
  EXPECT_EQ(plan_memory(config, options).resident_total, 18 * plan.num_params);
}

TEST(MemoryPlan, RecomputationKeepsOneLayerInsteadOfAll) {
  QwenConfig config = preset_config("qwen3-4b");
  MemoryPlanOptions options;
  options.tokens_per_micro_batch = 1000;
  MemoryPlan plan = plan_memory(config, options);
  // Per token and layer: bf16 ln1 2560, q 4096, k v 2x1024, attention out 4096, resid_mid 2560,
  // ln2 2560, gate up h 3x9728, pre-norm q 4096 and k 1024 (52224 values x 2 bytes); fp32 two
  // rstd, 32 lse, 32 + 8 q/k-norm rstd (74 values x 4 bytes).
  int64_t per_layer = 1000 * (52224 * 2 + 74 * 4);
  EXPECT_EQ(plan.activations_stored - plan.activations_recomputed, 35 * per_layer);
  EXPECT_EQ(plan.logprob_scratch, int64_t(1024) * 151936 * 4);
}

TEST(MemoryPlan, KvCacheBudgetIsWhatTrainingLeaves) {
  QwenConfig config = preset_config("qwen3-4b");
  MemoryPlanOptions options;
  MemoryPlan plan = plan_memory(config, options);
  EXPECT_EQ(plan.kv_bytes_per_token, 36 * 2 * 8 * 128 * 2);  // 144 KiB
  EXPECT_EQ(plan.kv_budget_bytes, options.device_bytes - options.reserve_bytes - plan.resident_total);
  EXPECT_EQ(plan.kv_budget_tokens, plan.kv_budget_bytes / plan.kv_bytes_per_token);
  options.device_bytes = 40'000'000'000;  // a 40 GB card cannot hold the 4B training state
  MemoryPlan small = plan_memory(config, options);
  EXPECT_LT(small.kv_budget_bytes, 0);
  EXPECT_EQ(small.kv_budget_tokens, 0);
  EXPECT_NE(format_memory_plan(config, small, options).find("does NOT fit"), std::string::npos);
}

TEST(MemoryPlan, RejectsNonPositiveSizes) {
  MemoryPlanOptions options;
  options.tokens_per_micro_batch = 0;
  EXPECT_THROW(plan_memory(preset_config("qwen3-4b"), options), Error);
}

std::string run(const std::string& args, int* status) {
  testing::CommandResult r = testing::run_command(std::string(SQLRL_BINARY) + " " + args);
  *status = r.exit_code;
  return r.output;
}

TEST(MemoryPlanCli, PrintsTheQwen3_4bPlanOnAnH100) {
  int status = 0;
  std::string out = run("plan --preset qwen3-4b --seq 8192", &status);
  ASSERT_EQ(status, 0) << out;
  // 18 bytes x 4.02e9 parameters = 67.4 GiB resident; with every layer recomputed the peak is
  // about 71.2 GiB of the 72.5 GiB usable (80 GB - 2 GiB reserve); storing all 36 layers' 8192
  // tokens adds ~28 GiB and does not fit.
  EXPECT_NE(out.find("recompute every layer  (fits)"), std::string::npos) << out;
  EXPECT_NE(out.find("store all activations  (does NOT fit)"), std::string::npos) << out;
  EXPECT_NE(out.find("sequences of 8192 tokens"), std::string::npos) << out;
}

TEST(MemoryPlanCli, UnknownPresetIsAnError) {
  int status = 0;
  std::string out = run("plan --preset qwen9-1t", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("qwen9-1t"), std::string::npos) << out;
}

}  // namespace
}  // namespace sqlrl
