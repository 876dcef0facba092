// The trainer step end to end on a tiny random Qwen3: one update against a float64
// re-implementation (loss, stats, gradient, AdamW with clipping) for both aggregations with k3
// KL; exact resume through the optimizer file; and a learning signal.
#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "model/train.h"
#include "rl/grpo/grpo.h"
#include "tests/kernels/ref.h"
#include "tests/rl_grpo/grpo_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::testing {
namespace {

using rl::LossAgg;
using rl::Trajectory;

TrainOptions train_options(int64_t max_tokens) {
  TrainOptions o;
  o.max_tokens = max_tokens;
  o.logprob_chunk = 8;
  return o;
}

std::vector<Trajectory> mixed_batch() {
  std::vector<Trajectory> b;
  b.push_back(make_trajectory(0, 0, {1, 2, 3}, {{4, 5, 6}, {7, 8}, {9, 10}}, 1.0));
  b.push_back(make_trajectory(0, 1, {1, 2, 3}, {{11, 12}}, 0.0));
  b.push_back(make_trajectory(0, 2, {1, 2, 3}, {{13, 14, 15, 16}, {17}, {18}}, 0.5));
  b.push_back(make_trajectory(1, 0, {20, 21}, {{4, 4, 4}}, -1.0));
  b.push_back(make_trajectory(1, 1, {20, 21}, {{5, 6, 7, 8, 9}}, 1.0));
  b.push_back(make_trajectory(1, 2, {20, 21}, {{22}, {23, 19}, {2, 3}}, 0.0));
  return b;
}

// Every trajectory of the batch as one packed sequence list, in float64's terms: the given
// log-probs, the sampler's, the reference's, the group advantages (groups of 3: (r - mean) /
// (sample std + 1e-6)), the mask and the sequence bounds.
struct FlatBatch {
  std::vector<double> logp;
  std::vector<float> sampler, ref, adv;
  std::vector<uint8_t> mask;
  std::vector<int32_t> cu = {0};
};
FlatBatch flatten(const std::vector<Trajectory>& batch, const std::vector<std::vector<float>>& lp,
                  const std::vector<std::vector<float>>& ref_lp) {
  FlatBatch f;
  std::map<int64_t, std::vector<double>> groups;
  for (const Trajectory& t : batch) groups[t.example_index].push_back(t.reward);
  for (size_t i = 0; i < batch.size(); ++i) {
    const std::vector<double>& r = groups[batch[i].example_index];
    double mean = (r[0] + r[1] + r[2]) / 3, var = 0;
    for (double x : r) var += (x - mean) * (x - mean) / 2;
    for (size_t p = 0; p < lp[i].size(); ++p) {
      f.logp.push_back(lp[i][p]), f.sampler.push_back(batch[i].sampler_logprobs[p + 1]), f.ref.push_back(ref_lp[i][p]);
      f.adv.push_back(static_cast<float>((batch[i].reward - mean) / (std::sqrt(var) + 1e-6)));
      f.mask.push_back(batch[i].policy_mask[p + 1]);
    }
    f.cu.push_back(static_cast<int32_t>(f.logp.size()));
  }
  return f;
}

// temperature != 1: the step trains softmax(logits / temperature), the policy that sampled; the
// float64 side uses log-probs and a backward at that temperature, so a step that ignored
// GrpoConfig::temperature would miss the loss, entropy and gradient checks.
void check_one_update(LossAgg agg, float temperature = 1.0f) {
  QwenConfig cfg = tiny_config();
  QwenModel policy = random_model(cfg, 11, 0.3f), reference = random_model(cfg, 12, 0.3f);
  std::vector<Trajectory> batch = mixed_batch();
  // Sampler log-probs off the policy's own by -0.4..+0.4 so that both clip sides are reached.
  std::vector<std::vector<float>> entropy;
  std::vector<std::vector<float>> lp = trajectory_logprobs(policy, batch, &entropy, temperature),
                                  ref_lp = trajectory_logprobs(reference, batch, nullptr, temperature);
  for (size_t i = 0; i < batch.size(); ++i)
    for (size_t p = 0; p < lp[i].size(); ++p)
      batch[i].sampler_logprobs[p + 1] = batch[i].policy_mask[p + 1] ? lp[i][p] + 0.4f * std::sin(3.0f * (i * 7 + p)) : 0.0f;
  rl::GrpoConfig gc;
  gc.filter = rl::GrpoFilterConfig{false, false, false, false};
  gc.clip_low = 0.2f, gc.clip_high = 0.28f, gc.kl_coef = 0.1f, gc.agg = agg;
  gc.use_sampler_logprobs = true;
  gc.temperature = temperature;
  gc.schedule.lr = 1e-2f;
  gc.max_grad_norm = 0.05f;
  QwenModel before = policy;
  alloc_grads(policy);
  rl::OptimizerState opt = rl::make_optimizer_state(policy.num_params);
  TrainState state = make_train_state(cfg, train_options(12));  // several micro-batches
  rl::GrpoStepStats st = rl::grpo_step(policy, &reference, opt, state, batch, gc);
  EXPECT_GE(st.micro_batches, 3);
  EXPECT_EQ(st.updates, 1);

  // Float64: all trajectories as one packed sequence list; old = the sampler's log-probs.
  const FlatBatch f = flatten(batch, lp, ref_lp);
  const std::vector<double>& logp = f.logp;
  const std::vector<float>&old = f.sampler, &ref = f.ref, &adv = f.adv;
  const std::vector<uint8_t>& mask = f.mask;
  const std::vector<int32_t>& cu = f.cu;
  double tokens = 0;
  for (uint8_t m : mask) tokens += m;
  double denom = agg == LossAgg::TokenMean ? tokens : static_cast<double>(batch.size());
  RefLoss want = ref_grpo_loss(logp, old, &ref, adv, mask, cu, 0.2, 0.28, 0.1, agg == LossAgg::TokenMean, denom);
  EXPECT_GT(want.clipped, 0);
  EXPECT_LT(want.clipped, want.tokens);
  // The model's f32 log-probs differ by micro-batch packing only in summation order (~1e-6).
  EXPECT_NEAR(st.loss, want.loss, 1e-5 * (1 + std::fabs(want.loss)));
  EXPECT_NEAR(st.clip_fraction, want.clipped / want.tokens, 1e-12);
  EXPECT_NEAR(st.approx_kl, want.approx_kl / want.tokens, 1e-5);
  EXPECT_NEAR(st.ratio_mean, want.ratio / want.tokens, 1e-5);
  EXPECT_NEAR(st.ref_kl, want.ref_kl / want.tokens, 1e-5);
  EXPECT_EQ(st.tokens, static_cast<int64_t>(tokens));
  // Entropy: mean over the policy tokens, from the pre-update forward (one mini-batch here);
  // per-trajectory forwards vs packed micro-batches differ in rounding only (~1e-6).
  double entropy_sum = 0;
  for (size_t i = 0; i < batch.size(); ++i)
    for (size_t p = 0; p < entropy[i].size(); ++p)
      if (batch[i].policy_mask[p + 1]) entropy_sum += entropy[i][p];
  EXPECT_GT(entropy_sum, 0);
  EXPECT_NEAR(st.entropy, entropy_sum / tokens, 1e-5);

  // Gradient: the model's backward of the reference dlogp on the pre-update weights.
  QwenModel check = before;
  alloc_grads(check);
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int32_t> targets;
  for (const Trajectory& t : batch) {
    seqs.emplace_back(t.tokens.begin(), t.tokens.end() - 1);
    targets.insert(targets.end(), t.tokens.begin() + 1, t.tokens.end());
  }
  PackedBatch all = pack_sequences(seqs);
  TrainState big = make_train_state(cfg, train_options(all.num_tokens()));
  std::vector<float> scratch(targets.size()), dl(want.dlogp.begin(), want.dlogp.end());
  forward_logprobs(check, big, all, targets, scratch.data(), nullptr, 1.0f / temperature);
  backward_logprobs(check, big, all, targets, dl.data());
  double gmax = 0, gdiff = 0, sq = 0;
  for (size_t k = 0; k < check.grads.size(); ++k) {
    gmax = std::max(gmax, std::fabs(double(check.grads[k])));
    gdiff = std::max(gdiff, std::fabs(double(check.grads[k]) - policy.grads[k]));
    sq += double(policy.grads[k]) * policy.grads[k];
  }
  EXPECT_GT(gmax, 0);
  EXPECT_LE(gdiff, 1e-4 * gmax);  // f32 sums over differently packed tokens
  EXPECT_NEAR(st.grad_norm, std::sqrt(sq), 1e-9 * std::sqrt(sq));
  ASSERT_GT(st.grad_norm, 0.05) << "the case should exercise clipping";

  // AdamW step 1 in float64 from the trainer's own gradient: clip, decay, bias correction.
  RefAdam ra{std::vector<double>(before.params.begin(), before.params.end()),
             std::vector<double>(before.params.size(), 0.0), std::vector<double>(before.params.size(), 0.0)};
  double scale = std::min(1.0, 0.05 / (std::sqrt(sq) + 1e-6));
  ref_adamw_step(ra, policy.grads, scale, 1e-2, 0.9, 0.999, 1e-8, 0.01, 1);
  // Step-one updates are +-lr * g/(|g| + eps'): f32 rounding of a ~1e-2 step, ~1e-9 absolute.
  EXPECT_LE(error_budget_ratio(policy.params, ra.p, 1e-7, 1e-6), 1.0);
  EXPECT_EQ(opt.adam_step, 1);
  EXPECT_EQ(opt.train_step, 1);
}

// Groups whose 40-token prompts are packed once (shared prefixes) against the same step with
// every sequence packed whole: one fewer forward of each prompt per sharer, the same update up
// to f32 reassociation in the attention backward.
TEST(GrpoStep, SharedPromptsGiveTheUnsharedUpdate) {
  QwenConfig cfg = tiny_config();
  std::vector<int32_t> p0, p1;
  for (int32_t i = 0; i < 40; ++i) p0.push_back((i * 7 + 1) % 24), p1.push_back((i * 5 + 2) % 24);
  p1[0] = p0[0], p1[1] = p0[1];  // a 2-token common start: too short to share across groups
  std::vector<Trajectory> batch;
  batch.push_back(make_trajectory(0, 0, p0, {{4, 5, 6}, {7, 8}, {9, 10}}, 1.0));
  batch.push_back(make_trajectory(1, 0, p1, {{4, 4, 4}}, -1.0));
  batch.push_back(make_trajectory(0, 1, p0, {{11, 12}}, 0.0));
  batch.push_back(make_trajectory(1, 1, p1, {{5, 6, 7, 8, 9}}, 1.0));
  batch.push_back(make_trajectory(0, 2, p0, {{13, 14, 15, 16}, {17}, {18}}, 0.5));
  batch.push_back(make_trajectory(1, 2, p1, {{22}, {23, 19}, {2, 3}}, 0.0));
  rl::GrpoStepStats stats[2];
  QwenModel models[2] = {random_model(cfg, 21, 0.3f), random_model(cfg, 21, 0.3f)};
  for (int shared = 0; shared < 2; ++shared) {
    rl::GrpoConfig gc;
    gc.filter = rl::GrpoFilterConfig{false, false, false, false};
    gc.schedule.lr = 1e-2f;
    gc.share_prefixes = shared == 1;
    alloc_grads(models[shared]);
    rl::OptimizerState opt = rl::make_optimizer_state(models[shared].num_params);
    TrainState state = make_train_state(cfg, train_options(400));
    stats[shared] = rl::grpo_step(models[shared], nullptr, opt, state, batch, gc);
  }
  // 6 x 40 prompt rows whole; shared, each group's prompt once (its last row is a sharer's own
  // too: the first sampled token is predicted from it).
  EXPECT_EQ(stats[0].positions - stats[1].positions, 2 * 2 * 39);
  EXPECT_EQ(stats[0].tokens, stats[1].tokens);
  EXPECT_NEAR(stats[1].loss, stats[0].loss, 1e-5 * (1 + std::fabs(stats[0].loss)));
  EXPECT_NEAR(stats[1].entropy, stats[0].entropy, 1e-5 * stats[0].entropy);
  EXPECT_NEAR(stats[1].grad_norm, stats[0].grad_norm, 1e-5 * stats[0].grad_norm);
  double gmax = 0, gdiff = 0;
  for (size_t k = 0; k < models[0].grads.size(); ++k) {
    gmax = std::max(gmax, std::fabs(double(models[0].grads[k])));
    gdiff = std::max(gdiff, std::fabs(double(models[0].grads[k]) - models[1].grads[k]));
  }
  EXPECT_GT(gmax, 0);
  EXPECT_LE(gdiff, 1e-4 * gmax);
}

// spare_copied_answers gives exactly the update of the same batch with the spared answer turn's
// tokens taken out of the policy mask by hand (loss, denominator and gradient alike), and not the
// update of the batch as it is.
TEST(GrpoStep, SpareCopiedAnswersIsTheUpdateWithoutThatTurn) {
  QwenConfig cfg = tiny_config();
  std::vector<Trajectory> batch;
  batch.push_back(make_two_turn(0, 0, 1.0, "SELECT a FROM t", true, "SELECT a FROM t"));
  batch.push_back(make_two_turn(0, 1, 0.0, "SELECT b FROM t", true, "SELECT b FROM t"));
  batch.push_back(make_two_turn(0, 2, 0.0, "SELECT b FROM t", true, "SELECT c FROM t"));
  std::vector<Trajectory> masked = batch;
  for (size_t p = static_cast<size_t>(masked[1].last_turn_begin()); p < masked[1].policy_mask.size(); ++p)
    masked[1].policy_mask[p] = 0;
  std::vector<QwenModel> models;
  std::vector<rl::GrpoStepStats> stats;
  for (int run = 0; run < 3; ++run) {  // spared, masked by hand, as it is
    models.push_back(random_model(cfg, 13, 0.3f));
    rl::GrpoConfig gc;
    gc.schedule.lr = 1e-2f;
    gc.filter.spare_copied_answers = run == 0;
    alloc_grads(models.back());
    rl::OptimizerState opt = rl::make_optimizer_state(models.back().num_params);
    TrainState state = make_train_state(cfg, train_options(64));
    stats.push_back(rl::grpo_step(models.back(), nullptr, opt, state, run == 1 ? masked : batch, gc));
  }
  EXPECT_EQ(stats[0].filtered.spared_answers, 1);
  EXPECT_EQ(stats[1].filtered.spared_answers, 0);
  EXPECT_EQ(stats[0].tokens, stats[1].tokens);
  EXPECT_EQ(stats[2].tokens - stats[0].tokens, 3);  // the answer turn's 3 tokens
  EXPECT_EQ(stats[0].loss, stats[1].loss);
  EXPECT_EQ(models[0].params, models[1].params);  // the same computation, bit for bit
  EXPECT_NE(models[0].params, models[2].params);
}

// zero_variance_in_denominator: dropping a flat group (advantage 0) but counting its tokens gives
// the gradient of training on it; without the count, the gradient is larger by total / kept
// trained tokens.
TEST(GrpoStep, ZeroVarianceInDenominatorGivesTheUpdateOfTrainingOnThem) {
  QwenConfig cfg = tiny_config();
  std::vector<Trajectory> batch = mixed_batch();
  for (int32_t k = 0; k < 3; ++k) batch.push_back(make_trajectory(2, k, {3, 4, 5}, {{6 + k, 7}, {8}}, 1.0));
  const rl::GrpoFilterConfig counted{false, false, false, true, true}, trained{false, false, false, false, false},
      dropped{false, false, false, true, false};
  std::vector<QwenModel> models;
  std::vector<rl::GrpoStepStats> stats;
  for (const rl::GrpoFilterConfig& f : {counted, trained, dropped}) {
    models.push_back(random_model(cfg, 11, 0.3f));
    rl::GrpoConfig gc;
    gc.filter = f;
    gc.max_grad_norm = 0.0f;
    alloc_grads(models.back());
    rl::OptimizerState opt = rl::make_optimizer_state(models.back().num_params);
    TrainState state = make_train_state(cfg, train_options(64));
    stats.push_back(rl::grpo_step(models.back(), nullptr, opt, state, batch, gc));
  }
  EXPECT_EQ(stats[0].filtered.zero_variance_trajectories, 3);
  EXPECT_EQ(stats[1].filtered.zero_variance_trajectories, 0);
  int64_t flat_tokens = stats[1].tokens - stats[0].tokens;
  EXPECT_GT(flat_tokens, 0);
  double gmax = 0, diff_trained = 0, diff_scaled = 0;
  const double ratio = static_cast<double>(stats[1].tokens) / static_cast<double>(stats[0].tokens);
  for (size_t k = 0; k < models[0].grads.size(); ++k) {
    double g = models[0].grads[k];
    gmax = std::max(gmax, std::fabs(g));
    diff_trained = std::max(diff_trained, std::fabs(g - models[1].grads[k]));
    diff_scaled = std::max(diff_scaled, std::fabs(g * ratio - models[2].grads[k]));
  }
  EXPECT_GT(gmax, 0);
  EXPECT_LE(diff_trained, 1e-5 * gmax);        // f32 sums over differently packed tokens
  EXPECT_LE(diff_scaled, 1e-5 * ratio * gmax);
  EXPECT_NEAR(stats[0].loss, stats[1].loss, 1e-6 * (1 + std::fabs(stats[1].loss)));
}

TEST(GrpoStep, RejectsMissingGradientsReferenceOrSamplerLogprobs) {
  QwenConfig cfg = tiny_config();
  QwenModel policy = random_model(cfg, 1);
  rl::OptimizerState opt = rl::make_optimizer_state(policy.num_params);
  TrainState state = make_train_state(cfg, train_options(16));
  rl::GrpoConfig gc;
  EXPECT_THROW(rl::grpo_step(policy, nullptr, opt, state, mixed_batch(), gc), Error);  // grads not allocated
  alloc_grads(policy);
  gc.kl_coef = 0.01f;
  EXPECT_THROW(rl::grpo_step(policy, nullptr, opt, state, mixed_batch(), gc), Error);
  gc.kl_coef = 0.0f;
  gc.use_sampler_logprobs = true;
  std::vector<Trajectory> batch = mixed_batch();
  batch[2].sampler_logprobs.clear();
  EXPECT_THROW(rl::grpo_step(policy, nullptr, opt, state, batch, gc), Error);
  EXPECT_EQ(opt.adam_step, 0);
}

TEST(GrpoStep, AllFilteredMakesNoUpdateButAdvancesTheSchedule) {
  QwenConfig cfg = tiny_config();
  QwenModel policy = random_model(cfg, 1);
  alloc_grads(policy);
  std::vector<float> initial = policy.params;
  rl::OptimizerState opt = rl::make_optimizer_state(policy.num_params);
  TrainState state = make_train_state(cfg, train_options(16));
  std::vector<Trajectory> batch = mixed_batch();
  for (Trajectory& t : batch) t.reward = 0.25;  // every group flat
  rl::GrpoStepStats st = rl::grpo_step(policy, nullptr, opt, state, batch, rl::GrpoConfig{});
  EXPECT_EQ(st.updates, 0);
  EXPECT_EQ(st.filtered.zero_variance_groups, 2);
  EXPECT_EQ(st.filtered.kept, 0);
  EXPECT_EQ(opt.train_step, 1);
  EXPECT_EQ(opt.adam_step, 0);
  EXPECT_TRUE(policy.params == initial);
}

// Rollout importance sampling (rl/grpo/rollout_is.h) in the step: sampler log-probs off the
// trainer's by -0.4..+0.4, the old log-probs the trainer's own, so rho = exp(old - sampler) spans
// [0.67, 1.49]. Each mode's loss, trained-token count and mismatch metrics against float64 from
// the definitions: truncate weighs the policy term by min(rho, 1.2); mask drops the tokens (token
// level, [0.8, 1.2]) or whole sequences (geometric, [0.97, 1.03]) outside the bounds from the loss and its denominator and
// weighs the rest by rho; off leaves the step as it was and still measures. Catches weights
// applied to the KL term, a rejected token left in the denominator, the first mini-batch's old
// log-probs missing when the mask is decided, and metrics over the wrong tokens.
TEST(GrpoStep, RolloutImportanceSamplingMatchesFloat64) {
  QwenConfig cfg = tiny_config();
  const QwenModel initial = random_model(cfg, 11, 0.3f), reference = random_model(cfg, 12, 0.3f);
  std::vector<Trajectory> batch = mixed_batch();
  const std::vector<std::vector<float>> lp = trajectory_logprobs(initial, batch, nullptr, 1.0f),
                                        ref_lp = trajectory_logprobs(reference, batch, nullptr, 1.0f);
  for (size_t i = 0; i < batch.size(); ++i)
    for (size_t p = 0; p < lp[i].size(); ++p)
      batch[i].sampler_logprobs[p + 1] = batch[i].policy_mask[p + 1] ? lp[i][p] + 0.4f * std::sin(3.0f * (i * 7 + p)) : 0.0f;
  // Float64 inputs: every trajectory as one sequence, old = the trainer's log-probs.
  const FlatBatch f = flatten(batch, lp, ref_lp);
  const std::vector<double>& logp = f.logp;
  const std::vector<float> old(f.logp.begin(), f.logp.end());  // the f32 log-probs, exactly
  const std::vector<float>&ref = f.ref, &adv = f.adv, &sampler = f.sampler;
  const std::vector<uint8_t>& mask = f.mask;
  const std::vector<int32_t>& cu = f.cu;
  double tokens = 0, k1 = 0, k3 = 0;
  for (size_t t = 0; t < mask.size(); ++t)
    if (mask[t]) {
      const double lr = static_cast<double>(old[t]) - sampler[t];
      tokens += 1, k1 += -lr, k3 += std::exp(lr) - 1 - lr;
    }
  struct Case {
    const char* mode;
    const char* level;
    double lower, upper;
  };
  for (Case c : {Case{"off", "token", 0.8, 1.2}, Case{"truncate", "token", 0.8, 1.2}, Case{"mask", "token", 0.8, 1.2},
                 Case{"mask", "geometric", 0.97, 1.03}}) {
    SCOPED_TRACE(std::string(c.mode) + " " + c.level);
    // Expected weights and mask.
    std::vector<double> v(mask.size(), 1.0);
    std::vector<uint8_t> kept = mask;
    double rejected = 0;
    for (size_t s = 0; s + 1 < cu.size(); ++s) {
      double sum = 0, n = 0;
      for (int32_t t = cu[s]; t < cu[s + 1]; ++t)
        if (mask[t]) sum += static_cast<double>(old[t]) - sampler[t], n += 1;
      for (int32_t t = cu[s]; t < cu[s + 1]; ++t) {
        if (!mask[t]) continue;
        const double rho = std::string(c.level) == "token" ? std::exp(static_cast<double>(old[t]) - sampler[t])
                                                           : std::exp(sum / n);
        if (std::string(c.mode) == "truncate") v[t] = std::min(rho, c.upper);
        if (std::string(c.mode) == "mask") {
          if (rho < c.lower || rho > c.upper) kept[t] = 0, rejected += 1;
          else v[t] = rho;
        }
      }
    }
    double left = 0;
    for (uint8_t m : kept) left += m;
    if (std::string(c.mode) == "mask") {
      ASSERT_TRUE(rejected > 0 && left > 0) << "the case should reject some";
    }
    const RefLoss want = ref_grpo_loss_weighted(logp, old, &ref, adv, ref_loss_weights(kept, cu, true, left), 0.2, 0.28,
                                                0.1, &v);
    QwenModel policy = initial;
    alloc_grads(policy);
    rl::GrpoConfig gc;
    gc.filter = rl::GrpoFilterConfig{false, false, false, false};
    gc.clip_low = 0.2f, gc.clip_high = 0.28f, gc.kl_coef = 0.1f;
    gc.rollout_is = {rl::parse_rollout_is_mode(c.mode), rl::parse_rollout_is_level(c.level), static_cast<float>(c.upper),
                     static_cast<float>(c.lower)};
    rl::OptimizerState opt = rl::make_optimizer_state(policy.num_params);
    TrainState state = make_train_state(cfg, train_options(12));
    const rl::GrpoStepStats st = rl::grpo_step(policy, &reference, opt, state, batch, gc);
    EXPECT_EQ(st.tokens, static_cast<int64_t>(left));
    EXPECT_NEAR(st.loss, want.loss, 1e-5 * (1 + std::fabs(want.loss)));
    EXPECT_EQ(st.mismatch_tokens, tokens);
    EXPECT_NEAR(st.mismatch_kl, k1 / tokens, 1e-6);
    EXPECT_NEAR(st.mismatch_k3, k3 / tokens, 1e-6);
    EXPECT_NEAR(st.is_masked, rejected / tokens, 1e-12);
    EXPECT_GT(st.mismatch_k3, 1e-3);
  }
}

TEST(GrpoStep, OneUpdateMatchesFloat64TokenMean) { check_one_update(LossAgg::TokenMean); }
TEST(GrpoStep, OneUpdateMatchesFloat64SeqMeanTokenMean) { check_one_update(LossAgg::SeqMeanTokenMean); }
TEST(GrpoStep, OneUpdateAtSamplingTemperatureMatchesFloat64) { check_one_update(LossAgg::TokenMean, 0.6f); }

rl::GrpoConfig resume_config() {
  rl::GrpoConfig gc;
  gc.filter.drop_no_valid_action = true;
  gc.ppo_epochs = 2, gc.mini_batches = 2;
  gc.schedule = rl::LrSchedule{1e-2f, 1, 4, rl::LrDecay::Cosine, 0.1f};
  gc.max_grad_norm = 0.5f;
  return gc;
}

TEST(GrpoStep, ResumeThroughTheOptimizerFileIsBitExact) {
  QwenConfig cfg = tiny_config();
  std::vector<Trajectory> batch = mixed_batch();
  rl::GrpoConfig gc = resume_config();
  TrainState state = make_train_state(cfg, train_options(16));
  QwenModel a = random_model(cfg, 5, 0.3f);
  alloc_grads(a);
  rl::OptimizerState oa = rl::make_optimizer_state(a.num_params);
  for (int s = 0; s < 3; ++s) rl::grpo_step(a, nullptr, oa, state, batch, gc);
  ASSERT_FALSE(a.params == random_model(cfg, 5, 0.3f).params) << "the steps should have moved the weights";

  QwenModel b = random_model(cfg, 5, 0.3f);
  alloc_grads(b);
  rl::OptimizerState ob = rl::make_optimizer_state(b.num_params);
  rl::grpo_step(b, nullptr, ob, state, batch, gc);
  std::string path = (std::filesystem::temp_directory_path() / ("grpo_resume_" + std::to_string(getpid()) + ".safetensors")).string();
  rl::save_optimizer(ob, path);
  QwenModel c = make_model(cfg);  // a fresh process: weights as saved, optimizer from the file
  c.params = b.params;
  alloc_grads(c);
  rl::OptimizerState oc = rl::load_optimizer(path, c.num_params);
  std::filesystem::remove(path);
  for (int s = 0; s < 2; ++s) rl::grpo_step(c, nullptr, oc, state, batch, gc);
  EXPECT_EQ(oc.adam_step, 12);  // 3 steps x 2 epochs x 2 mini-batches
  EXPECT_TRUE(c.params == a.params) << "resumed weights differ from the uninterrupted run";
  EXPECT_TRUE(oc.m == oa.m && oc.v == oa.v);
}

}  // namespace
}  // namespace sqlrl::testing
