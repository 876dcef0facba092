#include "kernels/decode_qkv.h"

#include <algorithm>
#include <vector>

#include "kernels/rmsnorm.h"
#include "kernels/rope.h"

namespace sqlrl {

void decode_qkv_cpu(float* q_out, float* k_cache, float* v_cache, const float* qkv, const float* q_norm,
                    const float* k_norm, const int32_t* positions, const int32_t* slots, int64_t tokens,
                    const DecodeQkvShape& s) {
  const int64_t D = s.head_dim, qd = s.heads * D, kvd = s.kv_heads * D, width = qd + 2 * kvd;
  std::vector<float> q(static_cast<size_t>(tokens * qd)), k(static_cast<size_t>(tokens * kvd));
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy_n(qkv + t * width, qd, q.data() + t * qd);
    std::copy_n(qkv + t * width + qd, kvd, k.data() + t * kvd);
  }
  if (q_norm) rmsnorm_forward_cpu(q.data(), nullptr, q.data(), q_norm, tokens * s.heads, D, s.eps);
  if (k_norm) rmsnorm_forward_cpu(k.data(), nullptr, k.data(), k_norm, tokens * s.kv_heads, D, s.eps);
  rope_forward_cpu(q.data(), positions, tokens, s.heads, D, s.theta);
  rope_forward_cpu(k.data(), positions, tokens, s.kv_heads, D, s.theta);
  std::copy(q.begin(), q.end(), q_out);
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    std::copy_n(k.data() + t * kvd, kvd, k_cache + static_cast<int64_t>(slots[t]) * kvd);
    std::copy_n(qkv + t * width + qd + kvd, kvd, v_cache + static_cast<int64_t>(slots[t]) * kvd);
  }
}

}  // namespace sqlrl
