// rollout() on the CUDA policy against the CPU one, greedy and sampled: the same engine, cache
// bookkeeping, forks and observation prefills, on bf16 weights and activations instead of f32.
//
// Criterion. The device's logits lie within a per-element budget b of the CPU's: 12 sqrt(R) u times
// the L2 norm of lm_head's row weighted by the final norm, ||g W[v]||_2
// (tests/model_cuda/model_cuda_util.h; R bf16 stores on the way, u = 2^-9; tests/model_cuda holds
// the paged decode to it element by element, and the test checks first that the device's paged
// decode replayed along these very trajectories stays within it). Both
// samplers draw with the same Philox uniform u. So a sampled token can differ only where the CPU's
// draw is not sure: greedy, where the CPU's top id does not beat every other by b_x + b_v; sampled,
// where u lies within reach of a CDF edge that logits within budget can move (or reorder) past it
// (bf16_draw_holds derives the reach from the budget). Hence each trajectory must equal its CPU
// twin token for token up to its first difference, that difference must sit at a sampled position
// whose CPU draw is not sure, and the device's token there must be one some error within budget
// draws. On the common prefix, each sampled token's log-prob under the sampling distribution must
// be within (b_x + max_v b_v) / T of the CPU's. Beyond the first difference the two trajectories
// hold different text, so nothing is compared there.
//
// Catches: in the replay, a decode step that reads the wrong KV slots, skips a K/V write or
// rotates at the wrong position, even where it moves the rollout's tokens too little to show (a
// query that skipped its own K/V in the paged kernel flipped the emulated greedy rollout only at
// near-ties, and the replay failed it at 41x its budget); in the rollout, the engine's side: a stale
// block after a fork (copy on write), an observation prefilled at the wrong positions, a sampler
// drawing from the wrong row or with another Philox stream or position, a log-prob from the wrong
// distribution. Those show at the first position whose CPU draw is sure (greedy and at T 0.15 most
// are, printed), in the device's token where the two part, or in the log-probs where the token
// survives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "rl/agent/rollout.h"
#include "tests/rl_cuda/rl_cuda_fixture.h"
#include "tests/rl_rollout/rollout_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

// Rolls out on the CPU, audits its draws, then (with a device) on the CUDA policy and compares.
// tokens_have_teeth: the CPU half asserts that most draws are sure (the seed is picked for it), so
// the token comparison has something to hold the device to.
// shared_stems: the questions begin with one long stem, so the prompts share stretches that the
// admission prefills once and forks (rollout.h PrefillPlan): forks of forks, and copies of the
// partly filled blocks where the shared stretches end, on the device.
// tight_cache: the device's rollout gets a KV cache of one group at the full length, so it admits
// groups optimistically, preempts samples and prefills their histories again (rollout.cpp); the
// CPU's cache holds everything. A recomputed K/V on the device is within the same bf16 budget, so
// the criterion is unchanged.
void rollout_matches_cpu(float temperature, uint32_t model_seed, bool tokens_have_teeth, bool shared_stems = false,
                         bool tight_cache = false) {
  const Tokenizer& tok = tiny_tokenizer();
  const int64_t known = static_cast<int64_t>(tok.size());
  QwenModel cpu = bf16_model(known + 16, model_seed);  // padded: ids past the tokenizer's are masked
  TagProtocol protocol;
  sql::Pool pool;
  std::vector<sql::Example> examples = city_examples();
  if (shared_stems)
    for (sql::Example& ex : examples)
      ex.question = "Looking only at the city table and at the population column of every single row, " + ex.question;
  RolloutOptions o = base_options();
  o.sampling.temperature = temperature;
  o.group_size = 2;          // forks share the prompt's blocks (copy on write on the device)
  o.max_turn_tokens = 10;    // turns end mid-text: invalid actions, injected "Rethink" observations
  o.max_total_tokens = 400;
  o.kv_block_size = 16;
  std::vector<RolloutRequest> requests = make_requests(protocol, tok, pool, examples, o);
  RolloutStats cpu_stats, dev_stats;
  std::vector<Trajectory> a = rollout(cpu, tok, protocol, pool, requests, o, &cpu_stats);
  EXPECT_GT(cpu_stats.injected_tokens, 0);  // observations were prefilled into resumed samples
  if (shared_stems) {
    EXPECT_LT(cpu_stats.prefill_tokens, cpu_stats.prompt_tokens) << "the prompts' shared stretches were not shared";
  }

  // The CPU half: which draws along the CPU's trajectories hold under the budget. A device within
  // budget reproduces at least each trajectory's run of sure draws before its first unsure one.
  std::vector<DrawAudit> audits;
  int64_t sampled = 0, sure = 0, clear_runs = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].tokens.size(), a[i].policy_mask.size());
    audits.push_back(audit_draws(cpu, a[i], o.sampling, o.first_sample_id + i, known));
    bool run = true;
    for (size_t q = 0; q < a[i].tokens.size(); ++q) {
      if (audits[i].sure[q] < 0) continue;
      ++sampled;
      sure += audits[i].sure[q];
      run = run && audits[i].sure[q] == 1;
      clear_runs += run;
    }
  }
  std::printf("T %.2g, CPU: %lld of %lld sampled draws sure under the bf16 budget; %lld sure before each "
              "trajectory's first unsure one, summed over %zu trajectories\n",
              temperature, static_cast<long long>(sure), static_cast<long long>(sampled),
              static_cast<long long>(clear_runs), a.size());
  if (tokens_have_teeth) {
    ASSERT_GE(2 * sure, sampled) << "fewer than half the CPU's draws are sure: the token comparison would be void";
  }

  SQLRL_REQUIRE_CUDA();
  QwenModel dev_host = cpu;
  Policy dev = cuda_policy(dev_host);
  // The premise, on this model and these sequences: the device's decode logits within the budget.
  double premise = device_decode_budget_ratio(dev, a, audits, o.kv_block_size);
  std::printf("device paged decode along the CPU's trajectories: %.3g of the bf16 budget (budget 1)\n", premise);
  ASSERT_LE(premise, 1.0) << "the device's decode logits exceed the budget the audit assumes";

  RolloutOptions device_options = o;
  if (tight_cache) device_options.kv_cache_blocks = o.group_size * ((o.max_total_tokens + 15) / 16);
  std::vector<Trajectory> b = rollout(dev, tok, protocol, pool, requests, device_options, &dev_stats);
  ASSERT_EQ(a.size(), b.size());
  if (tight_cache) {
    std::printf("device cache of %lld blocks: %lld preemptions, %lld live at most\n",
                static_cast<long long>(dev_stats.kv_blocks), static_cast<long long>(dev_stats.preemptions),
                static_cast<long long>(dev_stats.live_max));
    EXPECT_GT(dev_stats.preemptions, 0) << "the tight cache never ran out";
  }
  int same = 0;
  int64_t compared = 0, compared_sure = 0;
  double worst_lp = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string what = "trajectory " + std::to_string(i);
    TrajectoryComparison c = compare_trajectory(a[i], b[i], audits[i], what.c_str());
    same += c.whole;
    compared += c.equal_sampled, compared_sure += c.equal_sure;
    worst_lp = std::max(worst_lp, c.worst_logprob);
  }
  std::printf("%d of %zu trajectories identical on cuda and cpu; %lld sampled tokens compared (%lld sure), "
              "worst log-prob error %.3g of its budget\n",
              same, a.size(), static_cast<long long>(compared), static_cast<long long>(compared_sure), worst_lp);
  // At least the runs of sure draws were reproduced (the rule above implies it; said outright).
  EXPECT_GE(compared_sure, clear_runs);
}

TEST(RolloutCuda, GreedyTokensMatchTheCpuUpToBf16Ties) { rollout_matches_cpu(0.0f, 2, true); }

// Sampled: Philox draws on both devices, the device's stream and position per sample, and the
// sampler's log-probs. At T 0.15 the draws land mostly on the top two or three ids, whose logit
// gaps the budget resolves, so most draws are sure and the trajectories are compared token for
// token over long prefixes.
TEST(RolloutCuda, SampledTokensMatchTheCpuUpToBf16Flips) { rollout_matches_cpu(0.15f, 4, true); }

// At the recipes' T 0.6 this diffuse random model (416 ids, logits of O(1)) puts most draws among
// near-equal tokens that an error within budget may reorder: few draws are sure, and emulated the
// device parted from the CPU within 4 draws in every trajectory. What it holds tightly is the
// log-prob budget, (b_x + max b) / T = ~0.3 nats here against ~1 nat at T 0.15, on the common
// prefix, and the device's token at each first difference.
TEST(RolloutCuda, SampledLogprobsAtTheRecipeTemperatureMatchTheCpu) { rollout_matches_cpu(0.6f, 2, false); }

// Greedy again, on prompts whose shared stem and chat head the admission prefills once.
TEST(RolloutCuda, SharedPromptStretchesMatchTheCpu) { rollout_matches_cpu(0.0f, 2, true, true); }

// Greedy, the device's cache one group: its samples are preempted and recomputed on the device.
TEST(RolloutCuda, PreemptedAndRecomputedSamplesMatchTheCpu) { rollout_matches_cpu(0.0f, 2, true, false, true); }

}  // namespace
}  // namespace sqlrl::rl::testing
