// paged_attention_cpu on one decode step of a rollout: 64 samples in 8 groups of 8, each group's
// samples sharing their prompt's blocks (~820 tokens) and then 0-600 tokens of their own, as in the
// demo's GRPO (rl/demo/demo.h). Shapes: the demo's model (head_dim 32, 4 query / 2 kv heads) and
// Qwen3-4B's (head_dim 128, 32 / 8). Threads: the default pool (SQLRL_THREADS, the core count by
// default; 1 gives the work per core). keys/s counts (query head, key) pairs. No peer: this is the
// kernel the CPU rollout and evaluation run; bench/RESULTS.md has its before/after (same bits).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/attention.h"

namespace {

void BM_PagedDecodeStep(benchmark::State& state, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  const int64_t bs = 16, samples = 64, group = 8, prompt_blocks = 51, max_blocks = 90;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t num_blocks = samples * max_blocks;
  std::vector<float> k(static_cast<size_t>(num_blocks * bs * kv_heads * head_dim)), v(k.size());
  for (float& x : k) x = 1.5f * normal(rng);
  for (float& x : v) x = normal(rng);
  std::vector<int32_t> table(static_cast<size_t>(samples * max_blocks)), positions(static_cast<size_t>(samples));
  for (int64_t i = 0; i < samples; ++i)
    for (int64_t b = 0; b < max_blocks; ++b)
      table[i * max_blocks + b] = static_cast<int32_t>(b < prompt_blocks ? i / group * max_blocks + b : i * max_blocks + b);
  int64_t keys = 0;
  for (int32_t& p : positions) keys += (p = static_cast<int32_t>(820 + rng() % 600)) + 1;
  std::vector<float> q(static_cast<size_t>(samples * heads * head_dim)), out(q.size());
  for (float& x : q) x = normal(rng);
  const sqlrl::PagedQueries queries{samples, table.data(), max_blocks, positions.data(), bs};
  for (auto _ : state) {
    sqlrl::paged_attention_cpu(out.data(), q.data(), k.data(), v.data(), queries, {heads, kv_heads, head_dim});
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["keys/s"] =
      benchmark::Counter(static_cast<double>(keys * heads) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_PagedDecodeStep, demo_d32_h4_kv2, 4, 2, 32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PagedDecodeStep, qwen3_4b_d128_h32_kv8, 32, 8, 128)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
