// Infrastructure failures (Trajectory::infra_failure) never become rewards: they leave their
// group's baseline and the loss, a group left with one valid sample is dropped, and each step
// counts them (FilterCounts, metrics.jsonl, the progress line).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/train.h"
#include "rl/grpo/grpo.h"
#include "rl/policy.h"
#include "rl/grpo/train_log.h"
#include "tests/rl_grpo/grpo_fixture.h"

namespace sqlrl::testing {
namespace {

using rl::Trajectory;

// The group-relative advantage of DeepSeekMath's GRPO (Shao et al. 2024, arXiv 2402.03300,
// §4.1.2): (r_i - mean(r)) / std(r) over the group, in float64, with verl's unbiased std and eps
// (verl/trainer/ppo/core_algos.py compute_grpo_outcome_advantage).
double reference_advantage(double r, const std::vector<double>& group, double eps = 1e-6) {
  double mean = 0, var = 0;
  for (double x : group) mean += x / static_cast<double>(group.size());
  for (double x : group) var += (x - mean) * (x - mean) / static_cast<double>(group.size() - 1);
  return (r - mean) / (std::sqrt(var) + eps);
}

std::vector<Trajectory> infra_batch() {
  std::vector<Trajectory> b;
  // Group 5: rewards 1, 0, 0.5, -1; the -1 is an infrastructure failure.
  const double g5[] = {1.0, 0.0, 0.5, -1.0};
  for (int i = 0; i < 4; ++i) b.push_back(make_trajectory(5, i, {1, 2}, {{3, 4}}, g5[i]));
  b[3].infra_failure = true;
  // Group 6: rewards 1, 0; the 0 is an infrastructure failure: one valid sample, no baseline.
  for (int i = 0; i < 2; ++i) b.push_back(make_trajectory(6, i, {1}, {{5}}, i == 0 ? 1.0 : 0.0));
  b[5].infra_failure = true;
  // Group 8: rewards 0, 1, 1; the 0 is an infrastructure failure: the valid rewards are flat.
  for (int i = 0; i < 3; ++i) b.push_back(make_trajectory(8, i, {2}, {{6, 7}}, i == 0 ? 0.0 : 1.0));
  b[6].infra_failure = true;
  return b;
}

TEST(GrpoInfra, FailuresLeaveTheBaselineAndTheLossAndOneSampleGroupsAreDropped) {
  const std::vector<Trajectory> b = infra_batch();
  rl::GrpoConfig cfg;
  ASSERT_TRUE(cfg.filter.exclude_infra_failures);  // on by default
  rl::GrpoSelection sel = rl::select_trajectories(b, cfg);
  const std::vector<double> valid5 = {1.0, 0.0, 0.5};
  for (int i = 0; i < 3; ++i) {
    const double want = reference_advantage(b[i].reward, valid5);
    EXPECT_NEAR(sel.advantages[i], want, 1e-6 * (1 + std::fabs(want))) << i;  // one f32 rounding
  }
  EXPECT_EQ(sel.advantages[3], 0.0f);
  EXPECT_EQ(sel.advantages[4], 0.0f);  // group 6 dropped: no baseline
  EXPECT_EQ(sel.kept, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(sel.counts.infra, 3);
  EXPECT_EQ(sel.counts.infra_groups, 1);
  EXPECT_EQ(sel.counts.zero_variance_groups, 1);        // group 8: 1, 1 without the failure
  EXPECT_EQ(sel.counts.zero_variance_trajectories, 2);
  EXPECT_EQ(sel.counts.truncated + sel.counts.malformed + sel.counts.no_valid_action, 0);
  EXPECT_EQ(sel.counts.groups, 3);
  EXPECT_EQ(sel.counts.kept_groups, 1);
  EXPECT_EQ(sel.counts.kept, 3);

  // Off: the failures are samples like any other (counted still).
  cfg.filter.exclude_infra_failures = false;
  sel = rl::select_trajectories(b, cfg);
  const std::vector<double> all5 = {1.0, 0.0, 0.5, -1.0};
  for (int i = 0; i < 4; ++i) {
    const double want = reference_advantage(b[i].reward, all5);
    EXPECT_NEAR(sel.advantages[i], want, 1e-6 * (1 + std::fabs(want))) << i;
  }
  EXPECT_EQ(sel.kept, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(sel.counts.infra, 3);
  EXPECT_EQ(sel.counts.infra_groups, 0);
}

// A batch without failures selects exactly what it did before the option existed, whatever its
// value; and a group of one sample (group size 1) is not dropped for want of a baseline.
TEST(GrpoInfra, WithoutFailuresTheSelectionDoesNotDependOnTheOption) {
  std::vector<Trajectory> b = infra_batch();
  for (Trajectory& t : b) t.infra_failure = false;
  b.push_back(make_trajectory(11, 0, {3}, {{4}}, 0.7));
  rl::GrpoConfig on, off;
  off.filter.exclude_infra_failures = false;
  const rl::GrpoSelection a = rl::select_trajectories(b, on), c = rl::select_trajectories(b, off);
  EXPECT_EQ(a.kept, c.kept);
  EXPECT_EQ(a.advantages, c.advantages);  // bit for bit
  EXPECT_EQ(a.counts.infra + a.counts.infra_groups, 0);
  EXPECT_EQ(a.counts.groups, 4);
}

// Through the whole step, CPU grad-accum 2 included (one shard per group: the counts are summed
// over shards): a batch with infrastructure failures makes exactly the update of the batch
// without them, bit for bit, and the step counts them. Catches a failure that still enters the
// baseline or the loss, and a count lost in the sum over shards.
TEST(GrpoInfra, StepWithFailuresMakesTheUpdateOfTheBatchWithoutThem) {
  std::vector<Trajectory> with, without;
  const double rewards[2][4] = {{1.0, 0.0, 0.5, -3.0}, {0.25, -1.0, 2.0, 1.0}};
  for (int64_t g = 0; g < 2; ++g)
    for (int64_t k = 0; k < 4; ++k) {
      Trajectory t = make_trajectory(g, k, {static_cast<int32_t>(1 + g), 2, 3},
                                     {{static_cast<int32_t>(4 + k), 5 + static_cast<int32_t>(g)}, {7}, {8, 9}},
                                     rewards[g][k]);
      t.infra_failure = (g == 0 && k == 3) || (g == 1 && k == 0);
      if (!t.infra_failure) without.push_back(t);
      with.push_back(std::move(t));
    }
  const QwenConfig cfg = tiny_config();
  for (int64_t accum : {1, 2}) {
    std::vector<QwenModel> models;
    std::vector<rl::GrpoStepStats> stats;
    for (const std::vector<Trajectory>* batch : {&with, &without}) {
      models.push_back(random_model(cfg, 5, 0.3f));
      QwenModel& m = models.back();
      alloc_grads(m);
      rl::OptimizerState opt = rl::make_optimizer_state(m.num_params);
      TrainOptions to;
      to.max_tokens = 64;
      to.logprob_chunk = 8;
      rl::Policy policy = rl::cpu_policy(m);
      rl::PolicyActivations acts;
      acts.host = make_train_state(cfg, to);
      rl::GrpoConfig gc;
      gc.schedule.lr = 1e-2f;
      rl::DataParallel dp;
      dp.grad_accum = accum;
      stats.push_back(rl::grpo_step(policy, nullptr, opt, acts, *batch, gc, dp));
    }
    EXPECT_EQ(stats[0].filtered.infra, 2) << accum;
    EXPECT_EQ(stats[1].filtered.infra, 0) << accum;
    EXPECT_EQ(stats[0].filtered.kept, 6) << accum;
    EXPECT_EQ(stats[0].tokens, stats[1].tokens) << accum;
    EXPECT_GT(stats[0].updates, 0);
    EXPECT_EQ(stats[0].loss, stats[1].loss) << accum;
    EXPECT_TRUE(models[0].params == models[1].params) << accum;
  }
}

TEST(GrpoInfra, MetricsAndProgressLineCountThem) {
  const rl::RewardPanel panel = rl::make_reward_panel("skyrl");
  std::vector<Trajectory> b = infra_batch();
  rl::StepRecord rec;
  rec.step = 1;
  rec.sums = rl::trajectory_sums(b, nullptr, panel);
  rec.grpo.filtered = rl::select_trajectories(b, rl::GrpoConfig{}).counts;
  rec.rollout.sql_infra_errors = 2;
  const nlohmann::ordered_json j = rl::metrics_json(rec, panel);
  EXPECT_EQ(j["filtered"]["infra"], 3);
  EXPECT_EQ(j["filtered"]["infra_groups"], 1);
  EXPECT_EQ(j["sql_infra_errors"], 2);
  const std::string line = rl::progress_line(rec, 10, 1.0);
  EXPECT_NE(line.find("| infra 3 |"), std::string::npos) << line;
  rec.grpo.filtered.infra = 0;
  EXPECT_EQ(rl::progress_line(rec, 10, 1.0).find("infra"), std::string::npos);
  // The ETA (9 steps left) in runtime/progress.h's format: minutes, and hours from an hour on.
  EXPECT_NE(line.find("| ETA 0m09s"), std::string::npos) << line;
  EXPECT_NE(rl::progress_line(rec, 10, 1000.0).find("| ETA 2h30m00s"), std::string::npos);
}

}  // namespace
}  // namespace sqlrl::testing
