// AdamW: one thread per element, grid-stride, the clip coefficient read from device memory; the
// bf16-moment variant runs the same element function as its CPU loop, Philox bits included.
// Grad norm: kBlocks fixed blocks grid-stride in float64 and reduce by a fixed tree into
// partials; one block then sums the partials in a fixed order. No atomics: repeatable bits.
#include "kernels/adamw.h"
#include "kernels/cuda/ops_common.cuh"
#include "runtime/cuda/check.h"
#include "runtime/dtype.h"

namespace sqlrl {

namespace {

constexpr int kThreads = 256;
constexpr int kBlocks = 1024;

__global__ void adamw_kernel(float* params, float* m, float* v, const float* grads, uint16_t* bf16_out, int64_t n,
                             AdamWConfig c, float lr, float bc1, float bc2_sqrt, const double* grad_sq_sum,
                             float max_norm) {
  float scale = grad_sq_sum ? clip_coefficient(*grad_sq_sum, max_norm) : 1.0f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float p = params[i], mi = m[i], vi = v[i];
    adamw_element(p, mi, vi, grads[i], lr, scale, bc1, bc2_sqrt, c);
    params[i] = p, m[i] = mi, v[i] = vi;
    if (bf16_out) bf16_out[i] = f32_to_bf16_bits(p);
  }
}

// The same element function as the CPU loop (kernels/adamw.h): same Philox bits per (step, i).
__global__ void adamw_bf16_moments_kernel(float* params, uint16_t* m, uint16_t* v, const float* grads,
                                          uint16_t* bf16_out, int64_t n, AdamWConfig c, float lr, float bc1,
                                          float bc2_sqrt, int64_t step, const double* grad_sq_sum, float max_norm,
                                          int64_t first_index) {
  float scale = grad_sq_sum ? clip_coefficient(*grad_sq_sum, max_norm) : 1.0f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float p = params[i];
    uint16_t mi = m[i], vi = v[i];
    adamw_bf16_moments_element(p, mi, vi, grads[i], lr, scale, bc1, bc2_sqrt, c, step, first_index + i);
    params[i] = p, m[i] = mi, v[i] = vi;
    if (bf16_out) bf16_out[i] = f32_to_bf16_bits(p);
  }
}

__device__ void block_sum(double x, double* out) {
  __shared__ double sh[kThreads];
  sh[threadIdx.x] = x;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

__global__ void sq_sum_partial_kernel(double* partials, const float* g, int64_t n) {
  double s = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(kBlocks) * kThreads)
    s += static_cast<double>(g[i]) * g[i];
  block_sum(s, partials + blockIdx.x);
}

__global__ void sq_sum_finish_kernel(double* out, const double* partials) {
  double s = 0;
  for (int i = threadIdx.x; i < kBlocks; i += kThreads) s += partials[i];
  block_sum(s, out);
}

}  // namespace

void adamw_cuda(float* params, float* m, float* v, const float* grads, uint16_t* bf16_out, int64_t n,
                const AdamWConfig& config, int64_t step, float lr, const double* grad_sq_sum, float max_norm,
                const CudaStream& stream) {
  check(step >= 1, "adamw: step counts from 1, got ", step);
  if (n == 0) return;
  // Bias corrections on the host with the same float pow as the CPU path.
  float bc1 = 1.0f - std::pow(config.beta1, static_cast<float>(step));
  float bc2_sqrt = std::sqrt(1.0f - std::pow(config.beta2, static_cast<float>(step)));
  int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
  adamw_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, cuda_stream_of(stream)>>>(params, m, v, grads, bf16_out, n, config, lr,
                                                                       bc1, bc2_sqrt, grad_sq_sum, max_norm);
  CUDA_CHECK_LAUNCH();
}

void adamw_bf16_moments_cuda(float* params, uint16_t* m, uint16_t* v, const float* grads, uint16_t* bf16_out,
                             int64_t n, const AdamWConfig& config, int64_t step, float lr, const double* grad_sq_sum,
                             float max_norm, const CudaStream& stream, int64_t first_index) {
  check(step >= 1, "adamw: step counts from 1, got ", step);
  if (n == 0) return;
  float bc1 = 1.0f - std::pow(config.beta1, static_cast<float>(step));
  float bc2_sqrt = std::sqrt(1.0f - std::pow(config.beta2, static_cast<float>(step)));
  int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
  adamw_bf16_moments_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, cuda_stream_of(stream)>>>(
      params, m, v, grads, bf16_out, n, config, lr, bc1, bc2_sqrt, step, grad_sq_sum, max_norm, first_index);
  CUDA_CHECK_LAUNCH();
}

size_t grad_sq_sum_workspace_bytes() { return kBlocks * sizeof(double); }

void grad_sq_sum_cuda(double* out, const float* grads, int64_t n, void* workspace, const CudaStream& stream) {
  double* partials = static_cast<double*>(workspace);
  sq_sum_partial_kernel<<<kBlocks, kThreads, 0, cuda_stream_of(stream)>>>(partials, grads, n);
  CUDA_CHECK_LAUNCH();
  sq_sum_finish_kernel<<<1, kThreads, 0, cuda_stream_of(stream)>>>(out, partials);
  CUDA_CHECK_LAUNCH();
}

}  // namespace sqlrl
