#include "kernels/grpo_loss.h"

#include <algorithm>
#include <vector>

#include "runtime/error.h"
#include "runtime/thread_pool.h"

namespace sqlrl {

namespace {
constexpr int64_t kTile = 4096;  // fixed tiles: the stats' summation order ignores thread count
}

GrpoLossStats grpo_loss_cpu(float* dlogp, const float* logp, const float* old_logp, const float* ref_logp,
                            const float* advantages, const uint8_t* mask, const int32_t* cu_seqlens,
                            int64_t num_seqs, const GrpoLossConfig& config) {
  check(config.denominator > 0, "grpo_loss: denominator must be positive (masked tokens or sequences of the "
        "mini-batch), got ", config.denominator);
  check(config.kl_coef <= 0 || ref_logp != nullptr, "grpo_loss: kl_coef ", config.kl_coef, " needs ref_logp");
  check(num_seqs >= 0 && (num_seqs == 0 || cu_seqlens[0] == 0), "grpo_loss: cu_seqlens must start at 0");
  const int64_t T = num_seqs > 0 ? cu_seqlens[num_seqs] : 0;
  // Per-sequence weights: 1/denominator, or 1/(n_s * denominator) for the sequence mean.
  std::vector<float> weight(static_cast<size_t>(num_seqs));
  for (int64_t s = 0; s < num_seqs; ++s) {
    check(cu_seqlens[s + 1] >= cu_seqlens[s], "grpo_loss: cu_seqlens decrease at sequence ", s);
    double w = 1.0 / config.denominator;
    if (config.agg == LossAgg::SeqMeanTokenMean) {
      int64_t n = 0;
      for (int32_t t = cu_seqlens[s]; t < cu_seqlens[s + 1]; ++t) n += mask[t] != 0;
      w = n > 0 ? 1.0 / (static_cast<double>(n) * config.denominator) : 0.0;
    }
    weight[s] = static_cast<float>(w);
  }
  int64_t tiles = (T + kTile - 1) / kTile;
  std::vector<GrpoLossStats> partial(static_cast<size_t>(tiles));
  default_thread_pool().parallel_for(static_cast<size_t>(tiles), 1, [&](size_t begin, size_t end) {
    for (size_t tile = begin; tile < end; ++tile) {
      GrpoLossStats st;
      int64_t t0 = static_cast<int64_t>(tile) * kTile, t1 = std::min<int64_t>(T, t0 + kTile);
      // The sequence holding t0: the last one starting at or before it.
      int64_t s = std::upper_bound(cu_seqlens, cu_seqlens + num_seqs + 1, t0) - cu_seqlens - 1;
      for (int64_t t = t0; t < t1; ++t) {
        while (cu_seqlens[s + 1] <= t) ++s;
        if (!mask[t]) {
          if (dlogp) dlogp[t] = 0.0f;
          continue;
        }
        GrpoToken k = grpo_token(logp[t], old_logp[t], advantages[t], ref_logp ? ref_logp + t : nullptr, config);
        if (dlogp) dlogp[t] = weight[s] * k.dloss;
        st.loss += static_cast<double>(weight[s]) * k.loss;
        st.tokens += 1, st.clipped += k.clipped, st.ratio += k.ratio, st.approx_kl += k.approx_kl,
            st.ref_kl += k.ref_kl;
      }
      partial[tile] = st;
    }
  });
  GrpoLossStats total;
  for (const GrpoLossStats& p : partial) total.add(p);
  return total;
}

}  // namespace sqlrl
