// The fused decode prologue (kernels/decode_qkv.h): one block per token, one warp per head row.
// A lane holds rotation indices i = lane + 32 j of the row (and their partners i + D/2), so the
// RMSNorm's sum of squares is one warp reduction and RoPE needs no exchange. The formulas are
// the unfused kernels' (rmsnorm.cu: IEEE div and sqrt, weight * (x * s), rounded to bf16; rope.cu:
// sincosf of position * inv_freq in f32), so this path and the unfused one store the same values
// up to the order of the sum of squares.
#include <cmath>

#include "kernels/cuda/ops_common.cuh"
#include "kernels/decode_qkv.h"
#include "kernels/rope.h"

namespace sqlrl {
namespace {

constexpr int kWarps = 4, kThreads = kWarps * 32, kMaxHalf = 128, kMaxPerLane = kMaxHalf / 32;

struct InvFreq {
  float v[kMaxHalf];
};

__device__ __forceinline__ float rounded(float x) { return bf16_to_f32(f32_to_bf16(x)); }

__global__ void __launch_bounds__(kThreads) decode_qkv_kernel(uint16_t* q_out, uint16_t* k_cache, uint16_t* v_cache,
                                                              const uint16_t* qkv, const uint16_t* q_norm,
                                                              const uint16_t* k_norm, const int32_t* positions,
                                                              const int32_t* slots, int H, int KVH, int D, float eps,
                                                              InvFreq inv_freq) {
  const int t = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32, half = D / 2;
  const int64_t qd = static_cast<int64_t>(H) * D, kvd = static_cast<int64_t>(KVH) * D;
  const int32_t slot = slots[t];
  const float pos = static_cast<float>(positions[t]);
  const uint16_t* row_base = qkv + t * (qd + 2 * kvd);
  for (int head = warp; head < H + 2 * KVH; head += kWarps) {
    const uint16_t* row = row_base + static_cast<int64_t>(head) * D;
    if (head >= H + KVH) {  // v: copied into the cache as it is
      if (slot < 0) continue;
      uint16_t* dst = v_cache + slot * kvd + static_cast<int64_t>(head - H - KVH) * D;
      for (int i = lane; i < D; i += 32) dst[i] = row[i];
      continue;
    }
    const bool is_q = head < H;
    if (!is_q && slot < 0) continue;
    float lo[kMaxPerLane], hi[kMaxPerLane];
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int i = lane + 32 * j;
      lo[j] = hi[j] = 0.0f;
      if (i < half) {
        lo[j] = bf16_to_f32(row[i]);
        hi[j] = bf16_to_f32(row[i + half]);
        ss += lo[j] * lo[j] + hi[j] * hi[j];
      }
    }
    const uint16_t* norm = is_q ? q_norm : k_norm;
    if (norm) {
      ss = warp_sum(ss);
      const float s = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
#pragma unroll
      for (int j = 0; j < kMaxPerLane; ++j) {
        const int i = lane + 32 * j;
        if (i >= half) continue;
        lo[j] = rounded(bf16_to_f32(norm[i]) * (lo[j] * s));
        hi[j] = rounded(bf16_to_f32(norm[i + half]) * (hi[j] * s));
      }
    }
    uint16_t* dst = is_q ? q_out + t * qd + static_cast<int64_t>(head) * D
                         : k_cache + slot * kvd + static_cast<int64_t>(head - H) * D;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int i = lane + 32 * j;
      if (i >= half) continue;
      float sn, cs;
      sincosf(pos * inv_freq.v[i], &sn, &cs);
      dst[i] = f32_to_bf16(lo[j] * cs - hi[j] * sn);
      dst[i + half] = f32_to_bf16(hi[j] * cs + lo[j] * sn);
    }
  }
}

}  // namespace

void decode_qkv_cuda(uint16_t* q_out, uint16_t* k_cache, uint16_t* v_cache, const uint16_t* qkv,
                     const uint16_t* q_norm, const uint16_t* k_norm, const int32_t* positions, const int32_t* slots,
                     int64_t tokens, const DecodeQkvShape& s, const CudaStream& stream) {
  check(s.head_dim > 0 && s.head_dim % 2 == 0 && s.head_dim / 2 <= kMaxHalf, "decode_qkv_cuda: head_dim ",
        s.head_dim, " must be even and <= ", 2 * kMaxHalf);
  check(s.heads > 0 && s.kv_heads > 0, "decode_qkv_cuda: heads ", s.heads, " and kv_heads ", s.kv_heads,
        " must be positive");
  check(tokens >= 0 && tokens <= INT32_MAX, "decode_qkv_cuda: ", tokens, " tokens");
  if (tokens == 0) return;
  InvFreq inv_freq{};
  for (int64_t i = 0; i < s.head_dim / 2; ++i) inv_freq.v[i] = rope_inv_freq(s.theta, s.head_dim, i);
  decode_qkv_kernel<<<static_cast<unsigned>(tokens), kThreads, 0, cuda_stream_of(stream)>>>(
      q_out, k_cache, v_cache, qkv, q_norm, k_norm, positions, slots, static_cast<int>(s.heads),
      static_cast<int>(s.kv_heads), static_cast<int>(s.head_dim), s.eps, inv_freq);
  CUDA_CHECK_LAUNCH();
}

}  // namespace sqlrl
