// SwiGLU forward/backward on bf16, f32 math: grid-stride over 8-value vectors (16-byte accesses)
// when every pointer is aligned, else over single values. Same formulas as kernels/cpu/swiglu.cpp.
#include "kernels/cuda/ops_common.cuh"
#include "kernels/swiglu.h"

namespace sqlrl {
namespace {

constexpr int kThreads = 256;

template <int kV>
__global__ void swiglu_forward_kernel(uint16_t* out, const uint16_t* gate, const uint16_t* up, int64_t n) {
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * kV; i < n;
       i += int64_t{gridDim.x} * blockDim.x * kV) {
    float g[kV], u[kV], y[kV];
    if (i + kV <= n) {
      load_bf16v<kV>(gate + i, g);
      load_bf16v<kV>(up + i, u);
#pragma unroll
      for (int e = 0; e < kV; ++e) y[e] = g[e] / (1.0f + expf(-g[e])) * u[e];
      store_bf16v<kV>(out + i, y);
    } else {  // the tail of a vectorised pass
      for (int64_t j = i; j < n; ++j) {
        float gj = bf16_to_f32(gate[j]);
        out[j] = f32_to_bf16(gj / (1.0f + expf(-gj)) * bf16_to_f32(up[j]));
      }
    }
  }
}

// silu'(g) = s (1 + g (1 - s)), s = sigmoid(g).
__device__ __forceinline__ void swiglu_grad(float dy, float g, float u, float& dg, float& du) {
  float s = 1.0f / (1.0f + expf(-g));
  du = dy * g * s;
  dg = dy * u * s * (1.0f + g * (1.0f - s));
}

template <int kV>
__global__ void swiglu_backward_kernel(uint16_t* dgate, uint16_t* dup, const uint16_t* dout, const uint16_t* gate,
                                       const uint16_t* up, int64_t n) {
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * kV; i < n;
       i += int64_t{gridDim.x} * blockDim.x * kV) {
    if (i + kV <= n) {
      float dy[kV], g[kV], u[kV], dg[kV], du[kV];
      load_bf16v<kV>(dout + i, dy);
      load_bf16v<kV>(gate + i, g);
      load_bf16v<kV>(up + i, u);
#pragma unroll
      for (int e = 0; e < kV; ++e) swiglu_grad(dy[e], g[e], u[e], dg[e], du[e]);
      store_bf16v<kV>(dgate + i, dg);
      store_bf16v<kV>(dup + i, du);
    } else {
      for (int64_t j = i; j < n; ++j) {
        float dg, du;
        swiglu_grad(bf16_to_f32(dout[j]), bf16_to_f32(gate[j]), bf16_to_f32(up[j]), dg, du);
        dgate[j] = f32_to_bf16(dg);
        dup[j] = f32_to_bf16(du);
      }
    }
  }
}

unsigned blocks_for(int64_t n, int v) { return grid_for((n + v - 1) / v, kThreads, 1 << 20); }

}  // namespace

void swiglu_forward_cuda(uint16_t* out, const uint16_t* gate, const uint16_t* up, int64_t n, const CudaStream& stream) {
  if (n == 0) return;
  if (aligned16(out) && aligned16(gate) && aligned16(up))
    swiglu_forward_kernel<8><<<blocks_for(n, 8), kThreads, 0, cuda_stream_of(stream)>>>(out, gate, up, n);
  else
    swiglu_forward_kernel<1><<<blocks_for(n, 1), kThreads, 0, cuda_stream_of(stream)>>>(out, gate, up, n);
  CUDA_CHECK_LAUNCH();
}

void swiglu_backward_cuda(uint16_t* dgate, uint16_t* dup, const uint16_t* dout, const uint16_t* gate, const uint16_t* up,
                          int64_t n, const CudaStream& stream) {
  if (n == 0) return;
  if (aligned16(dgate) && aligned16(dup) && aligned16(dout) && aligned16(gate) && aligned16(up))
    swiglu_backward_kernel<8><<<blocks_for(n, 8), kThreads, 0, cuda_stream_of(stream)>>>(dgate, dup, dout, gate, up, n);
  else
    swiglu_backward_kernel<1><<<blocks_for(n, 1), kThreads, 0, cuda_stream_of(stream)>>>(dgate, dup, dout, gate, up, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace sqlrl
