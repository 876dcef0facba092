// Rotary position embedding, rotate-half convention (Hugging Face Qwen2/Qwen3): for head
// vectors x of size D and i < D/2, with angle = position * theta^(-2i/D),
//   x'[i]       = x[i] cos - x[i + D/2] sin
//   x'[i + D/2] = x[i + D/2] cos + x[i] sin.
// The angle is computed in f32 the way transformers does (inv_freq in f32, position * inv_freq
// in f32), so both agree on the rounding of large positions.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "runtime/stream.h"

namespace sqlrl {

// inv_freq[i] = theta^(-2i/D) in f32, as transformers computes it. Every RoPE path (CPU, CUDA,
// the fused decode prologue) evaluates this one expression on the host, so all rotate by the same
// f32 angles.
inline float rope_inv_freq(float theta, int64_t head_dim, int64_t i) {
  return 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
}

// In place on x [tokens, heads, head_dim]; positions [tokens].
void rope_forward_cpu(float* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, float theta);
// The transpose (inverse) rotation, in place on the gradient dx [tokens, heads, head_dim].
void rope_backward_cpu(float* dx, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim,
                       float theta);

// CUDA (kernels/cuda/rope.cu), in place on bf16 x (uint16_t bits) with f32 math; device
// positions [tokens]. Token t's heads start at x + t * token_stride (token_stride = heads *
// head_dim when contiguous; larger for the q or k part of a fused qkv buffer). head_dim even and
// <= 256. inv_freq is computed on the host with the CPU path's expression and passed by value,
// so both use the same f32 angles; cos/sin are the device's accurate sincosf.
void rope_forward_cuda(uint16_t* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim,
                       int64_t token_stride, float theta, const CudaStream& stream);
void rope_backward_cuda(uint16_t* dx, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim,
                        int64_t token_stride, float theta, const CudaStream& stream);

}  // namespace sqlrl
