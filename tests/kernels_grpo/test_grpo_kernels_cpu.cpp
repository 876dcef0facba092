// CPU GRPO kernels (advantage, weighted loss, AdamW, grad norm) against the float64 references of
// grpo_ref.h on random inputs with odd sizes, zero-variance groups and all-zero mask rows.
#include <random>

#include "kernels/adamw.h"
#include "kernels/advantage.h"
#include "kernels/grpo_loss.h"
#include "tests/kernels_grpo/grpo_case.h"
#include "tests/test_util.h"

namespace sqlrl::testing {
namespace {

// fp32 results vs float64: a handful of roundings of O(1) values (exp, divide, one multiply)
// -> relative 1e-5 with atol 1e-6 leaves a 10x margin over fp32's 6e-8 unit roundoff per op.
constexpr double kAtol = 1e-6, kRtol = 1e-5;

TEST(GrpoKernelsCpu, AdvantageMatchesFloat64) {
  std::mt19937 rng(std::random_device{}());
  for (int64_t G : {1, 2, 5, 17}) {
    for (int64_t groups : {1, 17, 1000}) {
      for (bool divide_std : {true, false}) {
        std::vector<float> r = random_rewards(rng, groups, G);
        std::vector<float> a(r.size(), NAN);
        group_advantage_cpu(a.data(), r.data(), groups, G, AdvantageOptions{1e-6f, divide_std});
        std::vector<double> want = ref_advantages(r, groups, G, divide_std, 1e-6);
        EXPECT_LE(error_budget_ratio(a, want, kAtol, kRtol), 1.0) << "G=" << G << " groups=" << groups;
        // Group 0 has equal rewards (random_rewards makes it so): advantages exactly 0.
        if (G > 1) {
          for (int64_t i = 0; i < G; ++i) EXPECT_EQ(a[i], 0.0f);
        }
      }
    }
  }
}

// Both aggregations' weights (token-mean: equal; sequence mean: differing per sequence).
TEST(GrpoKernelsCpu, LossMatchesFloat64BothWeightings) {
  std::mt19937 rng(std::random_device{}());
  for (int64_t T : {1, 17, 1000, 10000}) {  // 10000: several 4096-token tiles
    for (bool token_mean : {true, false}) {
      for (float kl : {0.0f, 0.1f}) {
        LossCase c = random_loss_case(rng, T);
        GrpoLossConfig cfg{0.2f, 0.28f, kl};
        const std::vector<float> w = c.weights_f32(token_mean);
        const double denominator = c.denominator(token_mean);
        std::vector<float> dlogp(static_cast<size_t>(T), NAN);
        GrpoLossStats st = grpo_loss_cpu(dlogp.data(), c.logp.data(), c.old.data(), c.ref.data(), c.adv.data(),
                                         w.data(), T, cfg);
        RefLoss want = c.reference(cfg, w);
        SCOPED_TRACE("T=" + std::to_string(T) + " token_mean=" + std::to_string(token_mean) + " kl=" + std::to_string(kl));
        // dlogp is w * d, w ~ 1/tokens: the absolute floor scales with it.
        EXPECT_LE(error_budget_ratio(dlogp, want.dlogp, kAtol / denominator, kRtol), 1.0);
        EXPECT_NEAR(st.loss, want.loss, 1e-5 * (1 + std::fabs(want.loss)));
        EXPECT_EQ(st.tokens, want.tokens);
        EXPECT_EQ(st.clipped, want.clipped);
        EXPECT_NEAR(st.ratio, want.ratio, 1e-5 * want.tokens);
        EXPECT_NEAR(st.approx_kl, want.approx_kl, 1e-5 * want.tokens);
        EXPECT_NEAR(st.ref_kl, want.ref_kl, 1e-5 * want.tokens);
        if (T == 1000) {
          EXPECT_GT(want.clipped, 0) << "the case should exercise clipping";
        }
        // Repeatable bits.
        std::vector<float> again(dlogp.size());
        GrpoLossStats st2 = grpo_loss_cpu(again.data(), c.logp.data(), c.old.data(), c.ref.data(), c.adv.data(),
                                          w.data(), T, cfg);
        EXPECT_EQ(again, dlogp);
        EXPECT_EQ(st2.loss, st.loss);
      }
    }
  }
}

// The backward is the derivative of the forward: central differences of the float64 loss
// (itself checked against the kernel above) on tokens away from the clip kinks.
TEST(GrpoKernelsCpu, LossBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(std::random_device{}());
  LossCase c = random_loss_case(rng, 64);
  for (bool token_mean : {true, false}) {
    GrpoLossConfig cfg{0.2f, 0.28f, 0.1f};
    const std::vector<float> w = c.weights_f32(token_mean);
    const double denominator = c.denominator(token_mean);
    std::vector<float> dlogp(c.logp.size());
    grpo_loss_cpu(dlogp.data(), c.logp.data(), c.old.data(), c.ref.data(), c.adv.data(), w.data(),
                  static_cast<int64_t>(c.logp.size()), cfg);
    const double h = 1e-6;
    int checked = 0;
    for (size_t t = 0; t < c.logp.size() && checked < 12; ++t) {
      double ratio = std::exp(static_cast<double>(c.logp[t]) - c.old[t]);
      if (!c.mask[t] || std::fabs(ratio - 0.8) < 1e-3 || std::fabs(ratio - 1.28) < 1e-3) continue;
      std::vector<double> lp(c.logp.begin(), c.logp.end());
      lp[t] += h;
      double up = c.reference(cfg, w, lp).loss;
      lp[t] -= 2 * h;
      double down = c.reference(cfg, w, lp).loss;
      double fd = (up - down) / (2 * h);
      // fd in float64 is good to ~1e-9 relative; the kernel's fp32 dlogp to ~1e-6.
      EXPECT_NEAR(dlogp[t], fd, 1e-7 / denominator + 1e-5 * std::fabs(fd)) << "token " << t;
      ++checked;
    }
    EXPECT_GE(checked, 6);
  }
}

TEST(GrpoKernelsCpu, AdamWAndGradNormMatchFloat64) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t n : {1, 17, 1000, 70001}) {
    std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
    for (auto& x : p) x = normal(rng);
    RefAdam ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
    AdamWConfig cfg{0.9f, 0.95f, 1e-8f, 0.1f};
    for (int64_t step = 1; step <= 5; ++step) {
      for (auto& x : g) x = normal(rng) * 3.0f;
      double sq = grad_sq_sum_cpu(g.data(), n), want_sq = 0;
      for (float x : g) want_sq += static_cast<double>(x) * x;
      EXPECT_NEAR(sq, want_sq, 1e-12 * want_sq);
      float scale = clip_coefficient(sq, 1.0f);
      EXPECT_NEAR(scale, std::min(1.0, 1.0 / (std::sqrt(want_sq) + 1e-6)), 1e-7);
      adamw_cpu(p.data(), m.data(), v.data(), g.data(), n, cfg, step, 1e-2f, scale);
      ref_adamw_step(ref, g, scale, 1e-2, 0.9, 0.95, 1e-8, 0.1, step);
    }
    // Five fp32 steps of size ~lr: errors ~1e-7 relative per step on parameters of size ~1.
    EXPECT_LE(error_budget_ratio(p, ref.p, 1e-6, 1e-5), 1.0) << "n=" << n;
    EXPECT_LE(error_budget_ratio(m, ref.m, 1e-7, 1e-5), 1.0) << "n=" << n;
    EXPECT_LE(error_budget_ratio(v, ref.v, 1e-9, 1e-5), 1.0) << "n=" << n;
  }
  EXPECT_EQ(clip_coefficient(4.0, 0.0f), 1.0f);  // disabled
  EXPECT_EQ(clip_coefficient(0.25, 1.0f), 1.0f); // norm 0.5 under the limit
}

}  // namespace
}  // namespace sqlrl::testing
