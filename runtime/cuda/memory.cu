// Raw CUDA memory: malloc/free, copies between devices, fill, and dtype conversion kernels.
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "runtime/cuda/check.h"
#include "runtime/device_memory.h"

namespace sqlrl {

namespace {
// Switches to a device for the scope of one call and back: callers never see the current
// device change under them.
struct DeviceScope {
  int previous = 0;
  explicit DeviceScope(int index) {
    CUDA_CHECK(cudaGetDevice(&previous));
    if (previous != index) CUDA_CHECK(cudaSetDevice(index));
  }
  ~DeviceScope() { cudaSetDevice(previous); }
};
}  // namespace

void* cuda_malloc_raw(size_t bytes, int device_index) {
  DeviceScope scope(device_index);
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    fail("cudaMalloc of ", bytes, " bytes on cuda:", device_index, " failed: ", cudaGetErrorString(status), " (",
         free_bytes >> 20, " MiB free of ", total_bytes >> 20, " MiB)");
  }
  return ptr;
}

void cuda_free_raw(void* ptr, int device_index) {
  DeviceScope scope(device_index);
  CUDA_CHECK(cudaFree(ptr));
}

void* cuda_host_alloc(size_t bytes) {
  void* ptr = nullptr;
  cudaError_t status = cudaMallocHost(&ptr, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    fail("cudaMallocHost of ", bytes, " bytes failed: ", cudaGetErrorString(status));
  }
  return ptr;
}

void cuda_host_free(void* ptr) {
  if (ptr) CUDA_CHECK(cudaFreeHost(ptr));
}

void cuda_copy_async(void* dst, const void* src, size_t bytes, const CudaStream& stream) {
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream.handle)));
}

void memcpy_between(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  if (dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index) {
    CUDA_CHECK(cudaMemcpyPeer(dst, dst_device.index, src, src_device.index, bytes));
    return;
  }
  DeviceScope scope(dst_device.is_cuda() ? dst_device.index : src_device.index);
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

namespace {

__device__ float load_float(const void* p, DType dtype, size_t i) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::BF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return f16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
}

__device__ void store_float(void* p, DType dtype, size_t i, float v) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(p)[i] = v; break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16_bits(v); break;
    default: static_cast<uint16_t*>(p)[i] = f32_to_f16_bits(v); break;
  }
}

__global__ void fill_kernel(void* data, DType dtype, size_t n, float value) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    store_float(data, dtype, i, value);
}

__global__ void convert_kernel(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    store_float(dst, dst_dtype, i, load_float(src, src_dtype, i));
}

unsigned grid_for(size_t n, unsigned block) {
  size_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(blocks < 65536 ? (blocks == 0 ? 1 : blocks) : 65536);
}

}  // namespace

void cuda_fill(void* data, DType dtype, size_t n, float value, int device_index) {
  DeviceScope scope(device_index);
  if (n == 0) return;
  if (dtype == DType::U8) {  // byte fill (zeros): memset is the fast path
    CUDA_CHECK(cudaMemset(data, static_cast<int>(value), n));
    return;
  }
  check(dtype_is_float(dtype), "cuda_fill: dtype ", dtype_name(dtype), " is not a float type");
  fill_kernel<<<grid_for(n, 256), 256>>>(data, dtype, n, value);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
}

void cuda_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n, int device_index) {
  DeviceScope scope(device_index);
  if (n == 0) return;
  convert_kernel<<<grid_for(n, 256), 256>>>(src, src_dtype, dst, dst_dtype, n);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace sqlrl
