// run_eval on the CUDA policy (what `eval --device cuda` runs): every question is rolled out on
// the device and scored, and where the device's final answer is the CPU's, so is the verdict
// (scoring does not depend on the device). Greedy paths may part at bf16 near-ties
// (test_rollout_cuda.cpp says how far), so only one answer is required to agree.
#include <gtest/gtest.h>

#include "rl/eval/eval.h"
#include "tests/rl_cuda/rl_cuda_fixture.h"
#include "tests/rl_rollout/rollout_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

TEST(EvalCuda, GreedyRunScoresEveryQuestionAsTheCpuWould) {
  SQLRL_REQUIRE_CUDA();
  const Tokenizer& tok = tiny_tokenizer();
  QwenModel cpu = bf16_model(static_cast<int64_t>(tok.size()) + 16, 7);
  QwenModel dev_host = cpu;
  Policy dev = cuda_policy(dev_host);
  TagProtocol protocol;
  sql::Pool pool;
  std::vector<sql::Example> examples = city_examples();
  examples[0].gold_sql = "SELECT count(*) FROM city";
  examples[1].gold_sql = "SELECT name FROM city ORDER BY population DESC LIMIT 1";
  examples[2].gold_sql = "SELECT name FROM city";
  EvalOptions o;
  o.mode = EvalMode::Greedy;
  o.samples = 1;
  o.rollout = base_options();
  o.rollout.sampling.temperature = 0.0f;
  o.rollout.max_turn_tokens = 10;
  o.rollout.max_total_tokens = 400;
  RewardContext ctx(pool);
  EvalRun a = run_eval(cpu_policy(cpu), tok, protocol, pool, examples, o, ctx);
  EvalRun b = run_eval(dev, tok, protocol, pool, examples, o, ctx);
  ASSERT_EQ(a.results.size(), examples.size());
  ASSERT_EQ(b.results.size(), examples.size());
  EXPECT_EQ(b.summary.total.n, static_cast<int64_t>(examples.size()));
  EXPECT_GT(b.stats.sampled_tokens, 0);
  int same = 0;
  for (size_t e = 0; e < examples.size(); ++e) {
    if (a.results[e].prediction != b.results[e].prediction) continue;
    ++same;
    EXPECT_EQ(a.results[e].correct, b.results[e].correct) << "question " << e;
  }
  std::printf("%d of %zu final answers identical on cuda and cpu\n", same, examples.size());
  EXPECT_GE(same, 1) << "no answer agrees with the CPU's: a broken device path, not bf16 ties (emulated: 3 of 3)";
}

}  // namespace
}  // namespace sqlrl::rl::testing
