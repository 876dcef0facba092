#include "rl/grpo/grpo.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "runtime/error.h"

namespace sqlrl::rl {

namespace {

bool has_valid_action(const Trajectory& t) {
  for (const TurnRecord& turn : t.turns)
    if (turn.action.kind != ActionKind::Invalid) return true;
  return false;
}

}  // namespace

bool rewards_vary(const std::vector<float>& rewards) {
  return !std::all_of(rewards.begin(), rewards.end(), [&](float r) { return r == rewards[0]; });
}

GrpoSelection select_trajectories(const std::vector<Trajectory>& batch, const GrpoConfig& config,
                                  const std::vector<double>* rewards_in) {
  check(!rewards_in || rewards_in->size() == batch.size(), "grpo: ", rewards_in ? rewards_in->size() : 0,
        " rewards for ", batch.size(), " trajectories");
  GrpoSelection sel;
  const int64_t n = static_cast<int64_t>(batch.size());
  sel.advantages.assign(batch.size(), 0.0f);
  // Groups by example_index, in order of first appearance.
  std::vector<std::vector<int64_t>> groups;
  std::map<int64_t, size_t> group_of;
  for (int64_t i = 0; i < n; ++i) {
    auto [it, fresh] = group_of.emplace(batch[i].example_index, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  sel.counts.groups = static_cast<int64_t>(groups.size());
  std::vector<bool> keep(batch.size(), true);
  std::vector<bool> in_baseline(batch.size(), true);
  const GrpoFilterConfig& f = config.filter;
  for (int64_t i = 0; i < n; ++i) {
    const Trajectory& t = batch[i];
    if (t.infra_failure) ++sel.counts.infra;
    if (f.exclude_infra_failures && t.infra_failure) keep[i] = false, in_baseline[i] = false;
    else if (f.drop_truncated && t.truncated) ++sel.counts.truncated, keep[i] = false;
    else if (f.drop_malformed && t.invalid_actions > 0) ++sel.counts.malformed, keep[i] = false;
    else if (f.drop_no_valid_action && !has_valid_action(t)) ++sel.counts.no_valid_action, keep[i] = false;
  }
  std::vector<float> rewards, adv;
  std::vector<int64_t> members;
  for (const std::vector<int64_t>& g : groups) {
    members.clear();
    for (int64_t i : g)
      if (in_baseline[i]) members.push_back(i);
    if (members.size() < g.size() && members.size() < 2) {  // infrastructure failures left no baseline
      ++sel.counts.infra_groups;
      for (int64_t i : g) keep[i] = false;
      continue;
    }
    rewards.clear();
    for (int64_t i : members) rewards.push_back(static_cast<float>(rewards_in ? (*rewards_in)[i] : batch[i].reward));
    adv.resize(rewards.size());
    group_advantage_cpu(adv.data(), rewards.data(), 1, static_cast<int64_t>(members.size()), config.advantage);
    for (size_t k = 0; k < members.size(); ++k) sel.advantages[members[k]] = adv[k];
    const bool flat = !rewards_vary(rewards);
    if (f.drop_zero_variance && flat) {
      ++sel.counts.zero_variance_groups;
      for (int64_t i : members)
        if (keep[i]) ++sel.counts.zero_variance_trajectories, keep[i] = false, sel.zero_variance.push_back(i);
    }
    bool any = false;
    for (int64_t i : g) any = any || keep[i];
    sel.counts.kept_groups += any;
  }
  sel.train_end.resize(batch.size());
  for (int64_t i = 0; i < n; ++i) {
    const Trajectory& t = batch[i];
    sel.train_end[i] = static_cast<int64_t>(t.tokens.size());
    if (!keep[i]) continue;
    sel.kept.push_back(i);
    if (f.spare_copied_answers && sel.advantages[i] < 0 && t.answered && t.answer_was_executed())
      sel.train_end[i] = t.last_turn_begin(), ++sel.counts.spared_answers;
  }
  sel.counts.kept = static_cast<int64_t>(sel.kept.size());
  return sel;
}

namespace {

// Row of the first trained target (policy_mask[p + 1] set) of tokens[0, end), or end if none.
int64_t first_trained_row(const Trajectory& t, int64_t end) {
  for (int64_t p = 0; p < end; ++p)
    if (t.policy_mask[p + 1]) return p;
  return end;
}

// FNV-1a of tokens[0, n).
uint64_t start_key(const Trajectory& t, int64_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int64_t p = 0; p < n; ++p) h = (h ^ static_cast<uint32_t>(t.tokens[p])) * 0x100000001b3ull;
  return h ^ static_cast<uint64_t>(n);
}

}  // namespace

std::vector<MicroBatch> pack_micro_batches(const std::vector<Trajectory>& batch, const std::vector<int64_t>& indices,
                                           const std::vector<float>& advantages, int64_t max_tokens,
                                           int64_t share_min_tokens, const std::vector<int64_t>& train_end) {
  std::vector<MicroBatch> out;
  std::vector<PackItem> items;
  int64_t used = 0;
  std::map<uint64_t, int64_t> start_count;  // trajectories per untrained start (hash)
  if (share_min_tokens > 0)
    for (int64_t i : indices) {
      const Trajectory& t = batch[i];
      if (t.tokens.size() >= 2 && t.policy_mask.size() == t.tokens.size())
        ++start_count[start_key(t, first_trained_row(t, static_cast<int64_t>(t.tokens.size()) - 1))];
    }
  auto flush = [&] {
    if (items.empty()) return;
    out.back().batch = pack_with_prefixes(items);
    items.clear();
    used = 0;
  };
  for (int64_t i : indices) {
    const Trajectory& t = batch[i];
    const int64_t n = static_cast<int64_t>(t.tokens.size());
    check(t.policy_mask.size() == t.tokens.size(), "grpo: trajectory ", i, " has ", t.policy_mask.size(),
          " mask entries for ", n, " tokens");
    check(t.sampler_logprobs.empty() || t.sampler_logprobs.size() == t.tokens.size(), "grpo: trajectory ", i, " has ",
          t.sampler_logprobs.size(), " sampler log-probs for ", n, " tokens");
    if (n < 2) continue;  // nothing is predicted
    check(n - 1 <= max_tokens, "grpo: trajectory ", i, " needs ", n - 1, " positions, above the micro-batch budget of ",
          max_tokens, " tokens (raise it or lower the rollout token cap)");
    // Inputs are tokens[0, n-1). A sharer stores rows from `shared` on; the rows before are an
    // earlier sequence's, so they must hold no trained target of this one (shared <= its first
    // trained row) and the same tokens. Sharing is one level deep, so a trajectory whose whole
    // untrained start recurs later (a GRPO group) only shares all of it, or starts a prefix of
    // its own for the others; a unique one (an SFT question) takes the longest common start.
    PackItem item{&t.tokens, n - 1, -1, 0};
    if (share_min_tokens > 0) {
      const int64_t limit = first_trained_row(t, n - 1);
      const bool recurs = start_count[start_key(t, limit)] > 1;
      for (size_t k = 0; k < items.size(); ++k) {
        if (items[k].source >= 0) continue;
        const std::vector<int32_t>& src = *items[k].tokens;
        const int64_t cap = std::min(limit, items[k].end);
        int64_t L = 0;
        while (L < cap && src[L] == t.tokens[L]) ++L;
        if (recurs && L < limit) continue;
        if (L >= share_min_tokens && L > item.shared) item.source = static_cast<int64_t>(k), item.shared = L;
      }
    }
    if (items.empty() || used + (item.end - item.shared) > max_tokens) {
      flush();
      out.emplace_back();
      item.source = -1, item.shared = 0;  // nothing earlier in a fresh micro-batch
    }
    MicroBatch& mb = out.back();
    mb.trajectories.push_back(i);
    items.push_back(item);
    const int64_t end = train_end.empty() ? n : train_end[i];
    for (int64_t p = item.shared; p + 1 < n; ++p) {
      mb.targets.push_back(t.tokens[p + 1]);
      mb.mask.push_back(t.policy_mask[p + 1] && p + 1 < end ? 1 : 0);
      mb.advantages.push_back(advantages[i]);
      mb.sampler_logprobs.push_back(t.sampler_logprobs.empty() ? 0.0f : t.sampler_logprobs[p + 1]);
    }
    used += item.end - item.shared;
  }
  flush();
  return out;
}

namespace {

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

}  // namespace

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

// KL in the reward: each trajectory's sum of kl_t(old || ref) over its trained tokens, from a
// policy and a reference forward over every trajectory (old = the sampler's log-probs with
// use_sampler_logprobs, as the step's own old log-probs). Trajectories under 2 tokens have none.
std::vector<double> kl_reward_sums(const Policy& policy, const Policy& reference, PolicyActivations& state,
                                   const std::vector<Trajectory>& batch, const GrpoConfig& config, float logit_scale) {
  std::vector<int64_t> all(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) all[i] = static_cast<int64_t>(i);
  const std::vector<float> no_advantages(batch.size(), 0.0f);
  std::vector<double> sums(batch.size(), 0.0);
  std::vector<float> old, ref;
  for (const MicroBatch& mb : pack_micro_batches(batch, all, no_advantages, state.max_tokens(),
                                                 config.share_prefixes ? kSharePrefixMinTokens : 0)) {
    const size_t T = mb.targets.size();
    ref.resize(T);
    policy_forward_logprobs(reference, state, mb.batch, mb.targets, ref.data(), nullptr, logit_scale);
    if (config.use_sampler_logprobs) {
      for (int64_t i : mb.trajectories)
        check(!batch[i].sampler_logprobs.empty(), "grpo: use_sampler_logprobs is set but trajectory ", i,
              " has no sampler log-probs (kl-reward-coef needs every trajectory's)");
      old = mb.sampler_logprobs;
    } else {
      old.resize(T);
      policy_forward_logprobs(policy, state, mb.batch, mb.targets, old.data(), nullptr, logit_scale);
    }
    for (int64_t s = 0; s < mb.batch.num_seqs(); ++s) {
      double sum = 0;
      for (int32_t t = mb.batch.cu_seqlens[s]; t < mb.batch.cu_seqlens[s + 1]; ++t)
        if (mb.mask[t]) sum += kl_estimate(old[t], ref[t], config.kl_reward_estimator);
      sums[static_cast<size_t>(mb.trajectories[static_cast<size_t>(s)])] = sum;
    }
  }
  return sums;
}

}  // namespace

void gspo_old_logprobs(const float* logp, const float* old, const uint8_t* mask, const std::vector<int32_t>& cu,
                       float* out) {
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    double sum = 0;
    int64_t n = 0;
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t)
      if (mask[t]) sum += static_cast<double>(logp[t]) - old[t], ++n;
    const double mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t)
      out[t] = mask[t] ? static_cast<float>(static_cast<double>(logp[t]) - mean) : old[t];
  }
}

GrpoStepStats grpo_step(Policy& policy, const Policy* reference, OptimizerState& optimizer, PolicyActivations& state,
                        const std::vector<Trajectory>& batch, const GrpoConfig& config, const DataParallel& dp) {
  auto start = std::chrono::steady_clock::now();
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
  check(dp.grad_accum >= 1, "grpo: grad_accum ", dp.grad_accum, " must be at least 1");
  check(dp.zero_stage >= 0 && dp.zero_stage <= 3, "grpo: zero stage ", dp.zero_stage, " is not 0, 1, 2 or 3");
  const float logit_scale = config.temperature > 0 ? 1.0f / config.temperature : 1.0f;
  check(policy_training_ready(policy), "grpo: policy gradients are not allocated (alloc_grads / policy_init_training)");
  check(reference == nullptr || reference->host->num_params == policy.host->num_params,
        "grpo: the reference model has ", reference ? reference->host->num_params : 0, " parameters, the policy ",
        policy.host->num_params, " (the same architecture is required: they share the activation plan)");
  const int64_t n = policy_num_trainable(policy);  // a LoRA adapter's parameters, or the model's
  check(reference == nullptr || reference->on_cuda == policy.on_cuda, "grpo: the reference model is on ",
        reference && reference->on_cuda ? "cuda" : "cpu", ", the policy on ", policy.on_cuda ? "cuda" : "cpu");
  const auto [slice_lo, slice_hi] = optimizer_slice(dp, n);
  check(policy.on_cuda || moments_size(optimizer) == slice_hi - slice_lo, "grpo: optimizer state has ",
        moments_size(optimizer), " moments for ", slice_hi - slice_lo, " parameters",
        dp.zero_stage > 0 && dp.distributed() ? " (this rank's ZeRO slice)" : "");

  // ---- the shards this process holds
  const bool is_on = config.rollout_is.mode != RolloutIsMode::Off;
  check(!is_on || !config.use_sampler_logprobs, "grpo: rollout-is ", rollout_is_mode_name(config.rollout_is.mode),
        " weighs the trainer's old log-probs against the sampler's; with use-sampler-logprobs they are the same");
  if (is_on) validate_rollout_is(config.rollout_is);
  // This process's shards: its prompts in grad_accum consecutive ranges (with N ranks each holds
  // B / N prompts, so with B divisible by N x grad_accum the ranges are one process's).
  std::vector<std::vector<Trajectory>> owned;
  std::vector<Shard> shards;
  if (dp.grad_accum == 1) {
    shards.emplace_back().batch = &batch;
  } else {
    owned = split_by_prompt(batch, dp.grad_accum);
    for (const auto& b : owned) shards.emplace_back().batch = &b;
  }
  GrpoStepStats stats;
  for (Shard& sh : shards) {
    // KL in the reward: the penalty must be in before the group advantages (and the filter's
    // zero-variance test) see the rewards. A shard holds whole groups, so it needs no other's.
    if (config.kl_reward_coef > 0) {
      const std::vector<double> kl = kl_reward_sums(policy, *reference, state, *sh.batch, config, logit_scale);
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
  double dropped_share = 0, trajectories = 0;
  {
    std::vector<std::vector<double>> local;
    for (const Shard& sh : shards)
      local.push_back({static_cast<double>(sh.batch->size()), static_cast<double>(sh.sel.kept.size()),
                       dropped_units(*sh.batch, sh.sel.zero_variance, config.agg)});
    std::vector<double> all = sum_over_shards(dp, local);
    stats.filtered.kept = static_cast<int64_t>(all[1]);  // the rest of `filtered` is summed below
    trajectories = all[0];
    for (Shard& sh : shards)
      for (const Trajectory& t : *sh.batch) sh.reward_part += t.reward / trajectories;  // the mean, reduced below
    stats.lr = lr_at(config.schedule, optimizer.train_step);
    ++optimizer.train_step;
    // Mini-batches: contiguous, near-equal slices of each shard's kept trajectories (one shard:
    // of the kept trajectories).
    const int64_t kept = stats.filtered.kept;
    const int64_t M = std::min<int64_t>(config.mini_batches, kept);
    // Each mini-batch's share of the zero-variance trajectories' count (config.filter).
    dropped_share = config.filter.zero_variance_in_denominator && M > 0 ? all[2] / static_cast<double>(M) : 0.0;
    for (Shard& sh : shards) {
      const int64_t k = static_cast<int64_t>(sh.sel.kept.size());
      for (int64_t b = 0; b < M; ++b) {
        std::vector<int64_t> slice(sh.sel.kept.begin() + b * k / M, sh.sel.kept.begin() + (b + 1) * k / M);
        sh.minis.push_back(pack_micro_batches(*sh.batch, slice, sh.sel.advantages, state.max_tokens(),
                                              config.share_prefixes ? kSharePrefixMinTokens : 0, sh.sel.train_end));
      }
    }
  }

  // Old (and reference) log-probs with the weights as they are before any update. The first
  // mini-batch's come from its first training forward instead (the weights are still the old
  // ones there, and the kernels are deterministic: the same bits, one forward fewer per step).
  int64_t tokens = 0, positions = 0, micro_batches = 0;
  for (Shard& sh : shards)
    for (size_t b = 0; b < sh.minis.size(); ++b)
      for (MicroBatch& mb : sh.minis[b]) {
        const size_t T = mb.targets.size();
        positions += static_cast<int64_t>(T), ++micro_batches;
        if (config.use_sampler_logprobs) {
          mb.old_logprobs = mb.sampler_logprobs;
        } else if (b > 0 || is_on) {  // with rollout-is the first mini-batch's too: its rejections
          mb.old_logprobs.resize(T);   // change the mask, which the loss weights are made from
          policy_forward_logprobs(policy, state, mb.batch, mb.targets, mb.old_logprobs.data(), nullptr, logit_scale);
        }
        if (is_on) {
          check(mb.sampler_logprobs.size() == T, "grpo: rollout-is ", rollout_is_mode_name(config.rollout_is.mode),
                " needs the sampler's log-prob of every trajectory token");
          mb.is_weights.resize(T);
          sh.mismatch.add(rollout_importance_weights(mb.old_logprobs.data(), mb.sampler_logprobs.data(), mb.mask.data(),
                                                     mb.batch.cu_seqlens.data(), mb.batch.num_seqs(), config.rollout_is,
                                                     mb.is_weights.data()));
        }
        for (uint8_t m : mb.mask) tokens += m;
        if (config.kl_coef > 0) {
          mb.ref_logprobs.resize(T);
          policy_forward_logprobs(*reference, state, mb.batch, mb.targets, mb.ref_logprobs.data(), nullptr, logit_scale);
        }
      }

  const int64_t M = shards[0].minis.size();
  std::vector<float> logp, dlogp, entropy, dentropy, grad_slice, is_scratch, gspo_old;
  const bool entropy_bonus = config.entropy_coef > 0;
  for (int64_t epoch = 0; epoch < config.ppo_epochs; ++epoch) {
    for (int64_t b = 0; b < M; ++b) {
      GrpoLossConfig lc{config.clip_low, config.clip_high, config.kl_coef};
      lc.dual_clip = config.dual_clip, lc.kl_estimator = config.kl_estimator;
      std::vector<std::vector<double>> units;
      for (const Shard& sh : shards) units.push_back({loss_units(sh.minis[b], config.agg)});
      const double all_units = sum_over_shards(dp, units)[0];
      if (all_units <= 0) continue;  // nothing to learn from in this slice, on any shard
      for (size_t si = 0; si < shards.size(); ++si) {
        Shard& sh = shards[si];
        std::vector<MicroBatch>& mini = sh.minis[b];
        const LossWeights weights =
            loss_weights_of_total(mini, config.agg, all_units, dropped_share, static_cast<double>(config.loss_norm_tokens));
        // CUDA: every shard's backward adds into the one device buffer (rl/data_parallel.h).
        if (si == 0 || !policy.on_cuda) policy_zero_grads(policy);
        sh.loss = 0;
        if (weights.own_units > 0)
          for (size_t k = 0; k < mini.size(); ++k) {
            MicroBatch& mb = mini[k];
            const size_t T = mb.targets.size();
            logp.resize(T), dlogp.resize(T);
            const bool with_entropy = epoch == 0 || entropy_bonus;
            if (with_entropy) entropy.resize(T);
            policy_forward_logprobs(policy, state, mb.batch, mb.targets, logp.data(),
                                    with_entropy ? entropy.data() : nullptr, logit_scale);
            if (epoch == 0 && b == 0 && !config.use_sampler_logprobs && !is_on) mb.old_logprobs = logp;
            if (epoch == 0 && !is_on && !config.use_sampler_logprobs && mb.sampler_logprobs.size() == T) {
              is_scratch.resize(T);  // the metrics alone: mode off changes neither weights nor mask
              sh.mismatch.add(rollout_importance_weights(mb.old_logprobs.data(), mb.sampler_logprobs.data(),
                                                         mb.mask.data(), mb.batch.cu_seqlens.data(), mb.batch.num_seqs(),
                                                         config.rollout_is, is_scratch.data()));
            }
            if (epoch == 0)
              for (size_t t = 0; t < T; ++t)
                if (mb.mask[t]) sh.entropy_sum += entropy[t], ++sh.entropy_tokens;
            const float* old = mb.old_logprobs.data();
            if (config.gspo) {
              gspo_old.resize(T);
              gspo_old_logprobs(logp.data(), old, mb.mask.data(), mb.batch.cu_seqlens, gspo_old.data());
              old = gspo_old.data();
            }
            GrpoLossStats s = grpo_loss_cpu(dlogp.data(), logp.data(), old,
                                            config.kl_coef > 0 ? mb.ref_logprobs.data() : nullptr,
                                            mb.advantages.data(), weights.per_micro[k].data(),
                                            is_on ? mb.is_weights.data() : nullptr, static_cast<int64_t>(T), lc);
            if (entropy_bonus) {
              // d(-C sum_t w_t H_t) / dH_t = -C w_t; w_t = 0 off the mask, so those rows stay skipped.
              const float* w = weights.per_micro[k].data();
              dentropy.resize(T);
              double bonus = 0;
              for (size_t t = 0; t < T; ++t) {
                dentropy[t] = -config.entropy_coef * w[t];
                bonus += static_cast<double>(w[t]) * entropy[t];
              }
              s.loss -= config.entropy_coef * bonus;
              policy_backward_logprobs(policy, state, mb.batch, mb.targets, dlogp.data(), dentropy.data(),
                                       entropy.data());
            } else {
              policy_backward_logprobs(policy, state, mb.batch, mb.targets, dlogp.data());
            }
            sh.loss += s.loss;
            sh.totals.add(s);
          }
        if (shards.size() > 1 && !policy.on_cuda) {  // this shard's gradient, from zero
          const TrainableBuffers t = policy_trainable(policy);
          sh.grads.assign(t.grads, t.grads + t.n);
        }
      }
      // ---- the step's gradient and its squared norm
      std::vector<std::vector<float>> shard_grads;
      for (Shard& sh : shards)
        if (shards.size() > 1 && !policy.on_cuda) shard_grads.push_back(std::move(sh.grads));
      const float* own_grads = nullptr;
      const double sq = reduce_gradients(policy, dp, shard_grads, grad_slice, &own_grads);
      for (size_t si = 0; si < shard_grads.size(); ++si) shards[si].grads = std::move(shard_grads[si]);
      double mini_loss = 0;
      {
        std::vector<std::vector<double>> losses;
        for (const Shard& sh : shards) losses.push_back({sh.loss});
        mini_loss = sum_over_shards(dp, losses)[0];
      }
      const double norm = std::sqrt(sq);
      ++optimizer.adam_step;
      const auto adamw_start = std::chrono::steady_clock::now();
      data_parallel_adamw(policy, optimizer, dp, own_grads, config.adamw, stats.lr, config.max_grad_norm, sq);
      stats.optimizer_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - adamw_start).count();
      stats.loss += mini_loss, stats.grad_norm += norm, stats.grad_norm_max = std::max(stats.grad_norm_max, norm);
      ++stats.updates;
    }
  }
  // ---- statistics over every shard
  {
    std::vector<std::vector<double>> local;
    for (size_t si = 0; si < shards.size(); ++si) {
      const Shard& sh = shards[si];
      const FilterCounts& f = sh.sel.counts;
      local.push_back({sh.reward_part, sh.totals.clipped, sh.totals.tokens, sh.totals.approx_kl, sh.totals.ratio,
                       sh.totals.ref_kl, sh.entropy_sum, sh.entropy_tokens, static_cast<double>(f.truncated),
                       static_cast<double>(f.malformed), static_cast<double>(f.no_valid_action),
                       static_cast<double>(f.zero_variance_groups), static_cast<double>(f.zero_variance_trajectories),
                       static_cast<double>(f.groups), static_cast<double>(f.kept_groups),
                       si == 0 ? static_cast<double>(tokens) : 0.0, si == 0 ? static_cast<double>(positions) : 0.0,
                       si == 0 ? static_cast<double>(micro_batches) : 0.0, static_cast<double>(f.infra),
                       static_cast<double>(f.infra_groups), sh.kl_penalty, static_cast<double>(f.spared_answers)});
      const std::vector<double> m = sh.mismatch.as_vector();
      local.back().insert(local.back().end(), m.begin(), m.end());
    }
    const std::vector<double> a = sum_over_shards(dp, local);
    stats.reward_mean = a[0];
    GrpoLossStats totals;
    totals.clipped = a[1], totals.tokens = a[2], totals.approx_kl = a[3], totals.ratio = a[4], totals.ref_kl = a[5];
    if (a[7] > 0) stats.entropy = a[6] / a[7];
    FilterCounts& f = stats.filtered;
    f.truncated = static_cast<int64_t>(a[8]), f.malformed = static_cast<int64_t>(a[9]);
    f.no_valid_action = static_cast<int64_t>(a[10]), f.zero_variance_groups = static_cast<int64_t>(a[11]);
    f.zero_variance_trajectories = static_cast<int64_t>(a[12]), f.groups = static_cast<int64_t>(a[13]);
    f.kept_groups = static_cast<int64_t>(a[14]);
    stats.tokens = static_cast<int64_t>(a[15]), stats.positions = static_cast<int64_t>(a[16]);
    stats.micro_batches = static_cast<int64_t>(a[17]);
    f.infra = static_cast<int64_t>(a[18]), f.infra_groups = static_cast<int64_t>(a[19]);
    f.spared_answers = static_cast<int64_t>(a[21]);
    if (config.kl_reward_coef > 0) {
      stats.kl_in_reward = true;
      if (trajectories > 0) stats.kl_penalty = a[20] / trajectories;
    }
    const MismatchSums m = MismatchSums::from_vector(a, 22);
    if (m.tokens > 0) {
      stats.mismatch_tokens = m.tokens;
      stats.mismatch_kl = -m.log_ratio / m.tokens, stats.mismatch_k3 = m.k3 / m.tokens;
      stats.mismatch_abs_log_ratio = m.abs_log_ratio / m.tokens, stats.is_weight_mean = m.weight / m.tokens;
      stats.is_truncated = m.truncated / m.tokens, stats.is_masked = m.masked / m.tokens;
      if (m.sequences > 0) stats.is_masked_sequences = m.masked_sequences / m.sequences;
    }
    if (totals.tokens > 0) {
      stats.clip_fraction = totals.clipped / totals.tokens;
      stats.approx_kl = totals.approx_kl / totals.tokens;
      stats.ratio_mean = totals.ratio / totals.tokens;
      stats.ref_kl = totals.ref_kl / totals.tokens;
    }
  }
  if (stats.updates > 0) stats.loss /= static_cast<double>(stats.updates), stats.grad_norm /= static_cast<double>(stats.updates);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace sqlrl::rl
