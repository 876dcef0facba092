// CUDA Philox fills: one thread per element, the same formulas as the CPU path (random_math.h).
#include "runtime/cuda/check.h"
#include "runtime/random.h"
#include "runtime/random_math.h"

namespace sqlrl {
namespace {

__global__ void uniform_kernel(float* out, size_t n, uint64_t seed, uint64_t stream, float low, float high) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    out[i] = uniform_element(seed, stream, i, low, high);
}

__global__ void normal_kernel(float* out, size_t n, uint64_t seed, uint64_t stream, float mean, float stddev) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    out[i] = normal_element(seed, stream, i, mean, stddev);
}

__global__ void bits_kernel(uint32_t* out, size_t n, uint64_t seed, uint64_t stream) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    out[i] = philox_draw(seed, stream, i / 4).v[i % 4];
}

unsigned blocks_for(size_t n) {
  size_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks == 0 ? 1 : (blocks > 65535 ? 65535 : blocks));
}

}  // namespace

void fill_uniform_cuda(float* out, size_t n, uint64_t seed, uint64_t stream, float low, float high, int device) {
  if (n == 0) return;
  CUDA_CHECK(cudaSetDevice(device));
  uniform_kernel<<<blocks_for(n), 256>>>(out, n, seed, stream, low, high);
  CUDA_CHECK_LAUNCH();
}

void fill_normal_cuda(float* out, size_t n, uint64_t seed, uint64_t stream, float mean, float stddev, int device) {
  if (n == 0) return;
  CUDA_CHECK(cudaSetDevice(device));
  normal_kernel<<<blocks_for(n), 256>>>(out, n, seed, stream, mean, stddev);
  CUDA_CHECK_LAUNCH();
}

void fill_random_bits_cuda(uint32_t* out, size_t n, uint64_t seed, uint64_t stream, int device) {
  if (n == 0) return;
  CUDA_CHECK(cudaSetDevice(device));
  bits_kernel<<<blocks_for(n), 256>>>(out, n, seed, stream);
  CUDA_CHECK_LAUNCH();
}

}  // namespace sqlrl
