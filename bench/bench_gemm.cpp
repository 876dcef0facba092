// CPU GEMM throughput (f32, OpenBLAS through runtime/gemm) at a few square and model-like sizes.
// GFLOP/s = 2*M*N*K / time. Threads: OpenBLAS's own (OPENBLAS_NUM_THREADS), all cores by default.
#include <benchmark/benchmark.h>

#include "runtime/gemm.h"
#include "runtime/random.h"

namespace sqlrl {
namespace {

void BM_GemmF32(benchmark::State& state) {
  int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  bool trans_b = state.range(3) != 0;
  Tensor a = empty({m, k}, DType::F32), b = empty(trans_b ? Shape{n, k} : Shape{k, n}, DType::F32),
         c = empty({m, n}, DType::F32);
  fill_uniform(a, 1, 1, -1, 1);
  fill_uniform(b, 1, 2, -1, 1);
  for (auto _ : state) {
    gemm(a, b, c, false, trans_b);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k * state.iterations(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

BENCHMARK(BM_GemmF32)
    ->ArgNames({"M", "N", "K", "transB"})
    ->Args({256, 256, 256, 0})
    ->Args({512, 512, 512, 0})
    ->Args({1024, 1024, 1024, 0})
    ->Args({2048, 2048, 2048, 0})
    ->Args({256, 1024, 256, 1})   // tokens x hidden -> MLP up-projection of a small model (x W^T)
    ->Args({512, 151936 / 16, 256, 1})  // a slice of an lm_head: wide N
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace sqlrl

BENCHMARK_MAIN();
