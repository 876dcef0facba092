// Float64 re-implementations of the GRPO kernels (advantage, loss, AdamW), written from the
// formulas (verl's core_algos and torch.optim.AdamW), independent of kernels/*.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace sqlrl::testing {

inline std::vector<double> ref_advantages(const std::vector<float>& r, int64_t groups, int64_t G, bool divide_std,
                                          double eps) {
  std::vector<double> a(r.size());
  for (int64_t g = 0; g < groups; ++g) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < G; ++i) mean += r[g * G + i];
    mean /= G;
    for (int64_t i = 0; i < G; ++i) var += (r[g * G + i] - mean) * (r[g * G + i] - mean);
    double sd = G > 1 ? std::sqrt(var / (G - 1)) : 1.0;
    if (G == 1) mean = 0;  // verl: mean 0, std 1 for a group of one
    for (int64_t i = 0; i < G; ++i)
      a[g * G + i] = divide_std ? (r[g * G + i] - mean) / (sd + eps) : r[g * G + i] - mean;
  }
  return a;
}

struct RefLoss {
  double loss = 0, tokens = 0, clipped = 0, ratio = 0, approx_kl = 0, ref_kl = 0;
  std::vector<double> dlogp;
};

// The per-token loss under weights w_t (0 = not trained). Same clamps as verl.
inline RefLoss ref_grpo_loss_weighted(const std::vector<double>& logp, const std::vector<float>& old,
                                      const std::vector<float>* ref, const std::vector<float>& adv,
                                      const std::vector<double>& weights, double clip_low, double clip_high,
                                      double kl_coef) {
  RefLoss out;
  out.dlogp.assign(logp.size(), 0.0);
  for (size_t t = 0; t < logp.size(); ++t) {
    const double w = weights[t];
    if (w == 0) continue;
    double lr = logp[t] - old[t];
    double r = std::exp(std::clamp(lr, -20.0, 20.0));
    double rc = std::clamp(r, 1 - clip_low, 1 + clip_high);
    double a = adv[t], pg1 = -a * r, pg2 = -a * rc;
    bool clipped = pg2 > pg1;
    double l = std::max(pg1, pg2), dl = clipped || std::fabs(lr) >= 20 ? 0.0 : -a * r;
    double kl = 0;
    if (kl_coef > 0) {
      double d = (*ref)[t] - logp[t], dc = std::clamp(d, -20.0, 20.0);
      double k = std::exp(dc) - dc - 1;
      kl = std::clamp(k, -10.0, 10.0);
      l += kl_coef * kl;
      if (std::fabs(d) < 20 && std::fabs(k) < 10) dl += kl_coef * (1 - std::exp(d));
    }
    out.loss += w * l;
    out.dlogp[t] = w * dl;
    out.tokens += 1, out.clipped += clipped, out.ratio += r, out.approx_kl += old[t] - logp[t], out.ref_kl += kl;
  }
  return out;
}

// The aggregation weights from their definitions: token_mean w = 1/denominator, else
// 1/(n_s denominator), n_s the masked tokens of t's sequence; 0 where the mask is 0.
inline std::vector<double> ref_loss_weights(const std::vector<uint8_t>& mask, const std::vector<int32_t>& cu,
                                            bool token_mean, double denominator) {
  std::vector<double> w(mask.size(), 0.0);
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    double n = 0;
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t) n += mask[t];
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t)
      if (mask[t]) w[t] = token_mean ? 1.0 / denominator : 1.0 / (n * denominator);
  }
  return w;
}

inline RefLoss ref_grpo_loss(const std::vector<double>& logp, const std::vector<float>& old,
                             const std::vector<float>* ref, const std::vector<float>& adv,
                             const std::vector<uint8_t>& mask, const std::vector<int32_t>& cu, double clip_low,
                             double clip_high, double kl_coef, bool token_mean, double denominator) {
  return ref_grpo_loss_weighted(logp, old, ref, adv, ref_loss_weights(mask, cu, token_mean, denominator), clip_low,
                                clip_high, kl_coef);
}

struct RefAdam {
  std::vector<double> p, m, v;
};

inline void ref_adamw_step(RefAdam& s, const std::vector<float>& g, double scale, double lr, double b1, double b2,
                           double eps, double wd, int64_t step) {
  for (size_t i = 0; i < s.p.size(); ++i) {
    double gi = g[i] * scale;
    s.p[i] *= 1 - lr * wd;
    s.m[i] = b1 * s.m[i] + (1 - b1) * gi;
    s.v[i] = b2 * s.v[i] + (1 - b2) * gi * gi;
    double mh = s.m[i] / (1 - std::pow(b1, step)), vh = s.v[i] / (1 - std::pow(b2, step));
    s.p[i] -= lr * mh / (std::sqrt(vh) + eps);
  }
}

}  // namespace sqlrl::testing
