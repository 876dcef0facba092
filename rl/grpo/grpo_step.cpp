// grpo_step (rl/grpo/grpo.h) in named stages: check the inputs, prepare the shards (KL in the
// reward, selection, mini-batches), old and reference log-probs, the updates (epochs x
// mini-batches), and the statistics summed over every shard as named fields.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "rl/grpo/grpo.h"
#include "rl/policy_backend.h"
#include "runtime/error.h"

namespace sqlrl::rl {

GrpoStepStats grpo_step(QwenModel& policy, const QwenModel* reference, OptimizerState& optimizer, TrainState& state,
                        const std::vector<Trajectory>& batch, const GrpoConfig& config) {
  Policy p = cpu_policy(policy), r = reference ? cpu_policy(*reference) : Policy{};
  PolicyActivations acts;
  std::swap(acts.host, state);  // borrowed for the step, handed back below (moves, no copies)
  struct GiveBack {
    PolicyActivations& acts;
    TrainState& state;
    ~GiveBack() { std::swap(acts.host, state); }
  } give_back{acts, state};
  return grpo_step(p, reference ? &r : nullptr, optimizer, acts, batch, config);
}

namespace {

// One shard of the step as this process holds it.
struct Shard {
  const std::vector<Trajectory>* batch = nullptr;
  GrpoSelection sel;
  std::vector<std::vector<MicroBatch>> minis;  // [mini-batch]
  double reward_part = 0;                      // sum of reward / (trajectories of every shard)
  double loss = 0;                             // this update's
  GrpoLossStats totals;
  double entropy_sum = 0, entropy_tokens = 0;
  std::vector<double> rewards;                 // KL in the reward: the penalised rewards
  double kl_penalty = 0;                       // their penalties, summed
  MismatchSums mismatch;
  std::vector<float> grads;                    // grad_accum > 1: this shard's gradient
};

// The shards this process holds, and what the stages share.
struct Step {
  Policy& policy;
  const Policy* reference;
  PolicyActivations& state;
  const GrpoConfig& config;
  const DataParallel& dp;
  float logit_scale = 1;
  bool is_on = false;  // rollout-is corrects the policy term
  std::vector<std::vector<Trajectory>> owned = {};  // grad_accum > 1: the shards' trajectories
  std::vector<Shard> shards = {};
  double dropped_share = 0;  // each mini-batch's share of the zero-variance units (config.filter)
  double trajectories = 0;   // of every shard
};

// Sums over every shard in shard order (sum_over_shards), field by field: `Sums` names its
// fields once, in fields().
template <class Sums>
Sums sum_fields(const DataParallel& dp, std::vector<Sums>& parts) {
  std::vector<std::vector<double>> local;
  for (Sums& p : parts) {
    std::vector<double>& row = local.emplace_back();
    for (const double* f : p.fields()) row.push_back(*f);
  }
  const std::vector<double> all = sum_over_shards(dp, local);
  Sums out;
  const std::vector<double*> f = out.fields();
  check(all.size() == f.size(), "grpo: ", all.size(), " sums for ", f.size(), " fields");
  for (size_t i = 0; i < f.size(); ++i) *f[i] = all[i];
  return out;
}

// What packing the mini-batches needs from every shard.
struct ShardCounts {
  double trajectories = 0, kept = 0;
  double dropped_units = 0;  // the zero-variance trajectories' loss units (rl/grpo/loss_agg.h)
  std::vector<double*> fields() { return {&trajectories, &kept, &dropped_units}; }
};

// The filter's counts that the shards sum, each once (`kept` is summed before packing).
std::vector<int64_t*> filter_fields(FilterCounts& f) {
  return {&f.truncated, &f.malformed, &f.no_valid_action, &f.zero_variance_groups, &f.zero_variance_trajectories,
          &f.groups, &f.kept_groups, &f.infra, &f.infra_groups, &f.spared_answers};
}
size_t filter_field_count() {
  FilterCounts f;
  return filter_fields(f).size();
}

// What the step's statistics sum over every shard.
struct StepSums {
  double reward = 0;  // sum of reward / trajectories
  double clipped = 0, tokens = 0, approx_kl = 0, ratio = 0, ref_kl = 0;  // the loss's, every epoch
  double entropy = 0, entropy_tokens = 0;                                // first epoch
  std::vector<double> filter = std::vector<double>(filter_field_count());  // filter_fields' order
  double trained_tokens = 0, positions = 0, micro_batches = 0;  // per epoch (the first shard counts them)
  double kl_penalty = 0;
  MismatchSums mismatch;
  std::vector<double*> fields() {
    std::vector<double*> f = {&reward, &clipped, &tokens, &approx_kl, &ratio, &ref_kl, &entropy, &entropy_tokens,
                              &trained_tokens, &positions, &micro_batches, &kl_penalty};
    for (double& c : filter) f.push_back(&c);
    for (double* m : mismatch.fields()) f.push_back(m);
    return f;
  }
};

// Per-epoch counts of the packed micro-batches (the first shard reports them).
struct PassCounts {
  int64_t tokens = 0, positions = 0, micro_batches = 0;
};

// grad_accum > 1: the batch's prompts (example_index) in `n` consecutive near-equal ranges.
std::vector<std::vector<Trajectory>> split_by_prompt(const std::vector<Trajectory>& batch, int64_t n) {
  int64_t prompts = 0;
  for (const Trajectory& t : batch) prompts = std::max(prompts, t.example_index + 1);
  std::vector<std::vector<Trajectory>> out(static_cast<size_t>(n));
  for (const Trajectory& t : batch) {
    int64_t s = 0;
    while (s + 1 < n && t.example_index >= (s + 1) * prompts / n) ++s;
    out[static_cast<size_t>(s)].push_back(t);
  }
  return out;
}

// The denominator units (rl/grpo/loss_agg.h) of trajectories that are not packed.
double dropped_units(const std::vector<Trajectory>& batch, const std::vector<int64_t>& indices, LossAgg agg) {
  double units = 0;
  for (int64_t i : indices) {
    int64_t n = 0;
    for (size_t p = 1; p < batch[i].policy_mask.size(); ++p) n += batch[i].policy_mask[p] ? 1 : 0;
    units += loss_agg_units(agg, n);
  }
  return units;
}

// KL in the reward: each trajectory's sum of kl_t(old || ref) over its trained tokens, from a
// policy and a reference forward over every trajectory (old = the sampler's log-probs with
// use_sampler_logprobs, as the step's own old log-probs). Trajectories under 2 tokens have none.
std::vector<double> kl_reward_sums(const Step& step, const std::vector<Trajectory>& batch) {
  const GrpoConfig& config = step.config;
  std::vector<int64_t> all(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) all[i] = static_cast<int64_t>(i);
  const std::vector<float> no_advantages(batch.size(), 0.0f);
  std::vector<double> sums(batch.size(), 0.0);
  std::vector<float> old, ref;
  for (const MicroBatch& mb : pack_micro_batches(batch, all, no_advantages, step.state.max_tokens(),
                                                 config.share_prefixes ? kSharePrefixMinTokens : 0)) {
    const size_t T = mb.targets.size();
    ref.resize(T);
    policy_forward_logprobs(*step.reference, step.state, mb.batch, mb.targets, ref.data(), nullptr, step.logit_scale);
    if (config.use_sampler_logprobs) {
      for (int64_t i : mb.trajectories)
        check(!batch[i].sampler_logprobs.empty(), "grpo: use_sampler_logprobs is set but trajectory ", i,
              " has no sampler log-probs (kl-reward-coef needs every trajectory's)");
      old = mb.sampler_logprobs;
    } else {
      old.resize(T);
      policy_forward_logprobs(step.policy, step.state, mb.batch, mb.targets, old.data(), nullptr, step.logit_scale);
    }
    for (int64_t s = 0; s < mb.batch.num_seqs(); ++s) {
      double sum = 0;
      for (int32_t t = mb.batch.cu_seqlens[s]; t < mb.batch.cu_seqlens[s + 1]; ++t)
        if (mb.mask[t]) sum += config.kl_reward_estimator->fn(old[t], ref[t]).kl;
      sums[static_cast<size_t>(mb.trajectories[static_cast<size_t>(s)])] = sum;
    }
  }
  return sums;
}

// ---- stage 1: the inputs
void check_inputs(const Step& step, const OptimizerState& optimizer) {
  const Policy& policy = step.policy;
  const Policy* reference = step.reference;
  const GrpoConfig& config = step.config;
  const DataParallel& dp = step.dp;
  check(config.kl_coef <= 0 || reference != nullptr, "grpo: kl_coef ", config.kl_coef, " needs a reference model");
  check(config.kl_reward_coef <= 0 || reference != nullptr, "grpo: kl_reward_coef ", config.kl_reward_coef,
        " needs a reference model");
  check(config.kl_reward_coef >= 0 && std::isfinite(config.kl_reward_coef),
        "grpo: kl_reward_coef must be >= 0 and finite, got ", config.kl_reward_coef);
  check(config.entropy_coef >= 0 && std::isfinite(config.entropy_coef), "grpo: entropy_coef must be >= 0 and finite, got ",
        config.entropy_coef);
  check(config.ppo_epochs >= 1 && config.mini_batches >= 1, "grpo: ppo_epochs ", config.ppo_epochs,
        " and mini_batches ", config.mini_batches, " must be at least 1");
  check(config.temperature >= 0 && std::isfinite(config.temperature), "grpo: temperature must be >= 0 and finite, got ",
        config.temperature);
  check(config.policy_loss && config.kl_estimator && config.kl_reward_estimator && config.advantage_estimator,
        "grpo: the config names no policy loss, KL estimator or advantage estimator (rl/grpo/algos.h rows)");
  check(dp.grad_accum >= 1, "grpo: grad_accum ", dp.grad_accum, " must be at least 1");
  check(dp.zero_stage >= 0 && dp.zero_stage <= 3, "grpo: zero stage ", dp.zero_stage, " is not 0, 1, 2 or 3");
  check(policy_training_ready(policy), "grpo: policy gradients are not allocated (alloc_grads / policy_init_training)");
  check(reference == nullptr || reference->host->num_params == policy.host->num_params,
        "grpo: the reference model has ", reference ? reference->host->num_params : 0, " parameters, the policy ",
        policy.host->num_params, " (the same architecture is required: they share the activation plan)");
  const int64_t n = policy_num_trainable(policy);  // a LoRA adapter's parameters, or the model's
  check(reference == nullptr || reference->backend == policy.backend, "grpo: the reference model is on ",
        reference ? reference->backend->name : "", ", the policy on ", policy.backend->name);
  const auto [slice_lo, slice_hi] = optimizer_slice(dp, n);
  check(!policy.backend->host_moments || moments_size(optimizer) == slice_hi - slice_lo, "grpo: optimizer state has ",
        moments_size(optimizer), " moments for ", slice_hi - slice_lo, " parameters",
        dp.zero_stage > 0 && dp.distributed() ? " (this rank's ZeRO slice)" : "");
  check(!step.is_on || !config.use_sampler_logprobs, "grpo: rollout-is ", rollout_is_mode_name(config.rollout_is.mode),
        " weighs the trainer's old log-probs against the sampler's; with use-sampler-logprobs they are the same");
  if (step.is_on) validate_rollout_is(config.rollout_is);
}

// ---- stage 2: shards, their selections and mini-batches. Advances the schedule.
void prepare_shards(Step& step, const std::vector<Trajectory>& batch, OptimizerState& optimizer,
                    GrpoStepStats& stats) {
  const GrpoConfig& config = step.config;
  // This process's shards: its prompts in grad_accum consecutive ranges (with N ranks each holds
  // B / N prompts, so with B divisible by N x grad_accum the ranges are one process's).
  if (step.dp.grad_accum == 1) {
    step.shards.emplace_back().batch = &batch;
  } else {
    step.owned = split_by_prompt(batch, step.dp.grad_accum);
    for (const auto& b : step.owned) step.shards.emplace_back().batch = &b;
  }
  for (Shard& sh : step.shards) {
    // KL in the reward: the penalty must be in before the group advantages (and the filter's
    // zero-variance test) see the rewards. A shard holds whole groups, so it needs no other's.
    if (config.kl_reward_coef > 0) {
      const std::vector<double> kl = kl_reward_sums(step, *sh.batch);
      for (size_t i = 0; i < kl.size(); ++i) {
        const double penalty = config.kl_reward_coef * kl[i];
        sh.rewards.push_back((*sh.batch)[i].reward - penalty);
        sh.kl_penalty += penalty;
      }
    }
    sh.sel = select_trajectories(*sh.batch, config, config.kl_reward_coef > 0 ? &sh.rewards : nullptr);
    if (config.use_sampler_logprobs)
      for (int64_t i : sh.sel.kept)
        check(!(*sh.batch)[i].sampler_logprobs.empty(), "grpo: use_sampler_logprobs is set but trajectory ", i,
              " has no sampler log-probs");
  }
  // Counts every shard needs: trajectories, kept, zero-variance denominator units.
  std::vector<ShardCounts> local;
  for (const Shard& sh : step.shards)
    local.push_back({static_cast<double>(sh.batch->size()), static_cast<double>(sh.sel.kept.size()),
                     dropped_units(*sh.batch, sh.sel.zero_variance, config.agg)});
  const ShardCounts all = sum_fields(step.dp, local);
  stats.filtered.kept = static_cast<int64_t>(all.kept);  // the rest of `filtered` is summed at the end
  step.trajectories = all.trajectories;
  for (Shard& sh : step.shards)
    for (const Trajectory& t : *sh.batch) sh.reward_part += t.reward / step.trajectories;  // the mean, reduced below
  stats.lr = lr_at(config.schedule, optimizer.train_step);
  ++optimizer.train_step;
  // Mini-batches: contiguous, near-equal slices of each shard's kept trajectories (one shard: of
  // the kept trajectories).
  const int64_t kept = stats.filtered.kept;
  const int64_t M = std::min<int64_t>(config.mini_batches, kept);
  step.dropped_share =
      config.filter.zero_variance_in_denominator && M > 0 ? all.dropped_units / static_cast<double>(M) : 0.0;
  for (Shard& sh : step.shards) {
    const int64_t k = static_cast<int64_t>(sh.sel.kept.size());
    for (int64_t b = 0; b < M; ++b) {
      std::vector<int64_t> slice(sh.sel.kept.begin() + b * k / M, sh.sel.kept.begin() + (b + 1) * k / M);
      sh.minis.push_back(pack_micro_batches(*sh.batch, slice, sh.sel.advantages, step.state.max_tokens(),
                                            config.share_prefixes ? kSharePrefixMinTokens : 0, sh.sel.train_end));
    }
  }
}

// ---- stage 3: old (and reference) log-probs with the weights as they are before any update.
// The first mini-batch's come from its first training forward instead (the weights are still the
// old ones there, and the kernels are deterministic: the same bits, one forward fewer per step).
PassCounts old_logprobs(Step& step) {
  const GrpoConfig& config = step.config;
  PassCounts counts;
  for (Shard& sh : step.shards)
    for (size_t b = 0; b < sh.minis.size(); ++b)
      for (MicroBatch& mb : sh.minis[b]) {
        const size_t T = mb.targets.size();
        counts.positions += static_cast<int64_t>(T), ++counts.micro_batches;
        if (config.use_sampler_logprobs) {
          mb.old_logprobs = mb.sampler_logprobs;
        } else if (b > 0 || step.is_on) {  // with rollout-is the first mini-batch's too: its rejections
          mb.old_logprobs.resize(T);        // change the mask, which the loss weights are made from
          policy_forward_logprobs(step.policy, step.state, mb.batch, mb.targets, mb.old_logprobs.data(), nullptr,
                                  step.logit_scale);
        }
        if (step.is_on) {
          check(mb.sampler_logprobs.size() == T, "grpo: rollout-is ", rollout_is_mode_name(config.rollout_is.mode),
                " needs the sampler's log-prob of every trajectory token");
          mb.is_weights.resize(T);
          sh.mismatch.add(rollout_importance_weights(mb.old_logprobs.data(), mb.sampler_logprobs.data(), mb.mask.data(),
                                                     mb.batch.cu_seqlens.data(), mb.batch.num_seqs(), config.rollout_is,
                                                     mb.is_weights.data()));
        }
        for (uint8_t m : mb.mask) counts.tokens += m;
        if (config.kl_coef > 0) {
          mb.ref_logprobs.resize(T);
          policy_forward_logprobs(*step.reference, step.state, mb.batch, mb.targets, mb.ref_logprobs.data(), nullptr,
                                  step.logit_scale);
        }
      }
  return counts;
}

// Buffers reused across micro-batches.
struct Scratch {
  std::vector<float> logp, dlogp, entropy, dentropy, grad_slice, is_scratch, sequence_old;
};

// ---- stage 4a: one micro-batch's forward, loss and backward (the gradient adds up).
void train_micro_batch(Step& step, Shard& sh, MicroBatch& mb, const float* w, int64_t epoch, bool first_mini,
                       Scratch& s) {
  const GrpoConfig& config = step.config;
  const size_t T = mb.targets.size();
  const bool entropy_bonus = config.entropy_coef > 0;
  s.logp.resize(T), s.dlogp.resize(T);
  const bool with_entropy = epoch == 0 || entropy_bonus;
  if (with_entropy) s.entropy.resize(T);
  policy_forward_logprobs(step.policy, step.state, mb.batch, mb.targets, s.logp.data(),
                          with_entropy ? s.entropy.data() : nullptr, step.logit_scale);
  if (epoch == 0 && first_mini && !config.use_sampler_logprobs && !step.is_on) mb.old_logprobs = s.logp;
  if (epoch == 0 && !step.is_on && !config.use_sampler_logprobs && mb.sampler_logprobs.size() == T) {
    s.is_scratch.resize(T);  // the metrics alone: mode off changes neither weights nor mask
    sh.mismatch.add(rollout_importance_weights(mb.old_logprobs.data(), mb.sampler_logprobs.data(), mb.mask.data(),
                                               mb.batch.cu_seqlens.data(), mb.batch.num_seqs(), config.rollout_is,
                                               s.is_scratch.data()));
  }
  if (epoch == 0)
    for (size_t t = 0; t < T; ++t)
      if (mb.mask[t]) sh.entropy_sum += s.entropy[t], ++sh.entropy_tokens;
  const float* old = mb.old_logprobs.data();
  if (config.policy_loss->sequence_old) {
    s.sequence_old.resize(T);
    config.policy_loss->sequence_old(s.logp.data(), old, mb.mask.data(), mb.batch.cu_seqlens, s.sequence_old.data());
    old = s.sequence_old.data();
  }
  GrpoLossConfig lc;
  lc.policy = config.policy_loss, lc.clip = {config.clip_low, config.clip_high, config.dual_clip};
  lc.kl_coef = config.kl_coef, lc.kl = config.kl_estimator;
  GrpoLossStats st = grpo_loss_cpu(s.dlogp.data(), s.logp.data(), old, config.kl_coef > 0 ? mb.ref_logprobs.data() : nullptr,
                                   mb.advantages.data(), w, step.is_on ? mb.is_weights.data() : nullptr,
                                   static_cast<int64_t>(T), lc);
  if (entropy_bonus) {
    // d(-C sum_t w_t H_t) / dH_t = -C w_t; w_t = 0 off the mask, so those rows stay skipped.
    s.dentropy.resize(T);
    double bonus = 0;
    for (size_t t = 0; t < T; ++t) {
      s.dentropy[t] = -config.entropy_coef * w[t];
      bonus += static_cast<double>(w[t]) * s.entropy[t];
    }
    st.loss -= config.entropy_coef * bonus;
    policy_backward_logprobs(step.policy, step.state, mb.batch, mb.targets, s.dlogp.data(), s.dentropy.data(),
                             s.entropy.data());
  } else {
    policy_backward_logprobs(step.policy, step.state, mb.batch, mb.targets, s.dlogp.data());
  }
  sh.loss += st.loss;
  sh.totals.add(st);
}

// ---- stage 4: PPO epochs x mini-batches: every shard's backward, the reduced gradient, AdamW.
void update(Step& step, OptimizerState& optimizer, GrpoStepStats& stats) {
  const GrpoConfig& config = step.config;
  Policy& policy = step.policy;
  std::vector<Shard>& shards = step.shards;
  const bool apart = policy.backend->shard_gradients_apart;  // rl/policy_backend.h
  const int64_t M = static_cast<int64_t>(shards[0].minis.size());
  Scratch scratch;
  for (int64_t epoch = 0; epoch < config.ppo_epochs; ++epoch) {
    for (int64_t b = 0; b < M; ++b) {
      std::vector<std::vector<double>> units;
      for (const Shard& sh : shards) units.push_back({loss_units(sh.minis[b], config.agg)});
      const double all_units = sum_over_shards(step.dp, units)[0];
      if (all_units <= 0) continue;  // nothing to learn from in this slice, on any shard
      for (size_t si = 0; si < shards.size(); ++si) {
        Shard& sh = shards[si];
        std::vector<MicroBatch>& mini = sh.minis[b];
        const LossWeights weights = loss_weights_of_total(mini, config.agg, all_units, step.dropped_share,
                                                          static_cast<double>(config.loss_norm_tokens));
        // Each shard's gradient from zero, or every shard's backward into one buffer (CUDA).
        if (si == 0 || apart) policy_zero_grads(policy);
        sh.loss = 0;
        if (weights.own_units > 0)
          for (size_t k = 0; k < mini.size(); ++k)
            train_micro_batch(step, sh, mini[k], weights.per_micro[k].data(), epoch, b == 0, scratch);
        if (shards.size() > 1 && apart) {  // this shard's gradient, from zero
          const TrainableBuffers t = policy_trainable(policy);
          sh.grads.assign(t.grads, t.grads + t.n);
        }
      }
      // ---- the step's gradient and its squared norm
      std::vector<std::vector<float>> shard_grads;
      for (Shard& sh : shards)
        if (shards.size() > 1 && apart) shard_grads.push_back(std::move(sh.grads));
      const float* own_grads = nullptr;
      const double sq = reduce_gradients(policy, step.dp, shard_grads, scratch.grad_slice, &own_grads);
      for (size_t si = 0; si < shard_grads.size(); ++si) shards[si].grads = std::move(shard_grads[si]);
      std::vector<std::vector<double>> losses;
      for (const Shard& sh : shards) losses.push_back({sh.loss});
      const double mini_loss = sum_over_shards(step.dp, losses)[0];
      const double norm = std::sqrt(sq);
      ++optimizer.adam_step;
      const auto adamw_start = std::chrono::steady_clock::now();
      data_parallel_adamw(policy, optimizer, step.dp, own_grads, config.adamw, stats.lr, config.max_grad_norm, sq);
      stats.optimizer_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - adamw_start).count();
      stats.loss += mini_loss, stats.grad_norm += norm, stats.grad_norm_max = std::max(stats.grad_norm_max, norm);
      ++stats.updates;
    }
  }
}

// ---- stage 5: the statistics over every shard.
void reduce_statistics(const Step& step, const PassCounts& pass, GrpoStepStats& stats) {
  std::vector<StepSums> local;
  for (size_t si = 0; si < step.shards.size(); ++si) {
    const Shard& sh = step.shards[si];
    FilterCounts counts = sh.sel.counts;
    StepSums& s = local.emplace_back();
    s.reward = sh.reward_part;
    s.clipped = sh.totals.clipped, s.tokens = sh.totals.tokens, s.approx_kl = sh.totals.approx_kl;
    s.ratio = sh.totals.ratio, s.ref_kl = sh.totals.ref_kl;
    s.entropy = sh.entropy_sum, s.entropy_tokens = sh.entropy_tokens;
    const std::vector<int64_t*> f = filter_fields(counts);
    for (size_t i = 0; i < f.size(); ++i) s.filter[i] = static_cast<double>(*f[i]);
    if (si == 0) {
      s.trained_tokens = static_cast<double>(pass.tokens), s.positions = static_cast<double>(pass.positions);
      s.micro_batches = static_cast<double>(pass.micro_batches);
    }
    s.kl_penalty = sh.kl_penalty;
    s.mismatch = sh.mismatch;
  }
  const StepSums a = sum_fields(step.dp, local);
  stats.reward_mean = a.reward;
  if (a.entropy_tokens > 0) stats.entropy = a.entropy / a.entropy_tokens;
  const std::vector<int64_t*> f = filter_fields(stats.filtered);
  for (size_t i = 0; i < f.size(); ++i) *f[i] = static_cast<int64_t>(a.filter[i]);
  stats.tokens = static_cast<int64_t>(a.trained_tokens), stats.positions = static_cast<int64_t>(a.positions);
  stats.micro_batches = static_cast<int64_t>(a.micro_batches);
  if (step.config.kl_reward_coef > 0) {
    stats.kl_in_reward = true;
    if (step.trajectories > 0) stats.kl_penalty = a.kl_penalty / step.trajectories;
  }
  const MismatchSums& m = a.mismatch;
  if (m.tokens > 0) {
    stats.mismatch_tokens = m.tokens;
    stats.mismatch_kl = -m.log_ratio / m.tokens, stats.mismatch_k3 = m.k3 / m.tokens;
    stats.mismatch_abs_log_ratio = m.abs_log_ratio / m.tokens, stats.is_weight_mean = m.weight / m.tokens;
    stats.is_truncated = m.truncated / m.tokens, stats.is_masked = m.masked / m.tokens;
    if (m.sequences > 0) stats.is_masked_sequences = m.masked_sequences / m.sequences;
  }
  if (a.tokens > 0) {
    stats.clip_fraction = a.clipped / a.tokens;
    stats.approx_kl = a.approx_kl / a.tokens;
    stats.ratio_mean = a.ratio / a.tokens;
    stats.ref_kl = a.ref_kl / a.tokens;
  }
}

}  // namespace

GrpoStepStats grpo_step(Policy& policy, const Policy* reference, OptimizerState& optimizer, PolicyActivations& state,
                        const std::vector<Trajectory>& batch, const GrpoConfig& config, const DataParallel& dp) {
  const auto start = std::chrono::steady_clock::now();
  Step step{policy, reference, state, config, dp};
  step.logit_scale = config.temperature > 0 ? 1.0f / config.temperature : 1.0f;
  step.is_on = config.rollout_is.mode != RolloutIsMode::Off;
  check_inputs(step, optimizer);
  GrpoStepStats stats;
  prepare_shards(step, batch, optimizer, stats);
  const PassCounts pass = old_logprobs(step);
  update(step, optimizer, stats);
  reduce_statistics(step, pass, stats);
  if (stats.updates > 0) stats.loss /= static_cast<double>(stats.updates), stats.grad_norm /= static_cast<double>(stats.updates);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace sqlrl::rl
