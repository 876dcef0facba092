// The GRPO trainer step on the CPU model: trajectories of one rollout batch -> groups ->
// advantages -> GRPO-Filter -> mini-batches of packed micro-batches -> old (and reference)
// log-probs -> PPO epochs x mini-batches of clipped-ratio updates with gradient accumulation,
// grad-norm clip and AdamW. The algorithm variants (advantage estimator, policy loss, KL
// estimator) are rows of rl/grpo/algos.h, picked once from the config; AdamW is kernels/adamw.h.
//
// Choices (verl's where it has one):
// - Groups are the trajectories sharing example_index. Mean/std (unbiased) use every sample of
//   the group, dropped ones included (their rewards, e.g. -1 for bad format, still shape the
//   baseline), except the infrastructure failures (GrpoFilterConfig::exclude_infra_failures);
//   a group with zero reward variance is dropped whole. Filtered trajectories are then left out
//   of the loss.
// - A sequence of n tokens trains on n - 1 positions: input tokens[0, n-1), target tokens[t+1],
//   mask policy_mask[t+1] (the log-prob of token t+1 is predicted at t).
// - Mini-batches are contiguous slices of the kept trajectories (in batch order); each is packed
//   greedily into micro-batches of at most TrainState::options.max_tokens tokens. The loss
//   aggregation over a mini-batch is rl/grpo/loss_agg.h's (plus the mini-batch's share of the
//   zero-variance trajectories with zero_variance_in_denominator).
// - Every log-prob is of softmax(logits / temperature), the rollout's sampling distribution
//   before top-p/top-k truncation, as verl's actor computes it.
// - The LR schedule advances once per trainer step (one rollout batch), as verl's actor.
#pragma once
#include <cstdint>
#include <vector>

#include "model/train.h"
#include "rl/optimizer.h"
#include "rl/agent/trajectory.h"
#include "rl/grpo/algos.h"
#include "rl/grpo/loss_agg.h"
#include "rl/grpo/rollout_is.h"
#include "rl/policy.h"
#include "rl/data_parallel.h"

namespace sqlrl::rl {

struct GrpoFilterConfig {
  bool drop_truncated = true;        // hit the token cap
  bool drop_malformed = true;        // at least one invalid action
  bool drop_no_valid_action = true;  // not one valid action (exec, memory, answer) in any turn
  bool drop_zero_variance = true;    // whole groups whose rewards are all equal
  // The loss's denominator (tokens, or sequences) also counts the trajectories dropped for zero
  // variance alone: their advantage is 0, so without KL the update is the one of training on them
  // (verl's token-mean without dynamic sampling) and a step with few informative groups moves the
  // weights less. Off: the mean is over the kept trajectories only (DAPO's normalisation, without
  // its refill of the batch).
  bool zero_variance_in_denominator = false;
  // Trajectories with an infrastructure failure (Trajectory::infra_failure: the database could
  // not be read, the machine's wall clock fired under a step budget, ...) are left out of their
  // group's mean and std as well as the loss: their reward measures the machine, and in the
  // baseline it would shift every other sample's advantage. A group left with fewer than 2 valid
  // samples by this is dropped whole (no baseline can be formed from one sample). On by default:
  // without an infrastructure failure nothing changes. Off: they are treated as any other.
  bool exclude_infra_failures = true;
  // Turn-level credit for a copied answer: a trajectory with a negative advantage whose answer
  // repeats, as text, a query it already ran without error (Trajectory::answer_was_executed)
  // trains no token of its answer turn. The error is in that earlier query, whose turn is still
  // pushed down; submitting what was run and observed is what a right trajectory does too, and
  // one advantage on every token would teach the model to re-type its queries instead (the
  // demo's wrong answers are 40-48% such copies). Off: every sampled token takes the advantage.
  bool spare_copied_answers = false;
};

struct GrpoConfig {
  const AdvantageEstimator* advantage_estimator = &advantage_estimators().front();  // rl/grpo/algos.h
  AdvantageOptions advantage;
  GrpoFilterConfig filter;
  float clip_low = 0.2f, clip_high = 0.2f;  // clip-higher: clip_high > clip_low (DAPO 0.28)
  float kl_coef = 0.0f;                     // > 0 needs a reference model
  const KlEstimator* kl_estimator = &find_kl_estimator("k3");  // rl/grpo/algos.h
  // KL in the reward (verl's algorithm.use_kl_in_reward with kl_ctrl.kl_coef and kl_penalty,
  // default "kl" = k1; independent of kl_coef, the KL as a loss, and both may be on): before the
  // group advantages, each trajectory's reward becomes r - kl_reward_coef sum_t kl_t over its
  // trained tokens, kl_t the estimator of the old policy against the reference (rl/grpo/algos.h
  // KlEstimator). verl subtracts coef kl_t per token and, for GAE, credits it per token; GRPO's
  // outcome advantage sums the token rewards of a sequence, which is this sequence penalty. > 0
  // needs a reference model, and costs a policy and a reference forward over the whole batch
  // (dropped trajectories too: their rewards still set their group's mean and std).
  float kl_reward_coef = 0.0f;
  const KlEstimator* kl_reward_estimator = &find_kl_estimator("k1");
  float dual_clip = 0.0f;                   // c > 1: dual-clip of negative advantages; 0: off
  // Entropy bonus (verl's actor entropy_coeff: loss = pg_loss - coef * entropy_loss): the loss
  // gains -entropy_coef sum_t w_t H_t, H_t = -sum_v p log p of the trained softmax, aggregated
  // with the policy term's weights w_t (rl/grpo/loss_agg.h); its gradient flows through the
  // logits (logprob backward's dentropy). 0: off, and the entropy is then only measured.
  float entropy_coef = 0.0f;
  // The policy loss (rl/grpo/algos.h): grpo's clipped token ratios by default.
  const PolicyLoss* policy_loss = &policy_losses().front();
  LossAgg agg = LossAgg::TokenMean;
  int64_t loss_norm_tokens = 0;             // L of seq-mean-token-sum-norm (rl/grpo/loss_agg.h)
  bool use_sampler_logprobs = false;        // old log-probs from the sampler, not a training forward
  // Sampler-vs-trainer correction (rl/grpo/rollout_is.h); its metrics are measured whenever the
  // trajectories carry sampler log-probs and the old log-probs are the trainer's.
  RolloutIsConfig rollout_is;
  // Log-probs (old, reference, trained) are those of softmax(logits / temperature), the policy
  // that sampled the rollouts, as verl's actor divides its logits by the rollout temperature;
  // 0 (greedy rollouts) trains softmax(logits).
  float temperature = 1.0f;
  int64_t ppo_epochs = 1;
  int64_t mini_batches = 1;                 // optimizer updates per epoch
  AdamWConfig adamw;
  LrSchedule schedule;
  float max_grad_norm = 1.0f;               // <= 0: no clipping
  // A group's shared prompt is packed once (pack_micro_batches share_min_tokens), on either device.
  bool share_prefixes = true;
};
// Shortest common start worth sharing: below it the copies cost more than the rows saved.
constexpr int64_t kSharePrefixMinTokens = 32;

struct FilterCounts {
  // Trajectories marked infra_failure (counted whether or not exclude_infra_failures leaves them
  // out; one left out counts under no reason below), and groups dropped because they kept fewer
  // than 2 samples without one.
  int64_t infra = 0, infra_groups = 0;
  int64_t truncated = 0, malformed = 0, no_valid_action = 0;  // trajectories (first reason counts)
  int64_t zero_variance_groups = 0, zero_variance_trajectories = 0;
  int64_t kept = 0, groups = 0, kept_groups = 0;
  int64_t spared_answers = 0;  // kept trajectories whose answer turn was left out (spare_copied_answers)
};

// The kept trajectories with their advantages.
struct GrpoSelection {
  std::vector<int64_t> kept;       // indices into the batch, in batch order
  std::vector<int64_t> zero_variance;  // dropped for zero group variance alone, in batch order
  std::vector<float> advantages;   // [batch.size()]: every trajectory's advantage (dropped ones too;
                                   // 0 for the ones excluded from the baseline and their dropped groups)
  // [batch.size()]: each trajectory trains on tokens before this index only (tokens.size(), or
  // its answer turn's first token when spared: GrpoFilterConfig::spare_copied_answers).
  std::vector<int64_t> train_end;
  FilterCounts counts;
};
// rewards (nullable, [batch.size()]): used instead of each trajectory's own (the KL-penalised ones).
GrpoSelection select_trajectories(const std::vector<Trajectory>& batch, const GrpoConfig& config,
                                  const std::vector<double>* rewards = nullptr);
// A group is informative when its rewards (as the advantage kernel reads them, f32) are not all
// equal: the zero-variance filter and dynamic sampling use this one test.
bool rewards_vary(const std::vector<float>& rewards);

// One packed micro-batch: per-token arrays over batch.num_tokens() positions.
struct MicroBatch {
  std::vector<int64_t> trajectories;  // batch indices, one per sequence
  PackedBatch batch;                  // inputs tokens[0, n-1) of each trajectory (from its shared prefix on)
  std::vector<int32_t> targets;       // tokens[t + 1]
  std::vector<uint8_t> mask;          // policy_mask[t + 1]
  std::vector<float> advantages;      // the trajectory's advantage on each position
  std::vector<float> sampler_logprobs, old_logprobs, ref_logprobs;  // of targets; ref only with KL
  std::vector<float> is_weights;      // rollout importance weights (rollout_is != off)
};
// Packs `indices` (in order) greedily under max_tokens positions per micro-batch; fails naming
// the trajectory when one alone is longer. Trajectories of fewer than 2 tokens are skipped.
// train_end (empty: none): per batch index, targets at or after it are masked out.
// share_min_tokens > 0 (CPU batches only): a trajectory whose first tokens, at least that many
// and up to its first trained one, equal an earlier plain one's in the same micro-batch stores
// only the rest (PackedBatch prefixes): a GRPO group's prompt is run once, not group-size times.
// The log-probs, losses and gradients are those of the unshared batch up to fp32 rounding.
std::vector<MicroBatch> pack_micro_batches(const std::vector<Trajectory>& batch, const std::vector<int64_t>& indices,
                                           const std::vector<float>& advantages, int64_t max_tokens,
                                           int64_t share_min_tokens = 0, const std::vector<int64_t>& train_end = {});

struct GrpoStepStats {
  double loss = 0;            // mean over updates of the mini-batch loss
  double grad_norm = 0;       // mean over updates, before clipping
  double grad_norm_max = 0;
  double clip_fraction = 0;   // of masked tokens, over all epochs and mini-batches
  double approx_kl = 0;       // mean of old - logp (verl's ppo_kl)
  double ratio_mean = 0;
  double ref_kl = 0;          // mean k3 to the reference (0 without KL)
  // KL in the reward (kl_reward_coef > 0, then kl_in_reward): the mean over the batch's
  // trajectories of what was subtracted from the reward, kl_reward_coef sum_t kl_t.
  bool kl_in_reward = false;
  double kl_penalty = 0;
  // Sampler vs trainer (rl/grpo/rollout_is.h), over the trained tokens of the first epoch, before
  // rejection; all 0 when not measured (mismatch_tokens 0).
  double mismatch_tokens = 0;
  double mismatch_kl = 0;       // k1 estimate of KL(sampler || trainer): mean(sampler - old)
  double mismatch_k3 = 0;       // k3 estimate: mean(rho - 1 - log rho), rho = exp(old - sampler)
  double mismatch_abs_log_ratio = 0;
  double is_weight_mean = 0;    // mean importance weight before truncation
  double is_truncated = 0;      // fraction of tokens whose weight was capped (truncate)
  double is_masked = 0;         // fraction of tokens rejected (mask)
  double is_masked_sequences = 0;  // fraction of sequences with a rejected token
  // Mean policy entropy -sum p log p over the masked (policy) tokens, from the first epoch's
  // training forward (verl logs it from its update forward too): before any update when there is
  // one mini-batch.
  double entropy = 0;
  double reward_mean = 0;     // over the whole batch, before filtering (and before any KL penalty)
  int64_t tokens = 0;         // trained (masked) tokens per epoch
  int64_t positions = 0;      // packed positions per epoch
  int64_t updates = 0;        // optimizer updates made
  int64_t micro_batches = 0;  // per epoch
  FilterCounts filtered;
  float lr = 0;
  double seconds = 0;            // the whole step
  double optimizer_seconds = 0;  // of which gradient clipping and AdamW (data parallel: this rank's)
};

// Data parallel (rl/data_parallel.h): a GRPO shard is a consecutive range of the batch's prompts
// with all G samples of each, so groups, advantages and the filter never need another shard; the
// trajectory and kept counts (the number of mini-batches) and each mini-batch's loss denominator
// are summed over shards first.
// One trainer step. `state` plans activations for the micro-batch budget
// (state.options.max_tokens) and is shared with the reference forward; policy.grads must be
// allocated; `reference` may be null when kl_coef == 0 and kl_reward_coef == 0. With no trajectory left after the
// filter, no update is made (the schedule still advances).
GrpoStepStats grpo_step(QwenModel& policy, const QwenModel* reference, OptimizerState& optimizer, TrainState& state,
                        const std::vector<Trajectory>& batch, const GrpoConfig& config);
// The same on either device (rl/policy.h): `state` from policy_init_training; on CUDA the AdamW
// moments are the policy's device ones (optimizer keeps the counters; its m/v are not read).
GrpoStepStats grpo_step(Policy& policy, const Policy* reference, OptimizerState& optimizer, PolicyActivations& state,
                        const std::vector<Trajectory>& batch, const GrpoConfig& config, const DataParallel& dp = {});

}  // namespace sqlrl::rl
