// Partial rollout (rl/agent/rollout.h RolloutOptions::switch_weights): at a fixed decode step the
// rollout takes the next weights and every sample not done goes on under them. Checked by
// recomputing each sampled token's log-prob with a plain forward of the whole trajectory under
// the weights that should have sampled it (batch_invariant: a decode row's bits are a full
// forward's, so only the log-softmax's rounding separates them).
#include <gtest/gtest.h>

#include <cmath>

#include "model/infer.h"
#include "rollout_fixture.h"

namespace sqlrl::rl {
namespace {

using testing::base_options;
using testing::kMixed;
using testing::World;

RolloutOptions partial_options() {
  RolloutOptions o = base_options();
  o.max_total_tokens = 256;
  o.batch_invariant = true;
  return o;
}

// log softmax(logits / T)[token] of every sampled position, by a forward of the whole trajectory.
std::vector<double> recomputed_logprobs(const QwenModel& model, const Trajectory& t, float temperature) {
  const int64_t n = static_cast<int64_t>(t.tokens.size()), V = model.config.vocab_size;
  PagedKVCache kv = make_kv_cache(model.config, (n + 15) / 16, 16);
  std::vector<float> logits;
  forward_cached(model, kv, {{kv_new_sequence(kv), t.tokens}}, logits, /*all_positions=*/true, nullptr, true);
  std::vector<double> out(static_cast<size_t>(n), 0.0);
  for (int64_t i = 1; i < n; ++i) {
    if (!t.policy_mask[i]) continue;
    const float* row = logits.data() + (i - 1) * V;
    double most = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; ++v) most = std::max(most, static_cast<double>(row[v]) / temperature);
    for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) / temperature - most);
    out[i] = static_cast<double>(row[t.tokens[i]]) / temperature - most - std::log(sum);
  }
  return out;
}

struct Gaps {
  double before = 0, after = 0;  // the largest |sampled - recomputed| before / after switch_at
  int64_t switched = 0;          // trajectories with tokens after a switch
};

// Sampled log-probs against `old_model` before each trajectory's switch_at and `new_model` after.
Gaps logprob_gaps(const std::vector<Trajectory>& trajs, const QwenModel& old_model, const QwenModel& new_model,
                  float temperature) {
  Gaps g;
  for (const Trajectory& t : trajs) {
    const std::vector<double> a = recomputed_logprobs(old_model, t, temperature);
    const std::vector<double> b = recomputed_logprobs(new_model, t, temperature);
    const int64_t at = t.switch_at >= 0 ? t.switch_at : static_cast<int64_t>(t.tokens.size());
    bool any_after = false;
    for (size_t i = 0; i < t.tokens.size(); ++i) {
      if (!t.policy_mask[i]) continue;
      const bool after = static_cast<int64_t>(i) >= at;
      any_after |= after;
      double& gap = after ? g.after : g.before;
      gap = std::max(gap, std::abs(static_cast<double>(t.sampler_logprobs[i]) - (after ? b[i] : a[i])));
    }
    g.switched += any_after;
  }
  return g;
}

// Switching to the weights already there changes nothing (recomputing a live sample's cache under
// the same weights gives its bits back); switch_at marks the samples in flight, the stats count
// the switch and the recomputed tokens. A switch past the rollout's end never happens.
TEST(RolloutPartial, SwitchingToTheSameWeightsChangesNoBit) {
  World w(kMixed);
  const RolloutOptions o = partial_options();
  const auto requests = w.requests(o);
  RolloutStats plain_stats;
  const std::vector<Trajectory> plain = rollout(w.model, w.tok, w.protocol, w.pool, requests, o, &plain_stats);
  for (const bool keep : {false, true}) {
    SCOPED_TRACE(keep ? "keep" : "recompute");
    RolloutOptions p = o;
    int calls = 0;
    p.switch_step = 6;
    p.switch_weights = [&] {
      ++calls;
      return true;
    };
    p.partial_kv_keep = keep;
    RolloutStats stats;
    const std::vector<Trajectory> got = rollout(w.model, w.tok, w.protocol, w.pool, requests, p, &stats);
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(stats.weight_switches, 1);
    // Recomputed, each group's prompt is prefilled once more and forked (a prefill of prompt
    // tokens beside the plain run's), the rest of each history as its feed.
    const int64_t again = stats.prefill_tokens - plain_stats.prefill_tokens;
    if (keep) {
      EXPECT_EQ(stats.switch_recomputed_tokens, 0);
      EXPECT_EQ(again, 0);
    } else {
      EXPECT_GT(stats.switch_recomputed_tokens, 0);
      EXPECT_GT(again, 0) << "no prompt prefilled again: each sample recomputed its whole history alone";
      EXPECT_LT(again, stats.switch_recomputed_tokens);
    }
    ASSERT_EQ(got.size(), plain.size());
    int64_t in_flight = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].tokens, plain[k].tokens) << k;
      EXPECT_EQ(got[k].sampler_logprobs, plain[k].sampler_logprobs) << k;
      EXPECT_TRUE(got[k].switch_at == -1 || got[k].switch_at >= got[k].prompt_length) << k;
      in_flight += got[k].switch_at >= 0;
    }
    EXPECT_GT(in_flight, 0);
  }
  RolloutOptions late = o;
  late.switch_step = 1 << 20;
  late.switch_weights = [] {
    ADD_FAILURE() << "a switch after the last step";
    return true;
  };
  for (const Trajectory& t : rollout(w.model, w.tok, w.protocol, w.pool, requests, late)) EXPECT_EQ(t.switch_at, -1);
}

// Another model from step 6 on: each trajectory's tokens before switch_at are the plain rollout's,
// and every sampled log-prob is the old model's before switch_at and, with the cache recomputed,
// exactly the new model's after. Kept, the cache the old model wrote moves the new model's
// log-probs away from its own plain forward. A switch that says stop ends the rollout.
TEST(RolloutPartial, TokensAfterTheSwitchAreTheNextWeights) {
  World w(kMixed);
  const QwenModel first = w.model, next = testing::tiny_model(w.tok, kMixed, 0, /*seed=*/12);
  const RolloutOptions o = partial_options();
  const auto requests = w.requests(o);
  const std::vector<Trajectory> plain = rollout(w.model, w.tok, w.protocol, w.pool, requests, o);
  const float T = o.sampling.temperature;
  for (const bool keep : {false, true}) {
    SCOPED_TRACE(keep ? "keep" : "recompute");
    w.model.params = first.params;
    RolloutOptions p = o;
    p.switch_step = 6;
    p.switch_weights = [&] {
      w.model.params = next.params;
      return true;
    };
    p.partial_kv_keep = keep;
    const std::vector<Trajectory> got = rollout(w.model, w.tok, w.protocol, w.pool, requests, p);
    ASSERT_EQ(got.size(), plain.size());
    for (size_t k = 0; k < got.size(); ++k) {
      const size_t at = got[k].switch_at >= 0 ? static_cast<size_t>(got[k].switch_at) : got[k].tokens.size();
      ASSERT_GE(plain[k].tokens.size(), at) << k;
      EXPECT_TRUE(std::equal(got[k].tokens.begin(), got[k].tokens.begin() + at, plain[k].tokens.begin())) << k;
    }
    const Gaps g = logprob_gaps(got, first, next, T);
    std::printf("%s: %lld trajectories switched; |sampled - recomputed| log-prob at most %.3g before, %.3g after\n",
                keep ? "keep" : "recompute", static_cast<long long>(g.switched), g.before, g.after);
    EXPECT_GT(g.switched, 0);
    EXPECT_LE(g.before, 1e-4);  // f32 log-softmax against a double one
    if (keep) EXPECT_GT(g.after, 1e-2);
    else EXPECT_LE(g.after, 1e-4);
  }
  RolloutOptions stop = o;
  stop.switch_step = 6;
  stop.switch_weights = [] { return false; };
  EXPECT_THROW(rollout(w.model, w.tok, w.protocol, w.pool, requests, stop), RolloutStopped);
}

}  // namespace
}  // namespace sqlrl::rl
