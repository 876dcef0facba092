#include "rl/grpo/grpo.h"

#include <algorithm>
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
    config.advantage_estimator->fn(adv.data(), rewards.data(), static_cast<int64_t>(members.size()), config.advantage);
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

}  // namespace sqlrl::rl
