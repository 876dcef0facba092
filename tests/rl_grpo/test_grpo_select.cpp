// GRPO-Filter counts, group advantages vs float64, micro-batch packing (targets = next token,
// mask shifted with them), the LR schedule and optimizer save/load.
#include <cmath>
#include <map>
#include <filesystem>
#include <unistd.h>

#include "rl/grpo/grpo.h"
#include "tests/rl_grpo/grpo_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::testing {
namespace {

using rl::Trajectory;

std::vector<Trajectory> filter_batch() {
  std::vector<Trajectory> b;
  // Group 7: rewards 1, 0, 0, 1; sample 1 truncated, sample 2 malformed.
  for (int i = 0; i < 4; ++i) b.push_back(make_trajectory(7, i, {1, 2}, {{3, 4}}, i == 0 || i == 3 ? 1.0 : 0.0));
  b[1].truncated = true;
  b[2].invalid_actions = 2;
  // Group 3: all 0.5 -> zero variance (and one of them also truncated: counted as truncated).
  for (int i = 0; i < 3; ++i) b.push_back(make_trajectory(3, i, {1}, {{5}}, 0.5));
  b[5].truncated = true;
  // Group 9: 1, -1, 0.25; sample 2 has no valid action.
  for (int i = 0; i < 3; ++i) b.push_back(make_trajectory(9, i, {2}, {{6, 7}}, i == 0 ? 1.0 : (i == 1 ? -1.0 : 0.25)));
  b[9].turns[0].action.kind = rl::ActionKind::Invalid;
  return b;
}

TEST(GrpoSelect, FilterCountsEachReasonAndKeepsTheRest) {
  std::vector<Trajectory> b = filter_batch();
  rl::GrpoConfig cfg;
  rl::GrpoSelection sel = rl::select_trajectories(b, cfg);
  EXPECT_EQ(sel.counts.truncated, 2);
  EXPECT_EQ(sel.counts.malformed, 1);
  EXPECT_EQ(sel.counts.no_valid_action, 1);
  EXPECT_EQ(sel.counts.zero_variance_groups, 1);
  EXPECT_EQ(sel.counts.zero_variance_trajectories, 2);  // the third was already dropped as truncated
  EXPECT_EQ(sel.counts.groups, 3);
  EXPECT_EQ(sel.counts.kept_groups, 2);
  EXPECT_EQ(sel.kept, (std::vector<int64_t>{0, 3, 7, 8}));
  EXPECT_EQ(sel.counts.kept, 4);

  cfg.filter = rl::GrpoFilterConfig{false, false, false, false};
  sel = rl::select_trajectories(b, cfg);
  EXPECT_EQ(sel.kept.size(), b.size());
  EXPECT_EQ(sel.counts.truncated + sel.counts.malformed + sel.counts.no_valid_action + sel.counts.zero_variance_groups, 0);
}

TEST(GrpoSelect, AdvantagesUseWholeGroupsUnbiasedStd) {
  std::vector<Trajectory> b = filter_batch();
  for (bool divide_std : {true, false}) {
    rl::GrpoConfig cfg;
    cfg.advantage.divide_std = divide_std;
    rl::GrpoSelection sel = rl::select_trajectories(b, cfg);
    // float64: per group (every sample, dropped ones included) mean and the n-1 std.
    std::map<int64_t, std::vector<double>> groups;
    for (const Trajectory& t : b) groups[t.example_index].push_back(t.reward);
    for (size_t i = 0; i < b.size(); ++i) {
      const std::vector<double>& r = groups[b[i].example_index];
      double mean = 0, var = 0;
      for (double x : r) mean += x / r.size();
      for (double x : r) var += (x - mean) * (x - mean) / (r.size() - 1);
      double want = divide_std ? (b[i].reward - mean) / (std::sqrt(var) + 1e-6) : b[i].reward - mean;
      EXPECT_NEAR(sel.advantages[i], want, 1e-6 * (1 + std::fabs(want))) << i;  // one f32 rounding
    }
    EXPECT_EQ(sel.advantages[4], 0.0f);  // zero-variance group
  }
}

TEST(GrpoPack, TargetsAreNextTokensAndMaskShiftsWithThem) {
  std::vector<Trajectory> b;
  b.push_back(make_trajectory(0, 0, {1, 2, 3}, {{4, 5}, {6}, {7}}, 1.0));  // 7 tokens -> 6 positions
  b.push_back(make_trajectory(0, 1, {1}, {{8}}, 0.0));                    // 2 tokens -> 1 position
  b.push_back(make_trajectory(1, 0, {9}, {}, 0.0));                       // 1 token -> skipped
  b.push_back(make_trajectory(1, 1, {1, 2, 3, 4}, {{5, 6}}, 1.0));        // 6 tokens -> 5 positions
  for (size_t i = 0; i < b[0].tokens.size(); ++i) b[0].sampler_logprobs[i] = -0.1f * static_cast<float>(i);
  std::vector<float> adv = {0.5f, -0.5f, 9.0f, 2.0f};
  std::vector<rl::MicroBatch> mbs = rl::pack_micro_batches(b, {0, 1, 2, 3}, adv, 7);
  ASSERT_EQ(mbs.size(), 2u);  // 6 + 1 fit in 7; the 5 of trajectory 3 start a new one
  const rl::MicroBatch& m0 = mbs[0];
  EXPECT_EQ(m0.trajectories, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(m0.batch.tokens, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 1}));
  EXPECT_EQ(m0.batch.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 0}));
  EXPECT_EQ(m0.batch.cu_seqlens, (std::vector<int32_t>{0, 6, 7}));
  EXPECT_EQ(m0.targets, (std::vector<int32_t>{2, 3, 4, 5, 6, 7, 8}));
  // tokens 4,5 sampled, 6 observation, 7 sampled; 8 sampled in the second trajectory.
  EXPECT_EQ(m0.mask, (std::vector<uint8_t>{0, 0, 1, 1, 0, 1, 1}));
  EXPECT_EQ(m0.advantages, (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, -0.5f}));
  EXPECT_FLOAT_EQ(m0.sampler_logprobs[2], -0.3f);  // log-prob of token index 3 (value 4)
  EXPECT_EQ(mbs[1].targets, (std::vector<int32_t>{2, 3, 4, 5, 6}));
  EXPECT_EQ(mbs[1].mask, (std::vector<uint8_t>{0, 0, 0, 1, 1}));
  EXPECT_THROW(rl::pack_micro_batches(b, {0}, adv, 5), Error);  // 6 positions over a budget of 5
}

// spare_copied_answers: only a wrong (negative-advantage) trajectory whose answer repeats a query
// it ran without error loses its answer turn from the loss; its query turn still trains.
TEST(GrpoSelect, SpareCopiedAnswersMasksOnlyAWrongCopiedAnswerTurn) {
  std::vector<Trajectory> b;
  b.push_back(make_two_turn(0, 0, 1.0, "SELECT a FROM t", true, "SELECT a FROM t;"));  // right copy
  b.push_back(make_two_turn(0, 1, 0.0, "SELECT b FROM t", true, " SELECT b FROM t"));  // wrong copy
  b.push_back(make_two_turn(0, 2, 0.0, "SELECT b FROM t", true, "SELECT c FROM t"));   // wrong, re-typed
  b.push_back(make_two_turn(0, 3, 0.0, "SELECT d FROM", false, "SELECT d FROM"));      // copies a failed query
  const int64_t n = static_cast<int64_t>(b[0].tokens.size());  // 3 prompt + 3 query + 2 observation + 3 answer
  EXPECT_EQ(b[1].last_turn_begin(), 8);
  rl::GrpoConfig cfg;
  for (bool spare : {false, true}) {
    cfg.filter.spare_copied_answers = spare;
    rl::GrpoSelection sel = rl::select_trajectories(b, cfg);
    ASSERT_EQ(sel.kept, (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(sel.counts.spared_answers, spare ? 1 : 0);
    EXPECT_EQ(sel.train_end, (std::vector<int64_t>{n, spare ? 8 : n, n, n}));
    std::vector<rl::MicroBatch> mbs = rl::pack_micro_batches(b, sel.kept, sel.advantages, 100, 0, sel.train_end);
    ASSERT_EQ(mbs.size(), 1u);
    // Targets tokens[1..11) per trajectory: query 3..5, observation 6..7, answer 8..10.
    const std::vector<uint8_t> whole = {0, 0, 1, 1, 1, 0, 0, 1, 1, 1}, spared = {0, 0, 1, 1, 1, 0, 0, 0, 0, 0};
    for (int k = 0; k < 4; ++k) {
      std::vector<uint8_t> m(mbs[0].mask.begin() + 10 * k, mbs[0].mask.begin() + 10 * (k + 1));
      EXPECT_EQ(m, spare && k == 1 ? spared : whole) << k;
    }
  }
}

// Sharing: a group's repeated prompt is stored once; a unique prompt takes the longest common
// start with an earlier plain sequence; a repeated prompt never takes only part of another's;
// nothing a sequence is trained on lands in the shared rows; a new micro-batch starts plain.
TEST(GrpoPack, SharedPrefixesStoreRepeatedStartsOnce) {
  std::vector<int32_t> a(40), b(40);
  for (int32_t i = 0; i < 40; ++i) a[i] = i % 24, b[i] = i % 24;
  b[35] = 23;  // b shares a's first 35 tokens
  std::vector<Trajectory> t;
  t.push_back(make_trajectory(0, 0, a, {{1, 2}}, 1.0));   // 0: plain (first)
  t.push_back(make_trajectory(1, 0, b, {{3}}, 0.0));      // 1: b recurs (3 below): never part of a
  t.push_back(make_trajectory(0, 1, a, {{4, 5, 6}}, 0.0));  // 2: all 40 of a's
  t.push_back(make_trajectory(1, 1, b, {{7}}, 1.0));      // 3: all 40 of 1's
  std::vector<int32_t> c = b;
  c[39] = 22;
  t.push_back(make_trajectory(2, 0, c, {{8}}, 1.0));      // 4: unique: 39 tokens of 1 (b) or 35 of 0
  t.push_back(make_trajectory(0, 2, a, {{9}}, 1.0));      // 5: over the budget: a new micro-batch
  std::vector<float> adv = {1, 2, 3, 4, 5, 6};
  std::vector<rl::MicroBatch> mbs = rl::pack_micro_batches(t, {0, 1, 2, 3, 4, 5}, adv, 86, 32);
  ASSERT_EQ(mbs.size(), 2u);
  const PackedBatch& m = mbs[0].batch;
  EXPECT_EQ(mbs[0].trajectories, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // Row 39 (the last prompt token) predicts the first sampled token, so a sharer owns it: 39
  // shared rows at most, and 41 + 40 + (42 - 39) + (40 - 39) + (40 - 39) rows in all.
  EXPECT_EQ(m.prefix_seq, (std::vector<int32_t>{-1, -1, 0, 1, 1}));
  EXPECT_EQ(m.prefix_len, (std::vector<int32_t>{0, 0, 39, 39, 39}));
  EXPECT_EQ(m.cu_seqlens, (std::vector<int32_t>{0, 41, 81, 84, 85, 86}));
  EXPECT_EQ(m.positions[81], 39);
  EXPECT_EQ(m.positions[85], 39);
  ASSERT_EQ(mbs[0].targets.size(), 86u);
  EXPECT_EQ(mbs[0].targets[81], 4);  // trajectory 2: row 39 predicts its first sampled token
  EXPECT_EQ(mbs[0].mask[81], 1);
  EXPECT_EQ(mbs[0].targets[82], 5);
  EXPECT_EQ(mbs[0].targets[85], 8);
  EXPECT_EQ(mbs[0].advantages[82], 3.0f);
  EXPECT_FALSE(mbs[1].batch.has_prefixes());  // trajectory 5 alone, whole
  EXPECT_EQ(mbs[1].batch.num_tokens(), 40);

  // Sharing off: the same sequences whole.
  std::vector<rl::MicroBatch> whole = rl::pack_micro_batches(t, {0, 2}, adv, 1000);
  EXPECT_FALSE(whole[0].batch.has_prefixes());
  EXPECT_EQ(whole[0].batch.num_tokens(), 41 + 42);
}

TEST(GrpoSchedule, WarmupThenCosine) {
  // Hand-derived: warmup 10 -> lr * step / 10; cosine over 100 more steps is half way at 60.
  rl::LrSchedule s{1e-3f, 10, 110, rl::LrDecay::Cosine, 0.0f};
  EXPECT_FLOAT_EQ(rl::lr_at(s, 0), 0.0f);
  EXPECT_FLOAT_EQ(rl::lr_at(s, 5), 5e-4f);
  EXPECT_FLOAT_EQ(rl::lr_at(s, 10), 1e-3f);
  EXPECT_NEAR(rl::lr_at(s, 60), 5e-4f, 1e-9);
  EXPECT_NEAR(rl::lr_at(s, 110), 0.0f, 1e-9);
  s.min_lr_ratio = 0.1f;
  EXPECT_NEAR(rl::lr_at(s, 110), 1e-4f, 1e-9);
  EXPECT_NEAR(rl::lr_at(s, 500), 1e-4f, 1e-9);
  s.decay = rl::LrDecay::Constant;
  EXPECT_FLOAT_EQ(rl::lr_at(s, 500), 1e-3f);
}

TEST(GrpoOptimizer, SaveLoadRoundTripsBitsAndRejectsWrongSizes) {
  rl::OptimizerState s = rl::make_optimizer_state(1001);
  for (size_t i = 0; i < s.m.size(); ++i) s.m[i] = std::sin(float(i)) * 1e-3f, s.v[i] = std::cos(float(i)) * 1e-7f + 1e-7f;
  s.adam_step = 41, s.train_step = 17;
  std::string path = (std::filesystem::temp_directory_path() / ("grpo_opt_" + std::to_string(getpid()) + ".safetensors")).string();
  rl::save_optimizer(s, path);
  rl::OptimizerState r = rl::load_optimizer(path, 1001);
  EXPECT_EQ(r.m, s.m);
  EXPECT_EQ(r.v, s.v);
  EXPECT_EQ(r.adam_step, 41);
  EXPECT_EQ(r.train_step, 17);
  EXPECT_THROW(rl::load_optimizer(path, 1000), Error);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace sqlrl::testing
