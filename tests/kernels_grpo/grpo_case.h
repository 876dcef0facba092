// Random inputs for the GRPO kernel tests (fresh per run) and the float64 reference bound to them.
#pragma once
#include <random>
#include <vector>

#include "kernels/grpo_loss.h"
#include "tests/kernels_grpo/grpo_ref.h"

namespace sqlrl::testing {

// Group 0 has equal rewards (zero variance); a third of the rest are binary (0/1, as EX rewards),
// the others uniform in [-1, 2).
inline std::vector<float> random_rewards(std::mt19937& rng, int64_t groups, int64_t G) {
  std::uniform_real_distribution<float> u(-1.0f, 2.0f);
  std::vector<float> r(static_cast<size_t>(groups * G));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = 0; i < G; ++i) {
      float x = u(rng);
      r[g * G + i] = g == 0 ? 0.75f : (g % 3 == 1 ? (x > 0.5f ? 1.0f : 0.0f) : x);
    }
  return r;
}

struct LossCase {
  std::vector<float> logp, old, ref, adv;
  std::vector<uint8_t> mask;
  std::vector<int32_t> cu;
  double denominator(bool token_mean) const {
    double tokens = 0, seqs = 0;
    for (size_t s = 0; s + 1 < cu.size(); ++s) {
      int n = 0;
      for (int32_t t = cu[s]; t < cu[s + 1]; ++t) n += mask[t];
      tokens += n, seqs += n > 0;
    }
    return std::max(1.0, token_mean ? tokens : seqs);
  }
  // The aggregation's weights (float64 and as the float array the kernel takes).
  std::vector<double> weights(bool token_mean) const { return ref_loss_weights(mask, cu, token_mean, denominator(token_mean)); }
  std::vector<float> weights_f32(bool token_mean) const {
    std::vector<double> w = weights(token_mean);
    return std::vector<float>(w.begin(), w.end());
  }
  RefLoss reference(const GrpoLossConfig& c, const std::vector<float>& w, const std::vector<double>& lp) const {
    return ref_grpo_loss_weighted(lp, old, &ref, adv, std::vector<double>(w.begin(), w.end()), c.clip_low, c.clip_high,
                                  c.kl_coef);
  }
  RefLoss reference(const GrpoLossConfig& c, const std::vector<float>& w) const {
    return reference(c, w, std::vector<double>(logp.begin(), logp.end()));
  }
};

// Sequences of 0..40 tokens (empty ones included) tiling T; one sequence fully masked out;
// log-ratios N(0, 0.25) so that both clip sides are hit; advantages N(0, 1) per sequence.
inline LossCase random_loss_case(std::mt19937& rng, int64_t T) {
  std::uniform_int_distribution<int> len(0, 40), bit(0, 9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.05f, 5.0f);
  LossCase c;
  c.cu = {0};
  while (c.cu.back() < T) c.cu.push_back(static_cast<int32_t>(std::min<int64_t>(T, c.cu.back() + len(rng))));
  c.logp.resize(T), c.old.resize(T), c.ref.resize(T), c.adv.resize(T), c.mask.resize(T);
  for (size_t s = 0; s + 1 < c.cu.size(); ++s) {
    float a = normal(rng);
    bool all_zero = s == 1;
    for (int32_t t = c.cu[s]; t < c.cu[s + 1]; ++t) {
      c.old[t] = -u(rng);
      c.logp[t] = c.old[t] + 0.25f * normal(rng);
      c.ref[t] = c.logp[t] + 0.3f * normal(rng);
      c.adv[t] = a;
      c.mask[t] = all_zero ? 0 : (T == 1 || bit(rng) < 7);
    }
  }
  return c;
}

}  // namespace sqlrl::testing
