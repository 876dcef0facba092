// KL in the reward (GrpoConfig::kl_reward_coef; verl's algorithm.use_kl_in_reward, whose
// apply_kl_penalty in verl/trainer/ppo/ray_trainer.py sets token_level_rewards = scores -
// kl_coef * kl_penalty(old_log_prob, ref_log_prob) on the response mask, and whose GRPO outcome
// advantage (verl/trainer/ppo/core_algos.py compute_grpo_outcome_advantage) sums a sequence's
// token rewards): each trajectory's reward r becomes r - c sum_t kl_t over its trained tokens
// before the group advantage. Checked in float64 from the formulas on a ragged batch with a
// group of one and a trajectory with no trained token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "model/train.h"
#include "rl/grpo/grpo.h"
#include "tests/rl_grpo/grpo_fixture.h"

namespace sqlrl::testing {
namespace {

using rl::Trajectory;

// Group 0: three ragged trajectories; group 1: one alone; group 2: two, one of which has only a
// prompt and an observation (no trained token: penalty 0).
std::vector<Trajectory> batch_with_edge_groups() {
  std::vector<Trajectory> b;
  b.push_back(make_trajectory(0, 0, {1, 2, 3}, {{4, 5, 6}, {7, 8}, {9, 10}}, 1.0));
  b.push_back(make_trajectory(0, 1, {1, 2, 3}, {{11, 12}}, 0.0));
  b.push_back(make_trajectory(0, 2, {1, 2, 3}, {{13, 14, 15, 16, 12}, {17}, {18}}, 0.5));
  b.push_back(make_trajectory(1, 0, {20, 21}, {{4, 4, 4, 9}}, 1.0));
  b.push_back(make_trajectory(2, 0, {20, 22}, {{}, {5, 6, 7}}, 0.0));
  b.push_back(make_trajectory(2, 1, {20, 22}, {{5, 6, 7, 8, 9, 10}}, 1.0));
  return b;
}

// kl_t in float64, d = ref - old (rl/grpo/algos.h kl_estimators(); J. Schulman, "Approximating KL
// divergence", 2020): k1 = -d, k2 = d^2 / 2, k3 = e^d - d - 1 with verl's low_var_kl clamps (d to
// [-20, 20], k3 to [-10, 10]; verl/trainer/ppo/core_algos.py kl_penalty), which these two random
// models reach on some tokens.
double kl(double old, double ref, const std::string& e) {
  double d = ref - old;
  if (e == "k1") return -d;
  if (e == "k2") return 0.5 * d * d;
  d = std::clamp(d, -20.0, 20.0);
  return std::clamp(std::exp(d) - d - 1, -10.0, 10.0);
}

struct Expected {
  double loss = 0, raw_loss = 0, mean_penalty = 0;
};

// Penalised rewards, GRPO group advantages (verl: (r - mean) / (unbiased std + eps); a group of
// one: mean 0, std 1), and the one-epoch loss at ratio 1: token-mean of -A over trained tokens.
Expected expected(const std::vector<Trajectory>& batch, const QwenModel& policy, const QwenModel& reference,
                  double coef, const std::string& e, double temperature) {
  const auto old = trajectory_logprobs(policy, batch, nullptr, static_cast<float>(temperature));
  const auto ref = trajectory_logprobs(reference, batch, nullptr, static_cast<float>(temperature));
  const size_t n = batch.size();
  std::vector<double> penalised(n), raw(n), tokens(n, 0.0);
  Expected out;
  for (size_t i = 0; i < n; ++i) {
    double sum = 0;
    for (size_t p = 0; p < old[i].size(); ++p)
      if (batch[i].policy_mask[p + 1]) sum += kl(old[i][p], ref[i][p], e), ++tokens[i];
    raw[i] = batch[i].reward;
    penalised[i] = raw[i] - coef * sum;
    out.mean_penalty += coef * sum / static_cast<double>(n);
  }
  auto loss_of = [&](const std::vector<double>& r) {
    std::map<int64_t, std::vector<size_t>> groups;
    for (size_t i = 0; i < n; ++i) groups[batch[i].example_index].push_back(i);
    double loss = 0, all_tokens = 0;
    for (const auto& [g, members] : groups) {
      const double G = static_cast<double>(members.size());
      double mean = 0, var = 0;
      for (size_t i : members) mean += r[i] / G;
      for (size_t i : members) var += (r[i] - mean) * (r[i] - mean);
      const double sd = members.size() == 1 ? 1.0 : std::sqrt(var / (G - 1));
      if (members.size() == 1) mean = 0;
      for (size_t i : members) loss -= tokens[i] * (r[i] - mean) / (sd + 1e-6), all_tokens += tokens[i];
    }
    return loss / all_tokens;
  };
  out.loss = loss_of(penalised), out.raw_loss = loss_of(raw);
  return out;
}

void check_penalty(const std::string& e) {
  const QwenModel policy0 = random_model(tiny_config(), 41, 0.3f), reference = random_model(tiny_config(), 42, 0.3f);
  const std::vector<Trajectory> batch = batch_with_edge_groups();
  rl::GrpoConfig gc;
  gc.filter = rl::GrpoFilterConfig{false, false, false, false};
  gc.temperature = 0.6f;
  gc.kl_reward_coef = 0.2f;
  gc.kl_reward_estimator = &rl::find_kl_estimator(e);
  gc.schedule.lr = 1e-3f;
  QwenModel policy = policy0;
  alloc_grads(policy);
  rl::OptimizerState opt = rl::make_optimizer_state(policy.num_params);
  TrainOptions o;
  o.max_tokens = 12;  // several micro-batches in the penalty's pass and the step's
  o.logprob_chunk = 8;
  TrainState state = make_train_state(policy.config, o);
  const rl::GrpoStepStats st = rl::grpo_step(policy, &reference, opt, state, batch, gc);
  ASSERT_EQ(st.updates, 1);
  EXPECT_GE(st.micro_batches, 3);

  const Expected want = expected(batch, policy0, reference, 0.2, e, 0.6);
  // Log-probs from differently packed f32 forwards agree to ~1e-6 and the kernel rounds rewards
  // to float (~1e-7 relative): 1e-5 relative is ample, and far below what the penalty moves.
  const double tol = 1e-5 * (1 + std::fabs(want.loss));
  ASSERT_GT(std::fabs(want.loss - want.raw_loss), 100 * tol) << "the penalty must change the advantages";
  EXPECT_NEAR(st.loss, want.loss, tol);
  EXPECT_TRUE(st.kl_in_reward);
  ASSERT_GT(want.mean_penalty, 0);
  EXPECT_NEAR(st.kl_penalty, want.mean_penalty, 1e-5 * want.mean_penalty);
  // The logged reward is the environment's, before the penalty.
  double raw_mean = 0;
  for (const Trajectory& t : batch) raw_mean += t.reward / static_cast<double>(batch.size());
  EXPECT_NEAR(st.reward_mean, raw_mean, 1e-12);
}

TEST(GrpoKlReward, K1PenaltyEntersTheGroupAdvantages) { check_penalty("k1"); }
TEST(GrpoKlReward, K3PenaltyEntersTheGroupAdvantages) { check_penalty("k3"); }

// Gradient accumulation splits the batch by prompt: each shard penalises its own trajectories,
// and the step matches the unsplit one (f32 rounding of the summed gradients only).
TEST(GrpoKlReward, ShardsByPromptGiveTheUnsplitStep) {
  const QwenModel start = random_model(tiny_config(), 43, 0.3f), reference = random_model(tiny_config(), 44, 0.3f);
  rl::GrpoConfig gc;
  gc.filter = rl::GrpoFilterConfig{false, false, false, false};
  gc.kl_reward_coef = 0.5f;
  gc.schedule.lr = 1e-3f;
  rl::GrpoStepStats st[2];
  for (int accum = 1; accum <= 2; ++accum) {
    QwenModel policy = start;
    alloc_grads(policy);
    rl::OptimizerState opt = rl::make_optimizer_state(policy.num_params);
    TrainOptions o;
    o.max_tokens = 64;
    o.logprob_chunk = 8;
    TrainState state = make_train_state(policy.config, o);
    rl::Policy p = rl::cpu_policy(policy), r = rl::cpu_policy(reference);
    rl::PolicyActivations acts;
    acts.host = std::move(state);
    rl::DataParallel dp;
    dp.grad_accum = accum;
    st[accum - 1] = rl::grpo_step(p, &r, opt, acts, batch_with_edge_groups(), gc, dp);
  }
  EXPECT_GT(st[0].kl_penalty, 0);
  EXPECT_NEAR(st[1].kl_penalty, st[0].kl_penalty, 1e-6 * st[0].kl_penalty);
  EXPECT_NEAR(st[1].loss, st[0].loss, 1e-6 * (1 + std::fabs(st[0].loss)));
  EXPECT_NEAR(st[1].grad_norm, st[0].grad_norm, 1e-5 * st[0].grad_norm);
}

TEST(GrpoKlReward, NeedsAReferenceModel) {
  QwenModel policy = random_model(tiny_config(), 45, 0.3f);
  alloc_grads(policy);
  rl::OptimizerState opt = rl::make_optimizer_state(policy.num_params);
  TrainOptions o;
  o.max_tokens = 64;
  TrainState state = make_train_state(policy.config, o);
  rl::GrpoConfig gc;
  gc.kl_reward_coef = 0.1f;
  try {
    rl::grpo_step(policy, nullptr, opt, state, batch_with_edge_groups(), gc);
    ADD_FAILURE() << "a step with kl_reward_coef and no reference ran";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("kl_reward_coef 0.1 needs a reference model"), std::string::npos)
        << err.what();
  }
}

}  // namespace
}  // namespace sqlrl::testing
