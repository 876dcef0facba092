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

GrpoSelection select_trajectories(const std::vector<Trajectory>& batch, const GrpoConfig& config) {
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
  const GrpoFilterConfig& f = config.filter;
  for (int64_t i = 0; i < n; ++i) {
    const Trajectory& t = batch[i];
    if (f.drop_truncated && t.truncated) ++sel.counts.truncated, keep[i] = false;
    else if (f.drop_malformed && t.invalid_actions > 0) ++sel.counts.malformed, keep[i] = false;
    else if (f.drop_no_valid_action && !has_valid_action(t)) ++sel.counts.no_valid_action, keep[i] = false;
  }
  std::vector<float> rewards, adv;
  for (const std::vector<int64_t>& g : groups) {
    rewards.clear();
    for (int64_t i : g) rewards.push_back(static_cast<float>(batch[i].reward));
    adv.resize(rewards.size());
    group_advantage_cpu(adv.data(), rewards.data(), 1, static_cast<int64_t>(g.size()), config.advantage);
    for (size_t k = 0; k < g.size(); ++k) sel.advantages[g[k]] = adv[k];
    bool flat = std::all_of(rewards.begin(), rewards.end(), [&](float r) { return r == rewards[0]; });
    if (f.drop_zero_variance && flat) {
      ++sel.counts.zero_variance_groups;
      for (int64_t i : g)
        if (keep[i]) ++sel.counts.zero_variance_trajectories, keep[i] = false, sel.zero_variance.push_back(i);
    }
    bool any = false;
    for (int64_t i : g) any = any || keep[i];
    sel.counts.kept_groups += any;
  }
  for (int64_t i = 0; i < n; ++i)
    if (keep[i]) sel.kept.push_back(i);
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
                                           int64_t share_min_tokens) {
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
    for (int64_t p = item.shared; p + 1 < n; ++p) {
      mb.targets.push_back(t.tokens[p + 1]);
      mb.mask.push_back(t.policy_mask[p + 1] ? 1 : 0);
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

GrpoStepStats grpo_step(Policy& policy, const Policy* reference, OptimizerState& optimizer, PolicyActivations& state,
                        const std::vector<Trajectory>& batch, const GrpoConfig& config) {
  auto start = std::chrono::steady_clock::now();
  check(config.kl_coef <= 0 || reference != nullptr, "grpo: kl_coef ", config.kl_coef, " needs a reference model");
  check(config.ppo_epochs >= 1 && config.mini_batches >= 1, "grpo: ppo_epochs ", config.ppo_epochs,
        " and mini_batches ", config.mini_batches, " must be at least 1");
  check(config.temperature >= 0 && std::isfinite(config.temperature), "grpo: temperature must be >= 0 and finite, got ",
        config.temperature);
  const float logit_scale = config.temperature > 0 ? 1.0f / config.temperature : 1.0f;
  check(policy_training_ready(policy), "grpo: policy gradients are not allocated (alloc_grads / policy_init_training)");
  const int64_t n = policy.host->num_params;
  check(reference == nullptr || reference->host->num_params == n, "grpo: the reference model has ",
        reference ? reference->host->num_params : 0, " parameters, the policy ", n,
        " (the same architecture is required: they share the activation plan)");
  check(reference == nullptr || reference->on_cuda == policy.on_cuda, "grpo: the reference model is on ",
        reference && reference->on_cuda ? "cuda" : "cpu", ", the policy on ", policy.on_cuda ? "cuda" : "cpu");
  check(policy.on_cuda || moments_size(optimizer) == n, "grpo: optimizer state has ", moments_size(optimizer),
        " moments for ", n, " parameters");
  GrpoStepStats stats;
  for (const Trajectory& t : batch) stats.reward_mean += t.reward / static_cast<double>(batch.size());
  GrpoSelection sel = select_trajectories(batch, config);
  stats.filtered = sel.counts;
  if (config.use_sampler_logprobs)
    for (int64_t i : sel.kept)
      check(!batch[i].sampler_logprobs.empty(), "grpo: use_sampler_logprobs is set but trajectory ", i,
            " has no sampler log-probs");
  stats.lr = lr_at(config.schedule, optimizer.train_step);
  ++optimizer.train_step;

  // Mini-batches: contiguous, near-equal slices of the kept trajectories.
  const int64_t kept = static_cast<int64_t>(sel.kept.size());
  const int64_t M = std::min<int64_t>(config.mini_batches, kept);
  // Each mini-batch's share of the zero-variance trajectories' count (config.filter).
  const double dropped_share =
      config.filter.zero_variance_in_denominator && M > 0
          ? dropped_units(batch, sel.zero_variance, config.agg) / static_cast<double>(M)
          : 0.0;
  std::vector<std::vector<MicroBatch>> minis;
  for (int64_t b = 0; b < M; ++b) {
    std::vector<int64_t> slice(sel.kept.begin() + b * kept / M, sel.kept.begin() + (b + 1) * kept / M);
    minis.push_back(pack_micro_batches(batch, slice, sel.advantages, state.max_tokens(),
                                       config.share_prefixes ? kSharePrefixMinTokens : 0));
  }
  // Old (and reference) log-probs with the weights as they are before any update. The first
  // mini-batch's come from its first training forward instead (the weights are still the old
  // ones there, and the kernels are deterministic: the same bits, one forward fewer per step).
  for (size_t b = 0; b < minis.size(); ++b)
    for (MicroBatch& mb : minis[b]) {
      const size_t T = mb.targets.size();
      stats.positions += static_cast<int64_t>(T), ++stats.micro_batches;
      for (uint8_t m : mb.mask) stats.tokens += m;
      if (config.use_sampler_logprobs) {
        mb.old_logprobs = mb.sampler_logprobs;
      } else if (b > 0) {
        mb.old_logprobs.resize(T);
        policy_forward_logprobs(policy, state, mb.batch, mb.targets, mb.old_logprobs.data(), nullptr, logit_scale);
      }
      if (config.kl_coef > 0) {
        mb.ref_logprobs.resize(T);
        policy_forward_logprobs(*reference, state, mb.batch, mb.targets, mb.ref_logprobs.data(), nullptr, logit_scale);
      }
    }

  GrpoLossStats totals;
  std::vector<float> logp, dlogp, entropy;
  double entropy_sum = 0, entropy_tokens = 0;
  for (int64_t epoch = 0; epoch < config.ppo_epochs; ++epoch) {
    for (size_t b = 0; b < minis.size(); ++b) {
      std::vector<MicroBatch>& mini = minis[b];
      const GrpoLossConfig lc{config.clip_low, config.clip_high, config.kl_coef};
      const LossWeights weights = loss_weights(mini, config.agg, dropped_share);
      if (weights.own_units <= 0) continue;  // nothing to learn from in this slice
      policy_zero_grads(policy);
      double mini_loss = 0;
      for (size_t k = 0; k < mini.size(); ++k) {
        MicroBatch& mb = mini[k];
        const size_t T = mb.targets.size();
        logp.resize(T), dlogp.resize(T);
        if (epoch == 0) entropy.resize(T);
        policy_forward_logprobs(policy, state, mb.batch, mb.targets, logp.data(), epoch == 0 ? entropy.data() : nullptr,
                                logit_scale);
        if (epoch == 0 && b == 0 && !config.use_sampler_logprobs) mb.old_logprobs = logp;
        if (epoch == 0)
          for (size_t t = 0; t < T; ++t)
            if (mb.mask[t]) entropy_sum += entropy[t], ++entropy_tokens;
        GrpoLossStats s = grpo_loss_cpu(dlogp.data(), logp.data(), mb.old_logprobs.data(),
                                        config.kl_coef > 0 ? mb.ref_logprobs.data() : nullptr, mb.advantages.data(),
                                        weights.per_micro[k].data(), static_cast<int64_t>(T), lc);
        policy_backward_logprobs(policy, state, mb.batch, mb.targets, dlogp.data());
        mini_loss += s.loss;
        totals.add(s);
      }
      double sq = policy_grad_sq_sum(policy);
      double norm = std::sqrt(sq);
      ++optimizer.adam_step;
      policy_adamw_step(policy, optimizer, config.adamw, stats.lr, config.max_grad_norm, sq);
      stats.loss += mini_loss, stats.grad_norm += norm, stats.grad_norm_max = std::max(stats.grad_norm_max, norm);
      ++stats.updates;
    }
  }
  if (stats.updates > 0) stats.loss /= static_cast<double>(stats.updates), stats.grad_norm /= static_cast<double>(stats.updates);
  if (entropy_tokens > 0) stats.entropy = entropy_sum / entropy_tokens;
  if (totals.tokens > 0) {
    stats.clip_fraction = totals.clipped / totals.tokens;
    stats.approx_kl = totals.approx_kl / totals.tokens;
    stats.ratio_mean = totals.ratio / totals.tokens;
    stats.ref_kl = totals.ref_kl / totals.tokens;
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace sqlrl::rl
