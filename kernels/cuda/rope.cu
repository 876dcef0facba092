// RoPE in place on bf16: one thread per (token, pair of rotation indices), looping over the
// token's heads, so each sincosf serves every head. The angle is position * inv_freq[i] in f32
// with inv_freq computed on the host by the CPU path's own expression (passed by value in the
// kernel's parameters), so CPU and GPU rotate by the same f32 angle.
#include <cmath>

#include "kernels/cuda/ops_common.cuh"
#include "kernels/rope.h"

namespace sqlrl {
namespace {

constexpr int kMaxHalf = 128;  // head_dim <= 256

struct InvFreq {
  float v[kMaxHalf];
};

// kP rotation indices per thread: 2 (4-byte bf16 pairs) when half is even, else 1.
template <int kP>
__global__ void rope_kernel(uint16_t* x, const int32_t* positions, int64_t tokens, int heads, int head_dim,
                            int64_t token_stride, InvFreq inv_freq, float sign) {
  const int half = head_dim / 2, per_token = half / kP;
  const int64_t total = tokens * per_token;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = idx / per_token;
    const int i = static_cast<int>(idx % per_token) * kP;
    const float pos = static_cast<float>(positions[t]);
    float c[kP], s[kP];
#pragma unroll
    for (int p = 0; p < kP; ++p) {
      sincosf(pos * inv_freq.v[i + p], &s[p], &c[p]);
      s[p] *= sign;
    }
    uint16_t* row = x + t * token_stride + i;
#pragma unroll 4
    for (int h = 0; h < heads; ++h) {
      uint16_t* lo = row + static_cast<int64_t>(h) * head_dim;
      uint16_t* hi = lo + half;
      if constexpr (kP == 2) {
        uint32_t a2 = *reinterpret_cast<const uint32_t*>(lo), b2 = *reinterpret_cast<const uint32_t*>(hi);
        float a[2] = {__uint_as_float(a2 << 16), __uint_as_float(a2 & 0xffff0000u)};
        float b[2] = {__uint_as_float(b2 << 16), __uint_as_float(b2 & 0xffff0000u)};
        uint32_t lo_out = 0, hi_out = 0;
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          lo_out |= static_cast<uint32_t>(f32_to_bf16(a[p] * c[p] - b[p] * s[p])) << (16 * p);
          hi_out |= static_cast<uint32_t>(f32_to_bf16(b[p] * c[p] + a[p] * s[p])) << (16 * p);
        }
        *reinterpret_cast<uint32_t*>(lo) = lo_out;
        *reinterpret_cast<uint32_t*>(hi) = hi_out;
      } else {
        float a = bf16_to_f32(*lo), b = bf16_to_f32(*hi);
        *lo = f32_to_bf16(a * c[0] - b * s[0]);
        *hi = f32_to_bf16(b * c[0] + a * s[0]);
      }
    }
  }
}

void rope_cuda(uint16_t* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim,
               int64_t token_stride, float theta, float sign, const CudaStream& stream) {
  check(head_dim > 0 && head_dim % 2 == 0 && head_dim / 2 <= kMaxHalf, "rope: head_dim must be even and <= ",
        2 * kMaxHalf, ", got ", head_dim);
  check(heads > 0 && token_stride >= heads * head_dim, "rope: token_stride ", token_stride, " < heads ", heads,
        " x head_dim ", head_dim);
  if (tokens == 0) return;
  const int64_t half = head_dim / 2;
  InvFreq inv_freq{};
  for (int64_t i = 0; i < half; ++i) inv_freq.v[i] = rope_inv_freq(theta, head_dim, i);
  const bool pairs = half % 2 == 0 && token_stride % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 4 == 0;
  constexpr int kThreads = 256;
  if (pairs) {
    rope_kernel<2><<<grid_for(tokens * (half / 2), kThreads), kThreads, 0, cuda_stream_of(stream)>>>(
        x, positions, tokens, static_cast<int>(heads), static_cast<int>(head_dim), token_stride, inv_freq, sign);
  } else {
    rope_kernel<1><<<grid_for(tokens * half, kThreads), kThreads, 0, cuda_stream_of(stream)>>>(
        x, positions, tokens, static_cast<int>(heads), static_cast<int>(head_dim), token_stride, inv_freq, sign);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_forward_cuda(uint16_t* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim,
                       int64_t token_stride, float theta, const CudaStream& stream) {
  rope_cuda(x, positions, tokens, heads, head_dim, token_stride, theta, 1.0f, stream);
}

void rope_backward_cuda(uint16_t* dx, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim,
                        int64_t token_stride, float theta, const CudaStream& stream) {
  rope_cuda(dx, positions, tokens, heads, head_dim, token_stride, theta, -1.0f, stream);
}

}  // namespace sqlrl
