// The GRPO algorithm rows of rl/grpo/algos.h against float64 definitions (tests/kernels/ref.h):
// the group advantage, and the weighted policy loss (grpo row, k1/k2/k3 KL, dual-clip), forward
// and backward, on fresh random inputs (Rng::fresh, the seed in the trace): odd sizes,
// zero-variance groups, all-zero mask rows.
//
// Tolerances.
//  advantage: float64 sums, then one rounding to f32: <= u_f32 relative; budget 2 u_f32 with the
//    floor 2 u_f32 x RMS.
//  grpo_loss: each token's term is a handful of f32 operations (a subtraction, exp, clamps, a
//    product or two), each <= u_f32 of the magnitudes involved; k3 = e^d - d - 1 cancels down to
//    ~d^2/2, but its absolute error stays a few u_f32 of its terms e^d + |d| + 1. So dlogp_t is
//    held to 8 u_f32 x w_t (|A_t| ratio_t where the unclipped branch is active, plus
//    kl_coef (1 + e^d)), and each float64-summed stat to 8 u_f32 x the sum of its terms'
//    magnitudes; token and clipped counts are exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "rl/grpo/algos.h"
#include "runtime/error.h"
#include "tests/kernels/cases.h"

namespace sqlrl::testing {
namespace {

using rl::find_advantage_estimator;
using rl::find_kl_estimator;
using rl::find_policy_loss;
using rl::GrpoLossConfig;
using rl::GrpoLossStats;
using rl::grpo_loss_cpu;

// `groups` groups of G side by side, each through the grpo row.
void group_advantage(float* a, const float* r, int64_t groups, int64_t G, bool divide_std) {
  rl::AdvantageOptions o;
  o.eps = 1e-6f, o.divide_std = divide_std;
  for (int64_t g = 0; g < groups; ++g) find_advantage_estimator("grpo").fn(a + g * G, r + g * G, G, o);
}

GrpoLossConfig loss_config(const char* policy, float clip_low, float clip_high, float kl_coef) {
  GrpoLossConfig c;
  c.policy = &find_policy_loss(policy);
  c.clip.clip_low = clip_low, c.clip.clip_high = clip_high;
  c.kl_coef = kl_coef;
  return c;
}

// --- advantage -----------------------------------------------------------------------------
// Group 0 has equal rewards (zero variance); a third of the rest are binary (0/1, as EX rewards),
// the others uniform in [-1, 2).
std::vector<float> random_rewards(Rng& rng, int64_t groups, int64_t G) {
  std::uniform_real_distribution<float> u(-1.0f, 2.0f);
  std::vector<float> r(static_cast<size_t>(groups * G));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = 0; i < G; ++i) {
      const float x = u(rng.engine());
      r[g * G + i] = g == 0 ? 0.75f : (g % 3 == 1 ? (x > 0.5f ? 1.0f : 0.0f) : x);
    }
  return r;
}

TEST(Algos, GrpoAdvantageMatchesFloat64) {
  Rng rng = Rng::fresh();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const double rtol = reduction_rtol(Precision::F32, 1, 2.0);
  for (int64_t G : {1, 2, 5, 17})
    for (int64_t groups : {1, 17, 1000})
      for (bool divide_std : {true, false}) {
        SCOPED_TRACE("G " + std::to_string(G) + " groups " + std::to_string(groups) + " divide_std " +
                     std::to_string(divide_std));
        const std::vector<float> r = random_rewards(rng, groups, G);
        std::vector<float> a(r.size(), NAN);
        group_advantage(a.data(), r.data(), groups, G, divide_std);
        const std::vector<double> want = ref_advantages(r, groups, G, divide_std, 1e-6);
        expect_close(a, want, {rtol * rms(want), rtol}, "advantages");
        // Group 0 has equal rewards: advantages exactly 0.
        if (G > 1) {
          for (int64_t i = 0; i < G; ++i) EXPECT_EQ(a[i], 0.0f);
        }
        // In place (advantages may alias rewards): the same bits.
        std::vector<float> in_place = r;
        group_advantage(in_place.data(), in_place.data(), groups, G, divide_std);
        EXPECT_EQ(in_place, a);
      }
}

// --- grpo_loss -----------------------------------------------------------------------------
struct LossCase {
  std::vector<float> logp, old, ref, adv;
  std::vector<float> is;  // rollout importance weights (rl/grpo/rollout_is.h), empty: none
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
  // The aggregation's weights as the float array the kernel takes.
  std::vector<float> weights_f32(bool token_mean) const {
    const std::vector<double> w = ref_loss_weights(mask, cu, token_mean, denominator(token_mean));
    return std::vector<float>(w.begin(), w.end());
  }
  RefLoss reference(const GrpoLossConfig& c, const std::vector<float>& w, const std::vector<double>& lp) const {
    const std::vector<double> v = widen(is);
    return ref_grpo_loss_weighted(lp, old, &ref, adv, widen(w), c.clip.clip_low, c.clip.clip_high, c.kl_coef,
                                  is.empty() ? nullptr : &v);
  }
};

// Sequences of 0..40 tokens (empty ones included) tiling T; one sequence fully masked out;
// log-ratios N(0, 0.25) so that both clip sides are hit; advantages N(0, 1) per sequence.
LossCase random_loss_case(Rng& rng, int64_t T) {
  std::uniform_int_distribution<int> len(0, 40), bit(0, 9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.05f, 5.0f);
  auto& gen = rng.engine();
  LossCase c;
  c.cu = {0};
  while (c.cu.back() < T) c.cu.push_back(static_cast<int32_t>(std::min<int64_t>(T, c.cu.back() + len(gen))));
  c.logp.resize(T), c.old.resize(T), c.ref.resize(T), c.adv.resize(T), c.mask.resize(T);
  for (size_t s = 0; s + 1 < c.cu.size(); ++s) {
    const float a = normal(gen);
    const bool all_zero = s == 1;
    for (int32_t t = c.cu[s]; t < c.cu[s + 1]; ++t) {
      c.old[t] = -u(gen);
      c.logp[t] = c.old[t] + 0.25f * normal(gen);
      c.ref[t] = c.logp[t] + 0.3f * normal(gen);
      c.adv[t] = a;
      c.mask[t] = all_zero ? 0 : (T == 1 || bit(gen) < 7);
    }
  }
  return c;
}

// Per-token magnitudes of dlogp's terms and sums of the magnitudes of each stat's terms: the
// scales of their rounding errors.
struct LossScale {
  std::vector<double> dlogp;
  double loss = 0, ratio = 0, approx_kl = 0, ref_kl = 0;
};
LossScale loss_scale(const LossCase& c, const std::vector<float>& w, const GrpoLossConfig& cfg) {
  LossScale s;
  s.dlogp.assign(c.logp.size(), 0.0);
  for (size_t t = 0; t < c.logp.size(); ++t) {
    if (w[t] == 0) continue;
    const double r = std::exp(static_cast<double>(c.logp[t]) - c.old[t]), d = static_cast<double>(c.ref[t]) - c.logp[t];
    const double rc = std::clamp(r, 1.0 - cfg.clip.clip_low, 1.0 + cfg.clip.clip_high);
    const bool clipped = -c.adv[t] * rc > -c.adv[t] * r;
    const double k3_terms =
        cfg.kl_coef > 0 ? std::exp(d) + std::fabs(d) + 1 : 0.0;  // e^d - d - 1 cancels; its error does not
    const double v = c.is.empty() ? 1.0 : c.is[t];
    s.dlogp[t] = w[t] * ((clipped ? 0.0 : v * std::fabs(c.adv[t]) * r) + cfg.kl_coef * (1 + std::exp(d)));
    s.loss += w[t] * (v * std::fabs(c.adv[t]) * r + cfg.kl_coef * k3_terms);
    s.ratio += r;
    s.approx_kl += std::fabs(c.old[t]) + std::fabs(c.logp[t]);
    s.ref_kl += k3_terms;
  }
  return s;
}

TEST(Algos, GrpoLossMatchesFloat64) {
  Rng rng = Rng::fresh();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const double u8 = 8 * unit_roundoff(Precision::F32);
  for (int64_t T : {1, 17, 1000, 10000})   // 10000: several 4096-token tiles
    for (bool token_mean : {true, false})  // weights equal (token mean) or differing per sequence
      for (float kl : {0.0f, 0.1f})
      for (bool is : {false, true}) {  // rollout importance weights: uniform in [0, 2], some exactly 0
        SCOPED_TRACE("T " + std::to_string(T) + " token_mean " + std::to_string(token_mean) + " kl " +
                     std::to_string(kl) + " is " + std::to_string(is));
        LossCase c = random_loss_case(rng, T);
        if (is) {
          std::uniform_real_distribution<float> u(0.0f, 2.0f);
          c.is.resize(static_cast<size_t>(T));
          for (int64_t t = 0; t < T; ++t) c.is[t] = t % 13 == 5 ? 0.0f : u(rng.engine());
        }
        const float* isw = c.is.empty() ? nullptr : c.is.data();
        const GrpoLossConfig cfg = loss_config("grpo", 0.2f, 0.28f, kl);
        const std::vector<float> w = c.weights_f32(token_mean);
        std::vector<float> dlogp(static_cast<size_t>(T), NAN);
        const GrpoLossStats st =
            grpo_loss_cpu(dlogp.data(), c.logp.data(), c.old.data(), c.ref.data(), c.adv.data(), w.data(), isw, T, cfg);
        const RefLoss want = c.reference(cfg, w, widen(c.logp));
        const LossScale scale = loss_scale(c, w, cfg);
        double worst = 0;
        for (int64_t t = 0; t < T; ++t) {
          const double budget = u8 * scale.dlogp[t];
          ASSERT_NEAR(dlogp[t], want.dlogp[t], budget) << "dlogp of token " << t;
          if (budget > 0) worst = std::max(worst, std::fabs(dlogp[t] - want.dlogp[t]) / budget);
        }
        worst_budget_ratio() = std::max(worst_budget_ratio(), worst);
        expect_within(st.loss, want.loss, u8 * scale.loss, "loss");
        EXPECT_EQ(st.tokens, want.tokens);
        EXPECT_EQ(st.clipped, want.clipped);
        expect_within(st.ratio, want.ratio, u8 * scale.ratio, "ratio");
        expect_within(st.approx_kl, want.approx_kl, u8 * scale.approx_kl, "approx_kl");
        expect_within(st.ref_kl, want.ref_kl, u8 * scale.ref_kl, "ref_kl");
        if (T == 1000) {
          EXPECT_GT(want.clipped, 0) << "the case should exercise clipping";
        }
        // Forward only (dlogp null): the same stats.
        const GrpoLossStats fwd =
            grpo_loss_cpu(nullptr, c.logp.data(), c.old.data(), c.ref.data(), c.adv.data(), w.data(), isw, T, cfg);
        EXPECT_EQ(fwd.loss, st.loss);
        // Repeatable bits.
        std::vector<float> again(dlogp.size());
        const GrpoLossStats st2 =
            grpo_loss_cpu(again.data(), c.logp.data(), c.old.data(), c.ref.data(), c.adv.data(), w.data(), isw, T, cfg);
        EXPECT_EQ(again, dlogp);
        EXPECT_EQ(st2.loss, st.loss);
      }

  // Dual-clip (c = 3) and the k1 / k2 KL estimators: log-ratios N(0, 1) so that many tokens with a
  // negative advantage pass ratio 3 and hit the cap; each estimator with its own gradient.
  for (int est : {1, 2, 3})
    for (float dual : {0.0f, 3.0f}) {
      SCOPED_TRACE("kl estimator k" + std::to_string(est) + " dual-clip " + std::to_string(dual));
      LossCase c = random_loss_case(rng, 2000);
      for (size_t t = 0; t < c.logp.size(); ++t) c.logp[t] = c.old[t] + 4.0f * (c.logp[t] - c.old[t]);
      GrpoLossConfig cfg = loss_config("grpo", 0.2f, 0.28f, 0.1f);
      cfg.clip.dual_clip = dual;
      cfg.kl = &find_kl_estimator("k" + std::to_string(est));
      const std::vector<float> w = c.weights_f32(true);
      std::vector<float> dlogp(c.logp.size(), NAN);
      const GrpoLossStats st = grpo_loss_cpu(dlogp.data(), c.logp.data(), c.old.data(), c.ref.data(), c.adv.data(),
                                             w.data(), nullptr, static_cast<int64_t>(c.logp.size()), cfg);
      const RefLoss want = ref_grpo_loss_weighted(widen(c.logp), c.old, &c.ref, c.adv, widen(w), 0.2, 0.28, 0.1,
                                                  nullptr, dual, est);
      int capped = 0;
      for (size_t t = 0; t < c.logp.size(); ++t) {
        const double r = std::exp(static_cast<double>(c.logp[t]) - c.old[t]);
        capped += w[t] != 0 && c.adv[t] < 0 && r > 3.5;
        // fp32 terms of size |A| r and kl_coef (1 + |d| + e^d): 1e-5 relative of the largest.
        const double d = static_cast<double>(c.ref[t]) - c.logp[t];
        const double scale = w[t] * (std::fabs(c.adv[t]) * r + 0.1 * (1 + std::fabs(d) + std::exp(std::min(d, 20.0))));
        ASSERT_NEAR(dlogp[t], want.dlogp[t], 1e-5 * scale) << "dlogp of token " << t;
      }
      EXPECT_GT(capped, 10) << "the case should reach the dual-clip cap";
      EXPECT_NEAR(st.loss, want.loss, 1e-5 * (1 + std::fabs(want.loss)));
      EXPECT_NEAR(st.ref_kl, want.ref_kl, 1e-5 * (1 + std::fabs(want.ref_kl)));
      EXPECT_EQ(st.clipped, want.clipped);
    }

  // The backward is the derivative of the forward: central differences of the float64 loss on
  // tokens away from the clip kinks, against the float64 backward (which the kernel's dlogp is
  // held to above) and against the kernel's dlogp directly (fd in float64 is good to ~1e-9
  // relative; the kernel's fp32 dlogp to ~1e-6).
  const LossCase c = random_loss_case(rng, 64);
  for (bool token_mean : {true, false}) {
    SCOPED_TRACE("finite differences, token_mean " + std::to_string(token_mean));
    const GrpoLossConfig cfg = loss_config("grpo", 0.2f, 0.28f, 0.1f);
    const std::vector<float> w = c.weights_f32(token_mean);
    const double denominator = c.denominator(token_mean);
    const std::vector<double> analytic = c.reference(cfg, w, widen(c.logp)).dlogp;
    std::vector<float> dlogp(c.logp.size());
    grpo_loss_cpu(dlogp.data(), c.logp.data(), c.old.data(), c.ref.data(), c.adv.data(), w.data(), nullptr,
                  static_cast<int64_t>(c.logp.size()), cfg);
    std::vector<double> smooth_analytic, fd;
    for (size_t t = 0; t < c.logp.size() && fd.size() < 12; ++t) {
      const double ratio = std::exp(static_cast<double>(c.logp[t]) - c.old[t]);
      if (!c.mask[t] || std::fabs(ratio - 0.8) < 1e-3 || std::fabs(ratio - 1.28) < 1e-3) continue;
      const double h = 1e-6;
      std::vector<double> lp = widen(c.logp);
      lp[t] += h;
      const double up = c.reference(cfg, w, lp).loss;
      lp[t] -= 2 * h;
      const double down = c.reference(cfg, w, lp).loss;
      fd.push_back((up - down) / (2 * h));
      smooth_analytic.push_back(analytic[t]);
      EXPECT_NEAR(dlogp[t], fd.back(), 1e-7 / denominator + 1e-5 * std::fabs(fd.back())) << "token " << t;
    }
    EXPECT_GE(fd.size(), 6u);
    expect_matches_finite_differences(smooth_analytic, fd, "float64 dlogp");
  }
}


// CISPO (MiniMax-M1, arXiv 2506.13585, eq. 4-5), from its definition in float64: loss =
// sum_t w_t v_t (-A_t sg(c_t) logp_t), c_t = clip(exp(logp_t - old_t), 1 - lo, 1 + hi), and the
// gradient w_t v_t (-A_t c_t) on every trained token: the clip bounds the weight, it never drops
// the token (where the grpo row gives a clipped token no gradient). Log-ratios N(0, 0.5) reach
// both bounds; the paper's setting (no lower bound: clip-low 1) and a two-sided one.
TEST(Algos, CispoKeepsEveryTokensGradientUnderAClippedWeight) {
  Rng rng = Rng::fresh();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  for (const float lo : {1.0f, 0.2f}) {
    SCOPED_TRACE("clip-low " + std::to_string(lo));
    LossCase c = random_loss_case(rng, 3000);
    for (size_t t = 0; t < c.logp.size(); ++t) c.logp[t] = c.old[t] + 2.0f * (c.logp[t] - c.old[t]);
    c.is.resize(c.logp.size());
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    for (float& v : c.is) v = u(rng.engine());
    const float hi = 0.28f;
    const GrpoLossConfig cfg = loss_config("cispo", lo, hi, 0.0f);
    const std::vector<float> w = c.weights_f32(true);
    std::vector<float> dlogp(c.logp.size(), NAN);
    const GrpoLossStats st = grpo_loss_cpu(dlogp.data(), c.logp.data(), c.old.data(), nullptr, c.adv.data(), w.data(),
                                           c.is.data(), static_cast<int64_t>(c.logp.size()), cfg);
    double loss = 0, loss_scale = 0, clipped = 0;
    int outside = 0;
    for (size_t t = 0; t < c.logp.size(); ++t) {
      if (w[t] == 0) {
        EXPECT_EQ(dlogp[t], 0.0f);
        continue;
      }
      const double r = std::exp(static_cast<double>(c.logp[t]) - c.old[t]);
      const double weight = std::clamp(r, 1.0 - lo, 1.0 + hi);
      const bool clip = weight != r;
      clipped += clip, outside += clip;
      const double g = static_cast<double>(w[t]) * c.is[t] * -c.adv[t] * weight;
      loss += g * c.logp[t];
      loss_scale += std::fabs(g * c.logp[t]);
      // A handful of f32 roundings (exp, clamp, three products): 8 u_f32 of the term.
      ASSERT_NEAR(dlogp[t], g, 8 * unit_roundoff(Precision::F32) * std::fabs(g) + 1e-30) << "token " << t;
    }
    EXPECT_GT(outside, 100) << "the case should reach the clip";
    expect_within(st.loss, loss, 8 * unit_roundoff(Precision::F32) * loss_scale, "loss");
    EXPECT_EQ(st.clipped, clipped);
  }
}

TEST(Algos, UnknownNamesAreRefusedWithTheRows) {
  try {
    find_policy_loss("gsop");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("policy-loss 'gsop' is not one of grpo | gspo | cispo"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(find_kl_estimator("k4"), Error);
  EXPECT_THROW(find_advantage_estimator("gae"), Error);
  // The help lines are built from the rows: every name is in them.
  for (const rl::PolicyLoss& p : rl::policy_losses())
    EXPECT_NE(std::string(rl::policy_loss_help()).find(p.name), std::string::npos) << p.name;
  for (const rl::KlEstimator& k : rl::kl_estimators())
    EXPECT_NE(std::string(rl::kl_estimator_help()).find(k.name), std::string::npos) << k.name;
}

}  // namespace
}  // namespace sqlrl::testing
