// The attention prologue of a decode step, fused into one pass: from the q/k/v projection of T
// tokens, qkv [T, (H + 2 KVH) * D] (q heads, then k heads, then v heads; biases already added by
// the projection), for every token
//   q, k heads: RMSNorm over head_dim with q_norm / k_norm (Qwen3; both null for Qwen2), the
//               result rounded to the storage type as the unfused path stores it, then RoPE at
//               positions[t] (kernels/rope.h's rotate-half convention and angles);
//   q  -> q_out [T, H, D];
//   k, v -> row slots[t] of one layer's paged caches [num_blocks * block_size, KVH, D]
//               (slot < 0: a padding row of a CUDA-graph batch bucket; nothing is written).
// The unfused path runs RMSNorm twice, RoPE twice and a cache write: five launches per layer,
// each re-reading what the last wrote.
#pragma once
#include <cstdint>

#include "runtime/stream.h"

namespace sqlrl {

struct DecodeQkvShape {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  float eps = 1e-6f, theta = 1e6f;
};

// CPU (f32): the unfused kernels in sequence (rmsnorm_forward_cpu, rope_forward_cpu, a copy).
void decode_qkv_cpu(float* q_out, float* k_cache, float* v_cache, const float* qkv, const float* q_norm,
                    const float* k_norm, const int32_t* positions, const int32_t* slots, int64_t tokens,
                    const DecodeQkvShape& shape);
// CUDA (kernels/cuda/decode_qkv.cu): bf16 storage (uint16_t bits), f32 math; device pointers.
// head_dim even and <= 256.
void decode_qkv_cuda(uint16_t* q_out, uint16_t* k_cache, uint16_t* v_cache, const uint16_t* qkv,
                     const uint16_t* q_norm, const uint16_t* k_norm, const int32_t* positions, const int32_t* slots,
                     int64_t tokens, const DecodeQkvShape& shape, const CudaStream& stream);

}  // namespace sqlrl
