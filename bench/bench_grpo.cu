// CUDA optimizer numerics in GB/s beside a device-to-device copy of the same byte count in the
// same run (the bandwidth these memory-bound kernels can reach): fused AdamW with the bf16 copy
// out (30 B/param), the same with bf16 moments (22 B/param: half the optimizer state) and the
// grad-norm sum of squares (4 B/param). (The GRPO loss and advantage run on the host:
// rl/grpo/algos.h.)
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "bench/cuda_bench.h"
#include "kernels/adamw.h"
#include "runtime/cuda/check.h"
#include "runtime/random.h"
#include "runtime/tensor.h"

using namespace sqlrl;

static float copy_ms(size_t bytes) {
  Tensor a = empty({static_cast<int64_t>(bytes)}, DType::U8, cuda_device(0)), b = empty({static_cast<int64_t>(bytes)}, DType::U8, cuda_device(0));
  return bench::median_ms([&] { CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, nullptr)); });
}

static void row(const std::string& name, double bytes, float ms) {
  // A copy reads and writes its bytes: time a copy of bytes / 2 to move the same total.
  float base = copy_ms(static_cast<size_t>(bytes / 2));
  bench::print_row(name, bytes / ms / 1e6, "GB/s", "cudaMemcpy D2D same bytes", bytes / base / 1e6);
}

int main() {
  if (cuda_device_count() == 0) {
    std::printf("bench_grpo_cuda: skipped: %s\n", cuda_unavailable_reason().c_str());
    return 0;
  }
  std::printf("### AdamW and grad norm on %s\n\n", cuda_device_info(0).name.c_str());
  bench::print_header();
  Device dev = cuda_device(0);
  for (int64_t n : {int64_t{1} << 24, int64_t{4} << 28}) {  // 16M and 1.07G parameters (~4B model / 4)
    Tensor p = empty({n}, DType::F32, dev), m = zeros({n}, DType::F32, dev), v = zeros({n}, DType::F32, dev);
    Tensor g = empty({n}, DType::F32, dev), bf = empty({n}, DType::BF16, dev);
    fill_normal(p, 2, 1), fill_normal(g, 2, 2, 0.0f, 1e-3f);
    Tensor ws = empty({static_cast<int64_t>(grad_sq_sum_workspace_bytes())}, DType::U8, dev);
    Tensor sq = empty({8}, DType::U8, dev);
    float norm_ms = bench::median_ms([&] { grad_sq_sum_cuda(static_cast<double*>(sq.data()), g.data_as<float>(), n, ws.data(), CudaStream{}); });
    row("grad norm sum of squares " + std::to_string(n) + " params", 4.0 * n, norm_ms);
    int64_t step = 0;
    float ms = bench::median_ms([&] {
      adamw_cuda(p.data_as<float>(), m.data_as<float>(), v.data_as<float>(), g.data_as<float>(), bf.data_as<uint16_t>(),
                 n, AdamWConfig{}, ++step, 1e-6f, static_cast<double*>(sq.data()), 1.0f, CudaStream{});
    });
    row("adamw + bf16 copy " + std::to_string(n) + " params", 30.0 * n, ms);
    // bf16 moments: p, g read + p written (12 B), m, v read + written as bf16 (8 B), bf16 copy (2 B).
    Tensor mb = zeros({n}, DType::BF16, dev), vb = zeros({n}, DType::BF16, dev);
    step = 0;
    float bf16_ms = bench::median_ms([&] {
      adamw_bf16_moments_cuda(p.data_as<float>(), mb.data_as<uint16_t>(), vb.data_as<uint16_t>(), g.data_as<float>(),
                              bf.data_as<uint16_t>(), n, AdamWConfig{}, ++step, 1e-6f, static_cast<double*>(sq.data()),
                              1.0f, CudaStream{});
    });
    row("adamw bf16 moments + bf16 copy " + std::to_string(n) + " params", 22.0 * n, bf16_ms);
  }
  return 0;
}
