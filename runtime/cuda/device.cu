#include "runtime/cuda/check.h"
#include "runtime/device.h"

namespace sqlrl {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw Error(str_cat(call, " failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ") [",
                      relative_source_path(file), ":", line, "]"));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(str_cat(call, " failed: ", cublasGetStatusName(status), " (", cublasGetStatusString(status), ") [",
                      relative_source_path(file), ":", line, "]"));
}

bool cuda_compiled() { return true; }

namespace {
struct Probe {
  int count = 0;
  std::string reason;
};
const Probe& probe() {
  // Asked once: cudaGetDeviceCount fails cleanly (no exception, no abort) without a driver.
  static const Probe result = [] {
    Probe p;
    cudaError_t status = cudaGetDeviceCount(&p.count);
    if (status != cudaSuccess) {
      p.count = 0;
      p.reason = str_cat("no CUDA device: ", cudaGetErrorString(status));
      cudaGetLastError();  // clear the sticky-free error so later calls start clean
    } else if (p.count == 0) {
      p.reason = "no CUDA device: the driver reports none";
    }
    return p;
  }();
  return result;
}
}  // namespace

int cuda_device_count() { return probe().count; }
std::string cuda_unavailable_reason() { return probe().reason; }

CudaDeviceInfo cuda_device_info(int index) {
  check(index >= 0 && index < cuda_device_count(), "cuda:", index, " does not exist (",
        cuda_device_count(), " CUDA devices; ", cuda_unavailable_reason(), ")");
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  CudaDeviceInfo info;
  info.index = index;
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  CUDA_CHECK(cudaDriverGetVersion(&info.driver_version));
  CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
  return info;
}

void cuda_set_device(int index) {
  check(index >= 0 && index < cuda_device_count(), "cuda:", index, " does not exist (",
        cuda_device_count(), " CUDA devices; ", cuda_unavailable_reason(), ")");
  CUDA_CHECK(cudaSetDevice(index));
}

void cuda_synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace sqlrl
