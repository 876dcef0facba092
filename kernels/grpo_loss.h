// Per-token GRPO/PPO policy loss over a packed micro-batch, forward and backward in one pass.
//
//   ratio_t = exp(logp_t - old_t)                      (log-ratio clamped to [-20, 20], as verl)
//   pg_t    = max(-A_t ratio_t, -A_t clip(ratio_t, 1 - eps_low, 1 + eps_high))   (clip-higher)
//   kl_t    = k3 = exp(d) - d - 1, d = ref_t - logp_t  (d clamped to [-20, 20], kl to [-10, 10]:
//             verl's "low_var_kl"), only when kl_coef > 0
//   loss    = sum_t w_t (pg_t + kl_coef kl_t),  dlogp_t = d loss / d logp_t
//
// Aggregation sets w_t (mask_t = 0 gives w_t = 0):
//   TokenMean:        w_t = 1 / denominator, denominator = masked tokens of the whole mini-batch
//   SeqMeanTokenMean: w_t = 1 / (n_s * denominator), n_s = masked tokens of t's sequence,
//                     denominator = sequences with n_s > 0 in the whole mini-batch
// The caller passes the mini-batch denominator so that gradient accumulation over micro-batches
// sums to the mini-batch loss. Sequences never straddle micro-batches.
//
// Stats are sums over masked tokens (the caller divides by `tokens` across micro-batches):
// clipped = tokens where the clipped branch is active (verl's pg_clipfrac), approx_kl = old - logp
// (verl's ppo_kl), ratio, ref_kl = k3. Reductions are float64 in a fixed order (fixed tiles, fixed
// trees, no atomics), so results are bitwise repeatable and independent of thread count.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "runtime/hd.h"
#include "runtime/stream.h"

namespace sqlrl {

enum class LossAgg : uint8_t { TokenMean, SeqMeanTokenMean };

struct GrpoLossConfig {
  float clip_low = 0.2f, clip_high = 0.2f;  // ratio clipped to [1 - clip_low, 1 + clip_high]
  float kl_coef = 0.0f;                     // > 0 needs ref_logp
  LossAgg agg = LossAgg::TokenMean;
  double denominator = 0;                   // see above; must be positive
};

struct GrpoLossStats {  // plain doubles: the CUDA path writes this struct's bytes
  double loss = 0;      // sum_t w_t loss_t (this micro-batch's share of the mini-batch loss)
  double tokens = 0, clipped = 0, ratio = 0, approx_kl = 0, ref_kl = 0;
  void add(const GrpoLossStats& o) {
    loss += o.loss, tokens += o.tokens, clipped += o.clipped, ratio += o.ratio, approx_kl += o.approx_kl,
        ref_kl += o.ref_kl;
  }
};

// Token arrays are [T], T = cu_seqlens[num_seqs]; ref_logp may be null when kl_coef == 0;
// dlogp may be null (forward only). Masked-out tokens get dlogp = 0.
GrpoLossStats grpo_loss_cpu(float* dlogp, const float* logp, const float* old_logp, const float* ref_logp,
                            const float* advantages, const uint8_t* mask, const int32_t* cu_seqlens,
                            int64_t num_seqs, const GrpoLossConfig& config);

// Device pointers (cu_seqlens too); num_tokens = cu_seqlens[num_seqs] given by the host; stats is
// one device GrpoLossStats. workspace: grpo_loss_workspace_bytes() device bytes, the caller's.
size_t grpo_loss_workspace_bytes(int64_t num_tokens, int64_t num_seqs);
void grpo_loss_cuda(float* dlogp, GrpoLossStats* stats, const float* logp, const float* old_logp,
                    const float* ref_logp, const float* advantages, const uint8_t* mask, const int32_t* cu_seqlens,
                    int64_t num_seqs, int64_t num_tokens, const GrpoLossConfig& config, void* workspace,
                    const CudaStream& stream);

// One token's loss term (unweighted) and its derivative; shared by both backends.
struct GrpoToken {
  float loss = 0, dloss = 0, ratio = 0, approx_kl = 0, ref_kl = 0;
  bool clipped = false;
};

SQLRL_HD GrpoToken grpo_token(float logp, float old_logp, float adv, const float* ref_logp_t, const GrpoLossConfig& c) {
  GrpoToken out;
  float log_ratio = logp - old_logp;
  bool inside = log_ratio > -20.0f && log_ratio < 20.0f;
  log_ratio = fminf(fmaxf(log_ratio, -20.0f), 20.0f);
  float r = expf(log_ratio);
  float rc = fminf(fmaxf(r, 1.0f - c.clip_low), 1.0f + c.clip_high);
  float pg1 = -adv * r, pg2 = -adv * rc;
  out.clipped = pg2 > pg1;
  out.loss = out.clipped ? pg2 : pg1;
  out.dloss = (out.clipped || !inside) ? 0.0f : -adv * r;
  out.ratio = r;
  out.approx_kl = old_logp - logp;
  if (c.kl_coef > 0.0f) {
    float d = *ref_logp_t - logp;
    bool d_inside = d > -20.0f && d < 20.0f;
    d = fminf(fmaxf(d, -20.0f), 20.0f);
    float e = expf(d), k = e - d - 1.0f;
    bool k_inside = k > -10.0f && k < 10.0f;
    out.ref_kl = fminf(fmaxf(k, -10.0f), 10.0f);
    out.loss += c.kl_coef * out.ref_kl;
    if (d_inside && k_inside) out.dloss += c.kl_coef * (1.0f - e);  // dk/dlogp = -(e^d - 1)
  }
  return out;
}

}  // namespace sqlrl
