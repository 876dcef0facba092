// CPU throughput of the GRPO numerics, and of the whole trainer step (rl/grpo/grpo) on a tiny Qwen3
// (vocab 256, hidden 64, 2 layers) beside one plain forward + backward of the same packed
// tokens: the step adds the old-log-prob forward, the loss and AdamW. The loss is rl/grpo/algos.h's
// grpo row with the k3 KL term. Numerics: per-token loss fwd+bwd (bytes moved: logp, old, ref, adv,
// weight, dlogp as f32 = 24 B/token), fused AdamW (p, m, v, g read + p, m, v written =
// 28 B/param; 20 B/param with bf16 moments) and the grad-norm sum of squares (4 B/param),
// beside a memcpy of the same bytes in the same run. Threads: the default pool (SQLRL_THREADS or
// all cores).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/adamw.h"
#include "model/train.h"
#include "rl/grpo/grpo.h"
#include "runtime/random.h"
#include "runtime/tensor.h"

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
  std::vector<float> w(T);  // 1 in 7 tokens untrained; sequence-mean weights differ per sequence
  for (int64_t t = 0; t < T; ++t)
    old[t] = -std::fabs(normal(rng)), lp[t] = old[t] + 0.2f * normal(rng), ref[t] = lp[t] + 0.2f * normal(rng),
    adv[t] = normal(rng), w[t] = t % 7 == 0 ? 0.0f : 1.0f / static_cast<float>(state.range(1) ? (t / seq + 1) * T : T);
  rl::GrpoLossConfig cfg;
  cfg.clip = {0.2f, 0.28f}, cfg.kl_coef = 0.01f;
  for (auto _ : state) {
    rl::GrpoLossStats st = rl::grpo_loss_cpu(d.data(), lp.data(), old.data(), ref.data(), adv.data(), w.data(), nullptr, T, cfg);
    benchmark::DoNotOptimize(st);
  }
  set_bytes(state, 24.0 * T);
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

// The same update with bf16 moments: p, g read + p written (12 B) and m, v read and written as
// bf16 (8 B) = 20 B/param, plus one 10-round Philox4x32 per element for the stochastic
// rounding's bits (words 0 and 1 of its 4).
void BM_AdamWBf16Moments(benchmark::State& state) {
  int64_t n = state.range(0);
  std::vector<float> p(n, 0.5f), g(n, 0.01f);
  std::vector<uint16_t> m(n, 0), v(n, 0);
  int64_t step = 0;
  for (auto _ : state) {
    adamw_bf16_moments_cpu(p.data(), m.data(), v.data(), g.data(), n, AdamWConfig{}, ++step, 1e-6f, 1.0f);
    benchmark::DoNotOptimize(p.data());
  }
  set_bytes(state, 20.0 * n);
}
BENCHMARK(BM_AdamWBf16Moments)->ArgNames({"params"})->Arg(1 << 20)->Arg(1 << 24)->Unit(benchmark::kMillisecond)
    ->UseRealTime();

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

QwenConfig tiny_config() {
  QwenConfig c;
  c.tie_word_embeddings = true;
  c.vocab_size = 256, c.hidden_size = 64, c.intermediate_size = 128, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16;
  return c;
}

// 16 trajectories (4 prompts x G = 4) of 256 tokens: a 32-token prompt, then 224 sampled.
struct StepSetup {
  QwenModel model = make_model(tiny_config());
  std::vector<rl::Trajectory> batch;
  StepSetup() {
    fill_normal(wrap(model.params.data(), {model.num_params}, DType::F32, cpu_device(), nullptr), 1, 1, 0.0f, 0.02f);
    Tensor bits = empty({16 * 256}, DType::I32);
    fill_random_bits(bits, 2, 2);
    for (int i = 0; i < 16; ++i) {
      rl::Trajectory t;
      t.example_index = i / 4, t.sample_index = i % 4, t.reward = i % 3 == 0 ? 1.0 : 0.0;
      for (int p = 0; p < 256; ++p) {
        t.tokens.push_back(static_cast<int32_t>(bits.data_as<uint32_t>()[i * 256 + p] % 256));
        t.policy_mask.push_back(p >= 32);
      }
      t.sampler_logprobs.assign(256, 0.0f);
      batch.push_back(t);
    }
  }
};

void BM_GrpoStep(benchmark::State& state) {
  StepSetup s;
  alloc_grads(s.model);
  rl::OptimizerState opt = rl::make_optimizer_state(s.model.num_params);
  TrainOptions o;
  o.max_tokens = 1024;
  TrainState ts = make_train_state(s.model.config, o);
  rl::GrpoConfig gc;
  gc.filter.drop_no_valid_action = false;
  int64_t positions = 0;
  for (auto _ : state) positions += rl::grpo_step(s.model, nullptr, opt, ts, s.batch, gc).positions;
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(positions), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GrpoStep)->Unit(benchmark::kMillisecond)->UseRealTime();

// Baseline: forward_logprobs + backward_logprobs over the same micro-batches (prompt positions
// carry no gradient, as in the step).
void BM_ForwardBackward(benchmark::State& state) {
  StepSetup s;
  alloc_grads(s.model);
  std::vector<int64_t> all(16);
  for (int i = 0; i < 16; ++i) all[i] = i;
  std::vector<rl::MicroBatch> mbs = rl::pack_micro_batches(s.batch, all, std::vector<float>(16, 1.0f), 1024);
  TrainOptions o;
  o.max_tokens = 1024;
  TrainState ts = make_train_state(s.model.config, o);
  int64_t positions = 0;
  for (auto _ : state) {
    for (const rl::MicroBatch& mb : mbs) {
      std::vector<float> lp(mb.targets.size()), d(mb.targets.size());
      for (size_t t = 0; t < d.size(); ++t) d[t] = mb.mask[t] ? 1e-3f : 0.0f;  // as the loss's dlogp
      forward_logprobs(s.model, ts, mb.batch, mb.targets, lp.data());
      backward_logprobs(s.model, ts, mb.batch, mb.targets, d.data());
      positions += mb.batch.num_tokens();
    }
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(positions), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ForwardBackward)->Unit(benchmark::kMillisecond)->UseRealTime();

// The embedded demo's step shape: 4 questions x G = 8 rollouts, an 800-token prompt shared by
// each group, 160 sampled tokens, on the demo's model (vocab 2048, hidden 128, 2 layers, GQA 4/2,
// head_dim 32). share = 0 packs every sequence whole (as verl/TRL train), 1 packs each group's
// prompt once (GrpoConfig::share_prefixes). Both make the same update up to fp32 rounding.
void BM_GrpoStepGroupPrompts(benchmark::State& state) {
  QwenConfig c;
  c.vocab_size = 2048, c.hidden_size = 128, c.intermediate_size = 384, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 32, c.tie_word_embeddings = true;
  QwenModel model = make_model(c);
  fill_normal(wrap(model.params.data(), {model.num_params}, DType::F32, cpu_device(), nullptr), 1, 1, 0.0f, 0.02f);
  constexpr int kPrompt = 800, kSampled = 160, kGroups = 4, kGroup = 8;
  Tensor bits = empty({kGroups * kPrompt + kGroups * kGroup * kSampled}, DType::I32);
  fill_random_bits(bits, 3, 3);
  const uint32_t* r = bits.data_as<uint32_t>();
  std::vector<rl::Trajectory> batch;
  for (int g = 0; g < kGroups; ++g)
    for (int k = 0; k < kGroup; ++k) {
      rl::Trajectory t;
      t.example_index = g, t.sample_index = k, t.reward = (g + k) % 3 == 0 ? 1.0 : 0.0;
      for (int p = 0; p < kPrompt; ++p) t.tokens.push_back(static_cast<int32_t>(r[g * kPrompt + p] % 2048));
      for (int p = 0; p < kSampled; ++p)
        t.tokens.push_back(static_cast<int32_t>(r[kGroups * kPrompt + (g * kGroup + k) * kSampled + p] % 2048));
      t.policy_mask.assign(t.tokens.size(), 0);
      std::fill(t.policy_mask.begin() + kPrompt, t.policy_mask.end(), 1);
      t.sampler_logprobs.assign(t.tokens.size(), 0.0f);
      batch.push_back(t);
    }
  alloc_grads(model);
  rl::OptimizerState opt = rl::make_optimizer_state(model.num_params);
  TrainOptions o;
  o.max_tokens = 8192;
  TrainState ts = make_train_state(c, o);
  rl::GrpoConfig gc;
  gc.filter.drop_no_valid_action = false;
  gc.share_prefixes = state.range(0) != 0;
  int64_t positions = 0, rollout_tokens = 0;
  for (auto _ : state) {
    positions += rl::grpo_step(model, nullptr, opt, ts, batch, gc).positions;
    rollout_tokens += kGroups * kGroup * (kPrompt + kSampled - 1);
  }
  state.counters["packed/step"] = benchmark::Counter(static_cast<double>(positions), benchmark::Counter::kAvgIterations);
  state.counters["trajectory tokens/s"] = benchmark::Counter(static_cast<double>(rollout_tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GrpoStepGroupPrompts)->ArgNames({"share"})->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace sqlrl

BENCHMARK_MAIN();
