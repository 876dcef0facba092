// CUDA GRPO numerics in GB/s beside a device-to-device copy of the same byte count in the same
// run (the bandwidth these memory-bound kernels can reach): per-token loss fwd+bwd (21 B/token),
// fused AdamW with the bf16 copy out (30 B/param), grad-norm sum of squares (4 B/param),
// group advantage + span broadcast (rewards in, token advantages out).
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "bench/cuda_bench.h"
#include "kernels/adamw.h"
#include "kernels/advantage.h"
#include "kernels/grpo_loss.h"
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
  std::printf("### GRPO kernels on %s\n\n", cuda_device_info(0).name.c_str());
  bench::print_header();
  Device dev = cuda_device(0);
  for (int64_t T : {int64_t{1} << 20, int64_t{1} << 24}) {
    for (LossAgg agg : {LossAgg::TokenMean, LossAgg::SeqMeanTokenMean}) {
      Tensor lp = empty({T}, DType::F32, dev), old = empty({T}, DType::F32, dev), ref = empty({T}, DType::F32, dev);
      Tensor adv = empty({T}, DType::F32, dev), d = empty({T}, DType::F32, dev);
      fill_normal(lp, 1, 1, -1.0f, 0.3f), fill_normal(old, 1, 2, -1.0f, 0.3f), fill_normal(ref, 1, 3, -1.0f, 0.3f);
      fill_normal(adv, 1, 4);
      std::vector<uint8_t> mask(T);
      for (int64_t t = 0; t < T; ++t) mask[t] = t % 7 != 0;
      std::vector<int32_t> cu;
      for (int64_t t = 0; t < T; t += 2048) cu.push_back(static_cast<int32_t>(t));
      cu.push_back(static_cast<int32_t>(T));
      Tensor dmask = to_device(wrap(mask.data(), {T}, DType::U8, cpu_device(), nullptr), dev);
      int64_t S = static_cast<int64_t>(cu.size()) - 1;
      Tensor dcu = to_device(wrap(cu.data(), {S + 1}, DType::I32, cpu_device(), nullptr), dev);
      Tensor ws = empty({static_cast<int64_t>(grpo_loss_workspace_bytes(T, S))}, DType::U8, dev);
      Tensor stats = empty({static_cast<int64_t>(sizeof(GrpoLossStats))}, DType::U8, dev);
      GrpoLossConfig cfg{0.2f, 0.28f, 0.01f, agg, static_cast<double>(T)};
      float ms = bench::median_ms([&] {
        grpo_loss_cuda(d.data_as<float>(), static_cast<GrpoLossStats*>(stats.data()), lp.data_as<float>(),
                       old.data_as<float>(), ref.data_as<float>(), adv.data_as<float>(), dmask.data_as<uint8_t>(),
                       dcu.data_as<int32_t>(), S, T, cfg, ws.data(), CudaStream{});
      });
      row(std::string("grpo loss fwd+bwd ") + (agg == LossAgg::TokenMean ? "token-mean " : "seq-mean ") +
              std::to_string(T) + " tokens", 21.0 * T, ms);
    }
  }
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
  }
  {
    int64_t groups = 4096, G = 16, len = 256, T = groups * G * len;
    Tensor r = empty({groups * G}, DType::F32, dev), a = empty({groups * G}, DType::F32, dev), out = empty({T}, DType::F32, dev);
    fill_uniform(r, 3, 1);
    std::vector<int32_t> off(groups * G + 1);
    for (int64_t i = 0; i <= groups * G; ++i) off[i] = static_cast<int32_t>(i * len);
    Tensor doff = to_device(wrap(off.data(), {groups * G + 1}, DType::I32, cpu_device(), nullptr), dev);
    float ms = bench::median_ms([&] {
      group_advantage_cuda(a.data_as<float>(), r.data_as<float>(), groups, G, AdvantageOptions{}, CudaStream{});
      broadcast_spans_cuda(out.data_as<float>(), a.data_as<float>(), doff.data_as<int32_t>(), groups * G, T, CudaStream{});
    });
    row("advantage + broadcast 4096x16 -> " + std::to_string(T) + " tokens", 4.0 * T, ms);
  }
  return 0;
}
