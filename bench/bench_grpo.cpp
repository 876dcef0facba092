// CPU throughput of the GRPO numerics: per-token loss fwd+bwd (bytes moved: logp, old, ref, adv
// as f32, mask u8, dlogp f32 = 21 B/token), fused AdamW (p, m, v, g read + p, m, v written =
// 28 B/param) and the grad-norm sum of squares (4 B/param), beside a memcpy of the same bytes
// in the same run. Threads: the default pool (SQLRL_THREADS or all cores).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/grpo_loss.h"

namespace sqlrl {
namespace {

void set_bytes(benchmark::State& state, double bytes_per_iter) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iter * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void BM_GrpoLoss(benchmark::State& state) {
  int64_t T = state.range(0), seq = 512;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> lp(T), old(T), ref(T), adv(T), d(T);
  std::vector<uint8_t> mask(T);
  for (int64_t t = 0; t < T; ++t)
    old[t] = -std::fabs(normal(rng)), lp[t] = old[t] + 0.2f * normal(rng), ref[t] = lp[t] + 0.2f * normal(rng),
    adv[t] = normal(rng), mask[t] = t % 7 != 0;
  std::vector<int32_t> cu;
  for (int64_t t = 0; t < T; t += seq) cu.push_back(static_cast<int32_t>(t));
  cu.push_back(static_cast<int32_t>(T));
  GrpoLossConfig cfg{0.2f, 0.28f, 0.01f, state.range(1) ? LossAgg::SeqMeanTokenMean : LossAgg::TokenMean,
                     static_cast<double>(T)};
  for (auto _ : state) {
    GrpoLossStats st = grpo_loss_cpu(d.data(), lp.data(), old.data(), ref.data(), adv.data(), mask.data(), cu.data(),
                                     static_cast<int64_t>(cu.size()) - 1, cfg);
    benchmark::DoNotOptimize(st);
  }
  set_bytes(state, 21.0 * T);
}
BENCHMARK(BM_GrpoLoss)->ArgNames({"tokens", "seqmean"})->Args({1 << 16, 0})->Args({1 << 20, 0})->Args({1 << 20, 1})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_AdamW(benchmark::State& state) {
  int64_t n = state.range(0);
  std::vector<float> p(n, 0.5f), m(n, 0.0f), v(n, 0.0f), g(n, 0.01f);
  int64_t step = 0;
  for (auto _ : state) {
    adamw_cpu(p.data(), m.data(), v.data(), g.data(), n, AdamWConfig{}, ++step, 1e-6f, 1.0f);
    benchmark::DoNotOptimize(p.data());
  }
  set_bytes(state, 28.0 * n);
}
BENCHMARK(BM_AdamW)->ArgNames({"params"})->Arg(1 << 20)->Arg(1 << 24)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_GradSqSum(benchmark::State& state) {
  int64_t n = state.range(0);
  std::vector<float> g(n, 0.01f);
  for (auto _ : state) benchmark::DoNotOptimize(grad_sq_sum_cpu(g.data(), n));
  set_bytes(state, 4.0 * n);
}
BENCHMARK(BM_GradSqSum)->ArgNames({"params"})->Arg(1 << 24)->Unit(benchmark::kMillisecond)->UseRealTime();

// Baseline: memcpy of n floats (read n + write n: 8 B/float), single-threaded as memcpy is.
void BM_Memcpy(benchmark::State& state) {
  int64_t n = state.range(0);
  std::vector<float> a(n, 1.0f), b(n);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), n * sizeof(float));
    benchmark::DoNotOptimize(b.data());
  }
  set_bytes(state, 8.0 * n);
}
BENCHMARK(BM_Memcpy)->ArgNames({"floats"})->Arg(1 << 24)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace sqlrl

BENCHMARK_MAIN();
