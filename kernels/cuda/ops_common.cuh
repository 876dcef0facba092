// Small device helpers shared by the normalisation, element-wise, sampling and log-prob kernels:
// bf16 <-> f32 in vectors of 8 (one 16-byte access), warp reductions, the stream handle.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/check.h"
#include "runtime/stream.h"

namespace sqlrl {

inline cudaStream_t cuda_stream_of(const CudaStream& stream) { return static_cast<cudaStream_t>(stream.handle); }

// Blocks for a grid-stride loop over n items (at least 1, at most `cap`).
inline unsigned grid_for(int64_t n, int threads, int64_t cap = 65535) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }
__device__ __forceinline__ uint16_t f32_to_bf16(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }

// 8 bf16 values, one 16-byte load or store.
__device__ __forceinline__ void load_bf16x8(const uint16_t* p, float (&v)[8]) {
  uint4 raw = *reinterpret_cast<const uint4*>(p);
  uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void store_bf16x8(uint16_t* p, const float (&v)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = static_cast<uint32_t>(f32_to_bf16(v[2 * i])) | (static_cast<uint32_t>(f32_to_bf16(v[2 * i + 1])) << 16);
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

// kVec consecutive bf16 values: one 16-byte access when kVec == 8, scalar when kVec == 1.
template <int kVec>
__device__ __forceinline__ void load_bf16v(const uint16_t* p, float (&v)[kVec]) {
  if constexpr (kVec == 8) {
    load_bf16x8(p, v);
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = bf16_to_f32(p[i]);
  }
}
template <int kVec>
__device__ __forceinline__ void store_bf16v(uint16_t* p, const float (&v)[kVec]) {
  if constexpr (kVec == 8) {
    store_bf16x8(p, v);
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) p[i] = f32_to_bf16(v[i]);
  }
}

template <typename T>
__device__ __forceinline__ T warp_sum(T x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

}  // namespace sqlrl
