// Per-token GRPO/PPO policy loss over a packed micro-batch, forward and backward in one pass.
//
//   ratio_t = exp(logp_t - old_t)                      (log-ratio clamped to [-20, 20], as verl)
//   pg_t    = max(-A_t ratio_t, -A_t clip(ratio_t, 1 - eps_low, 1 + eps_high))   (clip-higher)
//             dual-clip c > 1 (Ye et al. 2020, arXiv 1912.09729; verl's clip_ratio_c): where
//             A_t < 0, pg_t = min(pg_t, -A_t c): a token far above the old policy with a negative
//             advantage stops pushing (no gradient once capped)
//   kl_t    = one estimator of KL(pi || ref), d = ref_t - logp_t, only when kl_coef > 0 (Schulman,
//             "Approximating KL divergence", 2020; verl's kl_penalty):
//             k1 = -d ("kl"), k2 = d^2 / 2 ("mse"), k3 = exp(d) - d - 1 (d clamped to [-20, 20],
//             kl to [-10, 10]: verl's "low_var_kl", the default)
//   loss    = sum_t w_t (v_t pg_t + kl_coef kl_t),  dlogp_t = d loss / d logp_t
//
// v_t is the rollout importance weight (rl/grpo/rollout_is.h: pi_trainer / pi_sampler, truncated
// or masked; a constant, not differentiated), on the policy term only as verl applies it; null
// is_weights means v_t = 1.
//
// The weights w_t carry the aggregation (token-mean, sequence mean, ...) and the mask: w_t = 0
// means t is not trained (dlogp_t = 0, not counted in the stats). The trainer computes them for a
// whole mini-batch (rl/grpo/loss_agg.h), so that gradient accumulation over micro-batches sums to
// the mini-batch loss and a new aggregation mode never touches this kernel.
//
// Stats are sums over masked tokens (the caller divides by `tokens` across micro-batches):
// clipped = tokens where the clipped branch is active (verl's pg_clipfrac), approx_kl = old - logp
// (verl's ppo_kl), ratio, ref_kl = k3. Reductions are float64 in a fixed order (fixed tiles), so
// results are bitwise repeatable and independent of thread count.
//
// CPU only: the trainer's log-probs reach the host anyway (the step's statistics and the next
// epoch's old log-probs), and this pass is O(tokens) beside a forward of O(tokens * params).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>


namespace sqlrl {

enum class KlEstimator : uint8_t { K1, K2, K3 };

struct GrpoLossConfig {
  float clip_low = 0.2f, clip_high = 0.2f;  // ratio clipped to [1 - clip_low, 1 + clip_high]
  float kl_coef = 0.0f;                     // > 0 needs ref_logp
  float dual_clip = 0.0f;                   // c > 1: dual-clip for negative advantages; 0: off
  KlEstimator kl_estimator = KlEstimator::K3;
};

struct GrpoLossStats {
  double loss = 0;      // sum_t w_t loss_t (this micro-batch's share of the mini-batch loss)
  double tokens = 0, clipped = 0, ratio = 0, approx_kl = 0, ref_kl = 0;
  void add(const GrpoLossStats& o) {
    loss += o.loss, tokens += o.tokens, clipped += o.clipped, ratio += o.ratio, approx_kl += o.approx_kl,
        ref_kl += o.ref_kl;
  }
};

// Token arrays are [num_tokens]; ref_logp may be null when kl_coef == 0; dlogp may be null
// (forward only).
GrpoLossStats grpo_loss_cpu(float* dlogp, const float* logp, const float* old_logp, const float* ref_logp,
                            const float* advantages, const float* weights, const float* is_weights,
                            int64_t num_tokens, const GrpoLossConfig& config);

// kl_t of one token by `estimator` (d = ref - logp, with verl's clamps for k3), as above: the
// loss's KL term and the KL-in-reward penalty (rl/grpo/grpo.h kl_reward_coef) share it.
inline float kl_estimate(float logp, float ref, KlEstimator estimator) {
  float d = ref - logp;
  if (estimator == KlEstimator::K1) return -d;
  if (estimator == KlEstimator::K2) return 0.5f * d * d;
  d = fminf(fmaxf(d, -20.0f), 20.0f);
  return fminf(fmaxf(expf(d) - d - 1.0f, -10.0f), 10.0f);
}

// One token's loss term (unweighted) and its derivative.
struct GrpoToken {
  float loss = 0, dloss = 0, ratio = 0, approx_kl = 0, ref_kl = 0;
  bool clipped = false;
};

inline GrpoToken grpo_token(float logp, float old_logp, float adv, float is_weight, const float* ref_logp_t,
                            const GrpoLossConfig& c) {
  GrpoToken out;
  float log_ratio = logp - old_logp;
  bool inside = log_ratio > -20.0f && log_ratio < 20.0f;
  log_ratio = fminf(fmaxf(log_ratio, -20.0f), 20.0f);
  float r = expf(log_ratio);
  float rc = fminf(fmaxf(r, 1.0f - c.clip_low), 1.0f + c.clip_high);
  float pg1 = -adv * r, pg2 = -adv * rc;
  out.clipped = pg2 > pg1;
  float pg = out.clipped ? pg2 : pg1;
  if (c.dual_clip > 0.0f && adv < 0.0f && pg > -adv * c.dual_clip) pg = -adv * c.dual_clip, out.clipped = true;
  out.loss = is_weight * pg;
  out.dloss = (out.clipped || !inside) ? 0.0f : is_weight * -adv * r;
  out.ratio = r;
  out.approx_kl = old_logp - logp;
  if (c.kl_coef > 0.0f && c.kl_estimator != KlEstimator::K3) {
    const float d = *ref_logp_t - logp;
    out.ref_kl = kl_estimate(logp, *ref_logp_t, c.kl_estimator);
    out.loss += c.kl_coef * out.ref_kl;
    out.dloss += c.kl_coef * (c.kl_estimator == KlEstimator::K1 ? 1.0f : -d);
  } else if (c.kl_coef > 0.0f) {
    float d = *ref_logp_t - logp;
    bool d_inside = d > -20.0f && d < 20.0f;
    d = fminf(fmaxf(d, -20.0f), 20.0f);
    float e = expf(d), k = e - d - 1.0f;
    bool k_inside = k > -10.0f && k < 10.0f;
    out.ref_kl = kl_estimate(logp, *ref_logp_t, KlEstimator::K3);
    out.loss += c.kl_coef * out.ref_kl;
    if (d_inside && k_inside) out.dloss += c.kl_coef * (1.0f - e);  // dk/dlogp = -(e^d - 1)
  }
  return out;
}

}  // namespace sqlrl
