// Small element-wise kernels of the CUDA model (model/cuda_ops.h). None of them is on a hot path
// that deserves tuning: each moves a few bytes per token next to the GEMMs and attention.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "model/cuda_ops.h"
#include "runtime/cuda/check.h"

namespace sqlrl {
namespace {

cudaStream_t raw(const CudaStream& s) { return static_cast<cudaStream_t>(s.handle); }

unsigned blocks_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

__device__ float bf16_value(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }
__device__ uint16_t to_bf16(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }

__global__ void round_to_bfloat_kernel(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = to_bf16(src[i]);
}

__global__ void broadcast_rows_kernel(uint16_t* out, const uint16_t* row, int64_t rows, int64_t cols, bool add) {
  int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = add ? to_bf16(bf16_value(out[i]) + bf16_value(row[i % cols])) : row[i % cols];
}

__global__ void column_sum_add_kernel(float* dsum, const uint16_t* x, int64_t rows, int64_t cols) {
  int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int64_t r = 0; r < rows; ++r) s += bf16_value(x[r * cols + c]);
  dsum[c] += s;
}

// One block per token; threads stride over the row (K then V).
__global__ void kv_write_kernel(uint16_t* k_cache, uint16_t* v_cache, const uint16_t* k, const uint16_t* v,
                                const int32_t* slots, int64_t width) {
  int64_t t = blockIdx.x;
  int64_t slot = slots[t];
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    k_cache[slot * width + i] = k[t * width + i];
    v_cache[slot * width + i] = v[t * width + i];
  }
}

__global__ void gather_rows_kernel(uint16_t* out, const uint16_t* in, const int32_t* rows, int64_t cols) {
  int64_t r = blockIdx.x;
  const uint16_t* src = in + static_cast<int64_t>(rows[r]) * cols;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) out[r * cols + i] = src[i];
}

}  // namespace

void model_copy(void* dst, const void* src, size_t bytes, CopyKind kind, const CudaStream& stream) {
  if (bytes == 0) return;
  cudaMemcpyKind k = kind == CopyKind::HostToDevice   ? cudaMemcpyHostToDevice
                     : kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost
                                                      : cudaMemcpyDeviceToDevice;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, raw(stream)));
  // Pageable host memory: the caller may reuse or read its buffer as soon as we return.
  if (kind != CopyKind::DeviceToDevice) CUDA_CHECK(cudaStreamSynchronize(raw(stream)));
}

void model_zero(void* dst, size_t bytes, const CudaStream& stream) {
  if (bytes) CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, raw(stream)));
}

void f32_to_bf16_cuda(uint16_t* dst, const float* src, int64_t n, const CudaStream& stream) {
  if (n <= 0) return;
  round_to_bfloat_kernel<<<blocks_for(n, 256), 256, 0, raw(stream)>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}

void broadcast_rows_cuda(uint16_t* out, const uint16_t* row, int64_t rows, int64_t cols, bool add,
                         const CudaStream& stream) {
  if (rows * cols <= 0) return;
  broadcast_rows_kernel<<<blocks_for(rows * cols, 256), 256, 0, raw(stream)>>>(out, row, rows, cols, add);
  CUDA_CHECK_LAUNCH();
}

void column_sum_add_cuda(float* dsum, const uint16_t* x, int64_t rows, int64_t cols, const CudaStream& stream) {
  if (cols <= 0) return;
  column_sum_add_kernel<<<static_cast<unsigned>((cols + 127) / 128), 128, 0, raw(stream)>>>(dsum, x, rows, cols);
  CUDA_CHECK_LAUNCH();
}

void kv_write_cuda(uint16_t* k_cache, uint16_t* v_cache, const uint16_t* k, const uint16_t* v, const int32_t* slots,
                   int64_t tokens, int64_t width, const CudaStream& stream) {
  if (tokens <= 0) return;
  check(tokens <= INT32_MAX, "kv_write_cuda: ", tokens, " tokens in one call");
  kv_write_kernel<<<static_cast<unsigned>(tokens), 128, 0, raw(stream)>>>(k_cache, v_cache, k, v, slots, width);
  CUDA_CHECK_LAUNCH();
}

void gather_rows_cuda(uint16_t* out, const uint16_t* in, const int32_t* rows, int64_t num_rows, int64_t cols,
                      const CudaStream& stream) {
  if (num_rows <= 0) return;
  check(num_rows <= INT32_MAX, "gather_rows_cuda: ", num_rows, " rows in one call");
  gather_rows_kernel<<<static_cast<unsigned>(num_rows), 256, 0, raw(stream)>>>(out, in, rows, cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace sqlrl
