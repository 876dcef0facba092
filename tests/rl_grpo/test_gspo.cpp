// GSPO through the token loss (rl/grpo/algos.h: the gspo row's sequence_old, then its token term): against the sequence
// objective of Zheng et al. 2025 (arXiv 2507.18071, eq. 7), written here in float64 from the
// formula: s_i = exp(mean over sequence i's trained tokens of (logp - old)), loss =
// (1/D) sum_i max(-A_i s_i, -A_i clip(s_i, 1 - lo, 1 + hi)), D = sequences with a trained token,
// and its gradient d loss / d logp_t = -A_i s_i / (n_i D) where the unclipped branch is active, 0
// where the clip holds. Ragged sequences, masked tokens, an empty and an untrained sequence; the
// clip ranges are narrow, as the paper's, so both branches are taken.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "rl/grpo/algos.h"
#include "rl/grpo/grpo.h"

namespace sqlrl::rl {
namespace {

TEST(Gspo, TokenKernelGivesTheSequenceObjectiveAndItsGradient) {
  std::mt19937 gen(20261125);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> len(0, 30), bit(0, 9);
  std::vector<int32_t> cu = {0};
  for (int s = 0; s < 40; ++s) cu.push_back(cu.back() + (s == 3 ? 0 : len(gen)));
  const size_t T = static_cast<size_t>(cu.back());
  std::vector<float> logp(T), old(T), adv(T), w(T, 0.0f);
  std::vector<uint8_t> mask(T);
  std::vector<double> n(cu.size() - 1, 0);
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const float a = normal(gen);
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t) {
      old[t] = -1.0f - std::fabs(normal(gen));
      logp[t] = old[t] + 0.05f * normal(gen);
      adv[t] = a;
      mask[t] = s == 5 ? 0 : bit(gen) < 8;  // sequence 5 trains nothing
      n[s] += mask[t];
    }
  }
  double D = 0;
  for (double k : n) D += k > 0;
  for (size_t s = 0; s + 1 < cu.size(); ++s)
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t)
      if (mask[t]) w[t] = static_cast<float>(1.0 / (n[s] * D));  // seq-mean-token-mean, GSPO's

  const float lo = 0.01f, hi = 0.012f;
  std::vector<float> old_seq(T), dlogp(T, NAN);
  GrpoLossConfig config;
  config.policy = &find_policy_loss("gspo");
  config.clip.clip_low = lo, config.clip.clip_high = hi;
  ASSERT_NE(config.policy->sequence_old, nullptr);
  config.policy->sequence_old(logp.data(), old.data(), mask.data(), cu, old_seq.data());
  const GrpoLossStats st = grpo_loss_cpu(dlogp.data(), logp.data(), old_seq.data(), nullptr, adv.data(), w.data(),
                                         nullptr, static_cast<int64_t>(T), config);

  double loss = 0;
  int clipped_seqs = 0, free_seqs = 0;
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    if (n[s] == 0) {
      for (int32_t t = cu[s]; t < cu[s + 1]; ++t) EXPECT_EQ(dlogp[t], 0.0f);
      continue;
    }
    double sum = 0;
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t)
      if (mask[t]) sum += static_cast<double>(logp[t]) - old[t];
    const double si = std::exp(sum / n[s]), A = adv[cu[s]];
    const double pg1 = -A * si, pg2 = -A * std::clamp(si, 1.0 - lo, 1.0 + hi);
    const bool clipped = pg2 > pg1;
    clipped_seqs += clipped, free_seqs += !clipped;
    loss += std::max(pg1, pg2) / D;
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t) {
      const double want = !mask[t] || clipped ? 0.0 : -A * si / (n[s] * D);
      // fp32: the ratio is exp of a float difference (~1e-7 relative), times float weights.
      EXPECT_NEAR(dlogp[t], want, 1e-6 * std::fabs(A * si / (n[s] * D)) + 1e-12) << "sequence " << s << " token " << t;
    }
  }
  EXPECT_GT(clipped_seqs, 3) << "the clip should hold for some sequences";
  EXPECT_GT(free_seqs, 3) << "and not for others";
  EXPECT_NEAR(st.loss, loss, 1e-6 * (1 + std::fabs(loss)));
}

}  // namespace
}  // namespace sqlrl::rl
