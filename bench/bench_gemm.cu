// CUDA GEMM TFLOP/s (bf16 in, fp32 accumulate) of runtime/gemm (cuBLASLt with our plan cache)
// beside plain cublasGemmEx on the same buffers in the same run, and as a share of the device's
// published dense bf16 peak where the device is known.
#include <cublas_v2.h>

#include <cstdio>
#include <cstring>

#include "bench/cuda_bench.h"
#include "runtime/cuda/check.h"
#include "runtime/gemm.h"
#include "runtime/random.h"

using namespace sqlrl;

// Published dense bf16 tensor-core peaks (TFLOP/s), by device name fragment.
static double spec_peak_tflops(const std::string& name) {
  if (name.find("H200") != std::string::npos) return 989.4;
  if (name.find("H100") != std::string::npos) return name.find("PCIe") != std::string::npos ? 756.5 : 989.4;
  if (name.find("A100") != std::string::npos) return 312.0;
  if (name.find("L40S") != std::string::npos) return 362.1;
  return 0;
}

int main() {
  if (cuda_device_count() == 0) {
    std::printf("bench_gemm_cuda: skipped: %s\n", cuda_unavailable_reason().c_str());
    return 0;
  }
  CudaDeviceInfo info = cuda_device_info(0);
  double peak = spec_peak_tflops(info.name);
  std::printf("### GEMM bf16 on %s (spec dense bf16 peak %.1f TFLOP/s)\n\n", info.name.c_str(), peak);
  bench::print_header();
  cublasHandle_t handle;
  CUBLAS_CHECK(cublasCreate(&handle));
  for (int64_t size : {4096, 8192}) {
    for (bool trans_b : {false, true}) {
      Tensor a32 = empty({size, size}, DType::F32, cuda_device(0)), b32 = empty({size, size}, DType::F32, cuda_device(0));
      fill_uniform(a32, 1, 1, -1, 1);
      fill_uniform(b32, 1, 2, -1, 1);
      Tensor a = to_dtype(a32, DType::BF16), b = to_dtype(b32, DType::BF16);
      Tensor c = empty({size, size}, DType::BF16, cuda_device(0));
      double flops = 2.0 * size * size * size;
      float ours_ms = bench::median_ms([&] { gemm(a, b, c, false, trans_b); });
      // Baseline: cublasGemmEx, row-major via the same C^T = B^T A^T identity.
      float alpha = 1, beta = 0;
      int n = static_cast<int>(size);
      float cublas_ms = bench::median_ms([&] {
        CUBLAS_CHECK(cublasGemmEx(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, b.data(),
                                  CUDA_R_16BF, n, a.data(), CUDA_R_16BF, n, &beta, c.data(), CUDA_R_16BF, n,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      });
      std::string name = "gemm bf16 " + std::to_string(size) + "^3" + (trans_b ? " (B^T)" : "");
      bench::print_row(name, flops / ours_ms / 1e9, "TFLOP/s", "cublasGemmEx", flops / cublas_ms / 1e9);
      if (peak > 0) bench::print_row(name, flops / ours_ms / 1e9, "TFLOP/s", "spec peak", peak);
    }
  }
  cublasDestroy(handle);
  return 0;
}
