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
                            const float* advantages, const float* weights, const float* is_weights,
                            int64_t num_tokens, const GrpoLossConfig& config) {
  check(config.kl_coef <= 0 || ref_logp != nullptr, "grpo_loss: kl_coef ", config.kl_coef, " needs ref_logp");
  check(num_tokens >= 0, "grpo_loss: num_tokens must be >= 0, got ", num_tokens);
  const int64_t tiles = (num_tokens + kTile - 1) / kTile;
  std::vector<GrpoLossStats> partial(static_cast<size_t>(tiles));
  default_thread_pool().parallel_for(static_cast<size_t>(tiles), 1, [&](size_t begin, size_t end) {
    for (size_t tile = begin; tile < end; ++tile) {
      GrpoLossStats st;
      const int64_t t0 = static_cast<int64_t>(tile) * kTile, t1 = std::min<int64_t>(num_tokens, t0 + kTile);
      for (int64_t t = t0; t < t1; ++t) {
        const float w = weights[t];
        if (w == 0.0f) {
          if (dlogp) dlogp[t] = 0.0f;
          continue;
        }
        GrpoToken k = grpo_token(logp[t], old_logp[t], advantages[t], is_weights ? is_weights[t] : 1.0f,
                                 ref_logp ? ref_logp + t : nullptr, config);
        if (dlogp) dlogp[t] = w * k.dloss;
        st.loss += static_cast<double>(w) * k.loss;
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
