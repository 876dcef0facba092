// sample_token_cpu on one Qwen-sized row (151,936 logits), one thread: tokens/s for nucleus
// sampling (top_k 0) at several spreads, and the full-vocabulary path (top_p 1) for scale.
// Logits are Gaussian times a spread: spread 4 at T 0.7 gives a nucleus (p 0.95) of a few hundred
// ids, spread 1 at T 1 a nucleus of most of the vocabulary (where the selection falls back to
// the full sort). The count printed is the nucleus-independent work per token: one row.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/sampling.h"

namespace {

constexpr int64_t kVocab = 151936;

std::vector<float> gaussian_row(float spread) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> row(kVocab);
  for (auto& x : row) x = normal(rng);
  return row;
}

void BM_Sample(benchmark::State& state, float spread, float temperature, float top_p) {
  std::vector<float> row = gaussian_row(spread);
  sqlrl::SamplingScratch scratch;
  sqlrl::SamplingParams params{temperature, 0, top_p, 11};
  uint64_t position = 0;
  for (auto _ : state) {
    auto token = sqlrl::sample_token_cpu(row.data(), kVocab, params, 0, position++, scratch);
    benchmark::DoNotOptimize(token);
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK_CAPTURE(BM_Sample, peaked_t07_p095, 4.0f, 0.7f, 0.95f)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Sample, medium_t1_p09, 2.0f, 1.0f, 0.9f)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Sample, flat_t1_p095, 1.0f, 1.0f, 0.95f)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Sample, peaked_t07_p1, 4.0f, 0.7f, 1.0f)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
