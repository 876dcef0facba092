// Optimistic KV admission with preemption (rl/agent/rollout.cpp): with a cache too small for
// every live sample at the full length, groups are admitted while blocks are free, the youngest
// samples are preempted when they run out, and their histories are prefilled again when they are
// readmitted. batch_invariant rollouts (CPU) make the schedule invisible: every trajectory's
// tokens and log-probs are those of a rollout whose cache holds everything, bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "rollout_fixture.h"

namespace sqlrl::rl {
namespace {

using testing::base_options;
using testing::Boosts;
using testing::kMixed;
using testing::World;

int64_t per_sample_blocks(const RolloutOptions& o) { return (o.max_total_tokens + o.kv_block_size - 1) / o.kv_block_size; }

// A cap the samples reach within a few turns, so that they outgrow a cache of one group.
RolloutOptions preempt_options() {
  RolloutOptions o = base_options();
  o.max_total_tokens = 256;
  o.batch_invariant = true;
  return o;
}

void expect_same_bits(const std::vector<Trajectory>& a, const std::vector<Trajectory>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    SCOPED_TRACE("trajectory " + std::to_string(k));
    EXPECT_EQ(a[k].tokens, b[k].tokens);
    EXPECT_EQ(a[k].policy_mask, b[k].policy_mask);
    ASSERT_EQ(a[k].sampler_logprobs.size(), b[k].sampler_logprobs.size());
    EXPECT_EQ(0, std::memcmp(a[k].sampler_logprobs.data(), b[k].sampler_logprobs.data(),
                             a[k].sampler_logprobs.size() * sizeof(float)));
    ASSERT_EQ(a[k].turns.size(), b[k].turns.size());
    for (size_t i = 0; i < a[k].turns.size(); ++i) EXPECT_EQ(a[k].turns[i].observation, b[k].turns[i].observation);
    EXPECT_EQ(a[k].answered, b[k].answered);
    EXPECT_EQ(a[k].truncated, b[k].truncated);
    EXPECT_EQ(a[k].final_sql, b[k].final_sql);
  }
}

int64_t preemptions_of(const std::vector<Trajectory>& trajs) {
  int64_t n = 0;
  for (const Trajectory& t : trajs) n += t.preemptions;
  return n;
}

// The least cache a rollout takes, one group at the full length: the worst-case rule alone would
// run the three groups one after the other. Optimistic admission runs more at once, the cache runs
// out, samples are preempted (some while their SQL runs: sql-wait-steps 3) and recomputed; every
// bit of every trajectory is the roomy cache's. Few answers and end-of-turn tokens, so that the
// trajectories grow long enough to fill the cache.
TEST(RolloutPreempt, ACacheOfOneGroupPreemptsAndChangesNoBit) {
  World w(Boosts{0.3f, 0.05f, 0.05f});
  RolloutOptions o = preempt_options();
  o.sql_wait_steps = 3;
  auto requests = w.requests(o);
  RolloutStats roomy_stats, tight_stats;
  std::vector<Trajectory> roomy = rollout(w.model, w.tok, w.protocol, w.pool, requests, o, &roomy_stats);
  RolloutOptions tight = o;
  tight.kv_cache_blocks = o.group_size * per_sample_blocks(o);
  std::vector<Trajectory> squeezed = rollout(w.model, w.tok, w.protocol, w.pool, requests, tight, &tight_stats);
  EXPECT_EQ(roomy_stats.kv_blocks, 3 * tight.kv_cache_blocks);
  EXPECT_EQ(roomy_stats.preemptions, 0);
  EXPECT_EQ(tight_stats.kv_blocks, tight.kv_cache_blocks);
  EXPECT_GT(tight_stats.preemptions, 0);
  EXPECT_GT(tight_stats.preempted_tokens, 0);
  EXPECT_EQ(preemptions_of(squeezed), tight_stats.preemptions);
  EXPECT_GT(tight_stats.live_max, o.group_size) << "no second group came in before the first finished";
  EXPECT_LE(tight_stats.kv_blocks_peak, tight_stats.kv_blocks);
  EXPECT_EQ(roomy_stats.sampled_tokens, tight_stats.sampled_tokens);
  EXPECT_EQ(roomy_stats.sql_calls, tight_stats.sql_calls);
  std::printf("one group's cache (%lld blocks): %lld preemptions dropping %lld cached tokens, %lld live at most "
              "(%.1f on average), peak %lld blocks; roomy: %lld live at most\n",
              (long long)tight_stats.kv_blocks, (long long)tight_stats.preemptions,
              (long long)tight_stats.preempted_tokens, (long long)tight_stats.live_max,
              double(tight_stats.live_sum) / double(tight_stats.live_steps), (long long)tight_stats.kv_blocks_peak,
              (long long)roomy_stats.live_max);
  expect_same_bits(roomy, squeezed);
}

// Turns that can only end at max-turn-tokens (no stop strings; the end-of-turn tokens never
// drawn), so a group's samples grow in lockstep (the same lengths turn by turn: every turn is
// invalid and gets the same "Rethink" text) until the cap.
struct NoStops : testing::TagProtocol {
  std::vector<std::string> stop_strings() const override { return {}; }
};

// Sample v preempted while its sibling s, never preempted and as long, was live then (they
// decoded together until v's preemption, and s ends where v does), so v shared the group's
// prompt blocks with s: the counts must keep them for s, which recomputation and the
// end-of-rollout check (every block back) would show otherwise. Some sample is preempted twice.
// Every bit is the roomy cache's.
TEST(RolloutPreempt, SharedPromptBlocksSurviveAndASampleIsPreemptedTwice) {
  World w(Boosts{-50.0f, -50.0f, -50.0f, -50.0f});
  const int64_t C = w.model.config.hidden_size;
  w.model.weights().lm_head[static_cast<int64_t>(w.tok.token_id("<|endoftext|>")) * C] = -50.0f;
  NoStops protocol;
  protocol.turns = 3;  // ~220 tokens each: the cache of one group runs out, but not for every sample
  RolloutOptions o = preempt_options();
  o.max_turn_tokens = 32;
  auto requests = testing::make_requests(protocol, w.tok, w.pool, w.examples, o);
  const int64_t G = o.group_size;
  std::vector<Trajectory> roomy = rollout(w.model, w.tok, protocol, w.pool, requests, o);
  RolloutOptions tight = o;
  tight.kv_cache_blocks = G * per_sample_blocks(o);
  RolloutStats stats;
  std::vector<Trajectory> squeezed = rollout(w.model, w.tok, protocol, w.pool, requests, tight, &stats);
  for (const Trajectory& t : squeezed)
    for (const TurnRecord& turn : t.turns) ASSERT_EQ(turn.action.kind, ActionKind::Invalid) << "a turn ended early";
  ASSERT_GE(requests[0].prompt_tokens.size(), static_cast<size_t>(o.kv_block_size)) << "no full prompt block to share";
  int64_t shared = 0, twice = 0;
  for (size_t v = 0; v < squeezed.size(); ++v) {
    twice += squeezed[v].preemptions >= 2;
    if (squeezed[v].preemptions == 0) continue;
    for (size_t s = v / G * G; s < (v / G + 1) * G; ++s)
      shared += squeezed[s].preemptions == 0 && squeezed[s].policy_mask == squeezed[v].policy_mask;
  }
  std::printf("%lld preemptions; (preempted, never-preempted lockstep sibling) pairs %lld; samples preempted twice "
              "or more %lld\n", (long long)stats.preemptions, (long long)shared, (long long)twice);
  EXPECT_GT(shared, 0);
  EXPECT_GT(twice, 0);
  // The youngest go first: the first group admitted never makes room for the others.
  for (int64_t g = 0; g < G; ++g) EXPECT_EQ(squeezed[static_cast<size_t>(g)].preemptions, 0) << "sample " << g;
  expect_same_bits(roomy, squeezed);
}

// The batch cap still bounds the live samples, and a cache of one group with a cap of one group
// never needs to preempt (the worst-case rule admits it).
TEST(RolloutPreempt, TheBatchCapBoundsLiveSamples) {
  World w(kMixed);
  RolloutOptions o = preempt_options();
  o.max_batch_sequences = o.group_size;
  o.kv_cache_blocks = o.group_size * per_sample_blocks(o);
  RolloutStats stats;
  auto capped = rollout(w.model, w.tok, w.protocol, w.pool, w.requests(o), o, &stats);
  EXPECT_LE(stats.live_max, o.group_size);
  EXPECT_EQ(stats.preemptions, 0);
  RolloutOptions free_run = preempt_options();
  expect_same_bits(rollout(w.model, w.tok, w.protocol, w.pool, w.requests(o), free_run), capped);
}

}  // namespace
}  // namespace sqlrl::rl
