// The entropy bonus (GrpoConfig::entropy_coef; verl's actor entropy_coeff in
// verl/workers/actor/dp_actor.py: policy_loss = pg_loss - entropy_coeff * entropy_loss, with
// entropy_loss aggregated by the same agg_loss as pg_loss): a step with coefficient C must move
// the loss by -C sum_t w_t H_t and the gradient by -C d(sum_t w_t H_t)/d(param), w_t the policy
// term's per-token weights written here in float64 from rl/grpo/loss_agg.h's formulas.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "model/train.h"
#include "rl/grpo/grpo.h"
#include "tests/rl_grpo/grpo_fixture.h"

namespace sqlrl::testing {
namespace {

using rl::LossAgg;
using rl::Trajectory;

// Ragged trajectories in two groups of three; prompt and observation tokens are masked.
std::vector<Trajectory> ragged_batch() {
  std::vector<Trajectory> b;
  b.push_back(make_trajectory(0, 0, {1, 2, 3}, {{4, 5, 6}, {7, 8}, {9, 10}}, 1.0));
  b.push_back(make_trajectory(0, 1, {1, 2, 3}, {{11}}, 0.0));
  b.push_back(make_trajectory(0, 2, {1, 2, 3}, {{13, 14, 15, 16, 12}, {17}, {18}}, 0.5));
  b.push_back(make_trajectory(1, 0, {20, 21}, {{4, 4, 4}}, -1.0));
  b.push_back(make_trajectory(1, 1, {20, 21}, {{5, 6, 7, 8, 9, 10, 11}}, 1.0));
  b.push_back(make_trajectory(1, 2, {20, 21}, {{22}, {23, 19}, {2, 3}}, 0.0));
  return b;
}

// w_t of every position of every trajectory (0 off the mask), from the loss_agg.h formulas over
// the whole batch (one mini-batch): token-mean 1/D (D = trained tokens), seq-mean-token-mean
// 1/(n_s D) (D = sequences), seq-mean-token-sum-norm 1/(L D).
std::vector<std::vector<double>> agg_weights(const std::vector<Trajectory>& batch, LossAgg agg, double L) {
  double tokens = 0;
  std::vector<double> n(batch.size(), 0.0);
  for (size_t i = 0; i < batch.size(); ++i) {
    for (size_t p = 1; p < batch[i].policy_mask.size(); ++p) n[i] += batch[i].policy_mask[p];
    tokens += n[i];
  }
  const double D = agg == LossAgg::TokenMean ? tokens : static_cast<double>(batch.size());
  std::vector<std::vector<double>> w(batch.size());
  for (size_t i = 0; i < batch.size(); ++i)
    for (size_t p = 1; p < batch[i].policy_mask.size(); ++p) {
      double ws = agg == LossAgg::TokenMean          ? 1.0 / D
                  : agg == LossAgg::SeqMeanTokenMean ? 1.0 / (n[i] * D)
                                                     : 1.0 / (L * D);
      w[i].push_back(batch[i].policy_mask[p] ? ws : 0.0);
    }
  return w;
}

rl::GrpoConfig step_config(LossAgg agg, float entropy_coef) {
  rl::GrpoConfig gc;
  gc.filter = rl::GrpoFilterConfig{false, false, false, false};
  gc.agg = agg;
  gc.loss_norm_tokens = 16;
  gc.temperature = 0.6f;  // the entropy of softmax(logits / 0.6): the backward carries the scale
  gc.entropy_coef = entropy_coef;
  gc.schedule.lr = 1e-2f;
  gc.max_grad_norm = 0;
  return gc;
}

struct StepResult {
  rl::GrpoStepStats stats;
  std::vector<float> grads;
};
StepResult run_step(const QwenModel& start, const std::vector<Trajectory>& batch, const rl::GrpoConfig& gc) {
  QwenModel m = start;
  alloc_grads(m);
  rl::OptimizerState opt = rl::make_optimizer_state(m.num_params);
  TrainOptions o;
  o.max_tokens = 12;  // several micro-batches: the weights are per micro-batch
  o.logprob_chunk = 8;
  TrainState state = make_train_state(m.config, o);
  StepResult r;
  r.stats = rl::grpo_step(m, nullptr, opt, state, batch, gc);
  r.grads = m.grads;  // the only update's gradient, at the start weights
  return r;
}

void check_bonus(LossAgg agg) {
  SCOPED_TRACE(rl::loss_agg_name(agg));
  const QwenModel start = random_model(tiny_config(), 31, 0.3f);
  const std::vector<Trajectory> batch = ragged_batch();
  const float C = 0.5f;
  const StepResult off = run_step(start, batch, step_config(agg, 0.0f));
  const StepResult on = run_step(start, batch, step_config(agg, C));
  ASSERT_EQ(off.stats.updates, 1);
  ASSERT_EQ(on.stats.updates, 1);
  EXPECT_GE(on.stats.micro_batches, 3);

  // The aggregated entropy sum_t w_t H_t and its gradient, one packed forward/backward of all
  // trajectories at the start weights with dlogprobs 0 and dentropy w.
  const std::vector<std::vector<double>> w = agg_weights(batch, agg, 16.0);
  std::vector<std::vector<float>> entropy;
  trajectory_logprobs(start, batch, &entropy, 0.6f);
  double bonus = 0;
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int32_t> targets;
  std::vector<float> dent;
  for (size_t i = 0; i < batch.size(); ++i) {
    for (size_t p = 0; p < w[i].size(); ++p) bonus += w[i][p] * entropy[i][p], dent.push_back(static_cast<float>(w[i][p]));
    seqs.emplace_back(batch[i].tokens.begin(), batch[i].tokens.end() - 1);
    targets.insert(targets.end(), batch[i].tokens.begin() + 1, batch[i].tokens.end());
  }
  ASSERT_GT(bonus, 0);
  // The loss: the policy term is the same forward's, so only the bonus differs; f32 entropies
  // from differently packed forwards agree to ~1e-6 relative.
  EXPECT_NEAR(on.stats.loss - off.stats.loss, -C * bonus, 1e-5 * (1 + std::fabs(C * bonus)));

  QwenModel check = start;
  alloc_grads(check);
  PackedBatch all = pack_sequences(seqs);
  TrainOptions o;
  o.max_tokens = all.num_tokens();
  o.logprob_chunk = 8;
  TrainState big = make_train_state(check.config, o);
  std::vector<float> lp(targets.size()), ent(targets.size()), zeros(targets.size(), 0.0f);
  forward_logprobs(check, big, all, targets, lp.data(), ent.data(), 1.0f / 0.6f);
  backward_logprobs(check, big, all, targets, zeros.data(), dent.data(), ent.data());
  double emax = 0, gmax = 0, diff = 0;
  for (size_t k = 0; k < check.grads.size(); ++k) {
    const double want = -static_cast<double>(C) * check.grads[k];
    emax = std::max(emax, std::fabs(want));
    gmax = std::max({gmax, std::fabs(double(on.grads[k])), std::fabs(double(off.grads[k]))});
    diff = std::max(diff, std::fabs((double(on.grads[k]) - off.grads[k]) - want));
  }
  // The bonus must be a sizeable part of the gradient, or the check below would be empty.
  ASSERT_GT(emax, 0.05 * gmax) << "the entropy term is too small to check";
  // f32 sums over differently packed micro-batches, and the two terms share each dlogit row:
  // rounding of ~1e-6 of the largest gradient element.
  EXPECT_LE(diff, 1e-4 * gmax) << "entropy part " << emax << ", gradient " << gmax;
}

TEST(GrpoEntropyBonus, TokenMeanMovesTheGradientByMinusCoefTimesTheEntropyGradient) {
  check_bonus(LossAgg::TokenMean);
}
TEST(GrpoEntropyBonus, SeqMeanTokenMeanMovesTheGradientByMinusCoefTimesTheEntropyGradient) {
  check_bonus(LossAgg::SeqMeanTokenMean);
}
TEST(GrpoEntropyBonus, SeqMeanTokenSumNormMovesTheGradientByMinusCoefTimesTheEntropyGradient) {
  check_bonus(LossAgg::SeqMeanTokenSumNorm);
}

// Every epoch differentiates its own forward's entropy: at lr 0 the weights never move, so a
// second epoch must reproduce the first's gradient and loss bit for bit (an epoch reusing the
// first epoch's entropy buffer, which holds the last micro-batch's rows, would not).
TEST(GrpoEntropyBonus, EveryEpochUsesItsOwnEntropy) {
  const QwenModel start = random_model(tiny_config(), 32, 0.3f);
  rl::GrpoConfig gc = step_config(LossAgg::TokenMean, 0.5f);
  gc.schedule.lr = 0;
  gc.adamw.weight_decay = 0;
  const StepResult one = run_step(start, ragged_batch(), gc);
  gc.ppo_epochs = 2;
  const StepResult two = run_step(start, ragged_batch(), gc);
  ASSERT_EQ(two.stats.updates, 2);
  EXPECT_EQ(two.stats.loss, one.stats.loss);
  EXPECT_EQ(two.grads, one.grads);
}

}  // namespace
}  // namespace sqlrl::testing
