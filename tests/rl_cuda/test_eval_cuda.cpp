// run_eval on the CUDA policy (what `eval --device cuda` runs) against run_eval on the CPU, greedy.
//
// Criterion. The device's logits lie within a per-element budget b of the CPU's (12 sqrt(R) u times
// the L2 norm of lm_head's row weighted by the final norm: tests/model_cuda/model_cuda_util.h; the
// test checks first that the device's paged decode replayed along the CPU's trajectories stays
// within it). So the device's greedy
// choice can differ from the CPU's only where the CPU's top id does not beat every other id by
// b_x + b_v ("not sure"). run_eval keeps only each question's turn texts, not its tokens, so both
// runs are rebuilt with rollout() under eval's options (one sample per question, Philox stream
// first_sample_id + question) and each rebuilt run must give its eval's turns exactly. The device
// tokens then go through the rollout test's rule (rl_cuda_fixture.h, compare_trajectory): equal
// to the CPU's up to the first difference, which sits where the CPU's choice is not sure, at a
// token some error within budget makes the maximum. A question whose turns all agree must be
// scored identically (prediction, EX, EM, format, executable, result, turns, SQL calls); one
// whose final answers agree must get the same verdict. Nothing after a first difference is
// compared: the two runs hold different text from there on.
//
// Catches: a broken decode or cache path (in the replay, or where the device's choice is one no
// error within budget makes: emulated, a query that skipped its own K/V in the paged kernel drew
// such a token in question 1), options or Philox streams per question that do not reach the
// device rollout as they reach the CPU's, and a verdict that depends on the device.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "rl/eval/eval.h"
#include "tests/rl_cuda/rl_cuda_fixture.h"
#include "tests/rl_rollout/rollout_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

// The turns an eval result kept must be the rebuilt trajectory's, text for text.
void expect_same_turns(const std::vector<TurnRecord>& kept, const Trajectory& rebuilt, const std::string& what) {
  ASSERT_EQ(kept.size(), rebuilt.turns.size()) << what << ": the rebuilt rollout is not the one eval ran";
  for (size_t k = 0; k < kept.size(); ++k) {
    EXPECT_EQ(kept[k].assistant_text, rebuilt.turns[k].assistant_text) << what << " turn " << k;
    EXPECT_EQ(kept[k].observation, rebuilt.turns[k].observation) << what << " turn " << k;
  }
}

TEST(EvalCuda, GreedyRunScoresEveryQuestionAsTheCpuWould) {
  const Tokenizer& tok = tiny_tokenizer();
  const int64_t known = static_cast<int64_t>(tok.size());
  QwenModel cpu = bf16_model(known + 16, 7);
  {
    // The answer token's embedding doubled (exact in bf16): with tied embeddings its logit
    // doubles too, so the model answers in some questions. Here question 0 answers, right, after
    // 12 sampled tokens; the other two never answer within their 4 turns of 10 tokens (the CPU
    // line the test prints: 1 of 3 answered, EX 1).
    const int64_t C = cpu.config.hidden_size, id = tok.token_id(kAnswerStop);
    ASSERT_GE(id, 0);
    float* row = QwenModel::bind_weights(cpu, cpu.params.data()).embed + id * C;
    for (int64_t c = 0; c < C; ++c) row[c] *= 2.0f;
  }
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
  ASSERT_EQ(a.results.size(), examples.size());

  // What eval rolls out: one batch (3 questions < batch_questions), one sample each.
  RolloutOptions ro = o.rollout;
  ro.group_size = 1;
  const std::vector<RolloutRequest> requests = make_requests(protocol, tok, pool, examples, ro);
  std::vector<Trajectory> cpu_trajs = rollout(cpu, tok, protocol, pool, requests, ro);
  ASSERT_EQ(cpu_trajs.size(), examples.size());
  std::vector<DrawAudit> audits;
  int64_t sampled = 0, sure = 0, answered = 0;
  for (size_t e = 0; e < examples.size(); ++e) {
    expect_same_turns(a.results[e].turns, cpu_trajs[e], "CPU question " + std::to_string(e));
    audits.push_back(audit_draws(cpu, cpu_trajs[e], ro.sampling, ro.first_sample_id + e, known));
    for (int8_t s : audits.back().sure) sampled += s >= 0, sure += s == 1;
    answered += cpu_trajs[e].answered;
  }
  std::printf("CPU: %lld of %lld greedy choices sure under the bf16 budget; %lld of %zu questions answered, EX %lld\n",
              static_cast<long long>(sure), static_cast<long long>(sampled), static_cast<long long>(answered),
              examples.size(), static_cast<long long>(a.summary.total.correct));
  ASSERT_GE(2 * sure, sampled) << "fewer than half the CPU's choices are sure: the comparison would be void";

  SQLRL_REQUIRE_CUDA();
  QwenModel dev_host = cpu;
  Policy dev = cuda_policy(dev_host);
  double premise = device_decode_budget_ratio(dev, cpu_trajs, audits, ro.kv_block_size);
  std::printf("device paged decode along the CPU's trajectories: %.3g of the bf16 budget (budget 1)\n", premise);
  ASSERT_LE(premise, 1.0) << "the device's decode logits exceed the budget the comparison assumes";

  EvalRun b = run_eval(dev, tok, protocol, pool, examples, o, ctx);
  ASSERT_EQ(b.results.size(), examples.size());
  EXPECT_EQ(b.summary.total.n, static_cast<int64_t>(examples.size()));
  EXPECT_GT(b.stats.sampled_tokens, 0);
  // The device's tokens: the same rollout again (reproducible schedule: the same batches, the
  // same roundings), which must be the run eval scored.
  std::vector<Trajectory> dev_trajs = rollout(dev, tok, protocol, pool, requests, ro);
  ASSERT_EQ(dev_trajs.size(), examples.size());
  int whole = 0, same_answer = 0;
  for (size_t e = 0; e < examples.size(); ++e) {
    const std::string what = "question " + std::to_string(e);
    expect_same_turns(b.results[e].turns, dev_trajs[e], "device " + what);
    TrajectoryComparison c = compare_trajectory(cpu_trajs[e], dev_trajs[e], audits[e], what.c_str());
    const ExampleResult &x = a.results[e], &y = b.results[e];
    if (x.prediction == y.prediction) {
      ++same_answer;
      EXPECT_EQ(x.correct, y.correct) << what << ": the same answer scored differently";
      EXPECT_EQ(x.em, y.em) << what;
    }
    if (!c.whole) continue;
    ++whole;
    ASSERT_EQ(x.samples.size(), 1u);
    ASSERT_EQ(y.samples.size(), 1u);
    const SampleOutcome &sx = x.samples[0], &sy = y.samples[0];
    EXPECT_EQ(x.prediction, y.prediction) << what << ": equal trajectories, different answers";
    EXPECT_EQ(x.correct, y.correct) << what;
    EXPECT_EQ(x.em, y.em) << what;
    EXPECT_EQ(sx.answered, sy.answered) << what;
    EXPECT_EQ(sx.format_ok, sy.format_ok) << what;
    EXPECT_EQ(sx.executable, sy.executable) << what;
    EXPECT_EQ(sx.result_hash, sy.result_hash) << what;
    EXPECT_EQ(sx.turns, sy.turns) << what;
    EXPECT_EQ(sx.sql_calls, sy.sql_calls) << what;
  }
  std::printf("%d of %zu questions equal token for token, %d of %zu final answers identical on cuda and cpu; EX "
              "cpu %lld, cuda %lld\n",
              whole, examples.size(), same_answer, examples.size(), static_cast<long long>(a.summary.total.correct),
              static_cast<long long>(b.summary.total.correct));
}

}  // namespace
}  // namespace sqlrl::rl::testing
