// Qwen3 on the CPU: tokens/s of a training step (forward to per-token log-probs + backward to
// every parameter gradient; BM_TrainStepLora: to the gradients of an r 16 adapter on every
// projection, the base frozen) over a packed batch, each with the memory it holds (held_MiB) and
// the plan's train step with AdamW moments (plan_MiB), and of batched decode with the paged KV
// cache (G samples forked from one shared prompt). Two configs:
//   tiny: the fixture shape (2 layers, hidden 64, 4 heads / 2 KV heads, head_dim 16,
//         intermediate 128, vocab 256, tied) — 90,496 parameters, overhead-bound;
//   25m:  hidden 512, 8 layers, 8 heads / 4 KV heads, head_dim 64, intermediate 1408,
//         vocab 8192, tied — 27.8M parameters, GEMM-bound.
// The peer is bench/model_peer.py (transformers Qwen3ForCausalLM, float32 eager, same shapes).
// Threads: the default pool (SQLRL_THREADS, the core count by default) and OpenBLAS's own
// (OPENBLAS_NUM_THREADS, the core count by default). The CPU column is the whole process's CPU
// time (every thread), which on a loaded machine is steadier than the wall time; pinned to one
// core (taskset -c 0) it is the work done.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/infer.h"
#include "model/kv_cache.h"
#include "model/lora.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "model/train.h"
#include "runtime/random.h"

namespace sqlrl {
namespace {

QwenConfig bench_config(int64_t which) {
  QwenConfig c;
  c.arch = QwenArch::Qwen3;
  c.tie_word_embeddings = true;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1000000.0;
  c.torch_dtype = "float32";
  if (which == 0) {
    c.vocab_size = 256;
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
  } else {
    c.vocab_size = 8192;
    c.hidden_size = 512;
    c.intermediate_size = 1408;
    c.num_hidden_layers = 8;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 4;
    c.head_dim = 64;
  }
  return c;
}

const char* config_label(int64_t which) { return which == 0 ? "tiny" : "25m"; }

// Norm scales 1, everything else N(0, 0.02), as transformers initialises a fresh model.
QwenModel random_model(const QwenConfig& config) {
  QwenModel model = make_model(config);
  uint64_t stream = 0;
  for (const ParamView& view : model.table) {
    float* p = model.params.data() + view.offset;
    int64_t n = view.spec.numel();
    if (view.spec.name.find("norm") != std::string::npos) {
      std::fill(p, p + n, 1.0f);
    } else {
      fill_normal(wrap(p, {n}, DType::F32, cpu_device(), nullptr), 1234, stream++, 0.0f, 0.02f);
    }
  }
  return model;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t stream) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  Tensor bits = empty({n}, DType::I32);
  fill_random_bits(bits, 99, stream);
  const uint32_t* w = bits.data_as<uint32_t>();
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(w[i] % static_cast<uint32_t>(vocab));
  return ids;
}

// The memory a train step of T tokens needs by the plan (model/memory_plan.h, CPU, no rollout,
// nothing recomputed, fp32 AdamW moments the bench does not allocate): what the two cases compare.
int64_t planned_bytes(const QwenConfig& config, int64_t T, const LoraConfig* lora) {
  MemoryPlanOptions o;
  o.device = DeviceType::CPU;
  o.device_bytes = int64_t(1) << 50;
  o.reserve_bytes = 0;
  o.tokens_per_micro_batch = T;
  o.logprob_chunk_tokens = TrainOptions{}.logprob_chunk;
  o.rollout = false;
  o.recompute = Choice::Off;
  o.bf16_moments = Choice::Off;
  if (lora) o.lora = *lora;
  return plan_memory(config, o).peak_bytes;
}

// Args: config (0 tiny, 1 25m), sequences, tokens per sequence. lora: full fine-tuning (every
// parameter's gradient) or an r 16 adapter on every projection with the base frozen (its
// gradients only; A from PEFT's init, B filled too so the step does a trained adapter's work).
void train_step(benchmark::State& state, bool lora) {
  const int64_t which = state.range(0), seqs = state.range(1), len = state.range(2);
  QwenConfig config = bench_config(which);
  QwenModel model = random_model(config);
  LoraConfig lora_config;
  lora_config.rank = 16;
  lora_config.alpha = 32;
  lora_config.target_pattern = "all-linear";
  LoraAdapter adapter;
  if (lora) {
    adapter = init_adapter(lora_config, config, 1234);
    for (const LoraView& v : adapter.table)
      if (v.is_b)
        fill_normal(wrap(adapter.params.data() + v.offset, {v.numel()}, DType::F32, cpu_device(), nullptr), 1234,
                    1000 + static_cast<uint64_t>(v.offset), 0.0f, 0.02f);
    alloc_lora_grads(adapter);
  } else {
    alloc_grads(model);
  }
  std::vector<std::vector<int32_t>> sequences;
  for (int64_t s = 0; s < seqs; ++s) sequences.push_back(random_tokens(len, config.vocab_size, static_cast<uint64_t>(s)));
  PackedBatch batch = pack_sequences(sequences);
  const int64_t T = batch.num_tokens();
  // Next-token targets within each sequence; the last token of a sequence predicts token 0,
  // which changes no cost. d(loss)/d(logprob) = -1/T: the token-mean negative log-likelihood.
  std::vector<int32_t> targets(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) targets[t] = (t + 1) % len == 0 ? 0 : batch.tokens[t + 1];
  std::vector<float> dlogprobs(static_cast<size_t>(T), -1.0f / static_cast<float>(T)), logprobs(static_cast<size_t>(T));
  TrainOptions options;
  options.max_tokens = T;
  TrainState train = make_train_state(config, options);
  LoraAdapter* ad = lora ? &adapter : nullptr;
  for (auto _ : state) {
    if (lora) zero_lora_grads(adapter);
    else zero_grads(model);
    forward_logprobs(model, train, batch, targets, logprobs.data(), nullptr, 1.0f, ad);
    backward_logprobs(model, train, batch, targets, dlogprobs.data(), nullptr, nullptr, ad);
    benchmark::DoNotOptimize(lora ? adapter.grads.data() : model.grads.data());
  }
  state.SetLabel(config_label(which));
  state.counters["params"] = static_cast<double>(model.num_params);
  state.counters["trainable"] = static_cast<double>(lora ? adapter.num_params : model.num_params);
  // What this loop holds (weights, gradients, the train state, the adapter and its backward
  // scratch), and the plan's train step, which adds the AdamW moments of the trained parameters.
  const int64_t held = 4 * (static_cast<int64_t>(model.params.size() + model.grads.size() + adapter.params.size() +
                                                 adapter.grads.size()) +
                            train.num_floats() + (lora ? lora_backward_scratch_floats(lora_config, T) : 0));
  state.counters["held_MiB"] = static_cast<double>(held) / (1 << 20);
  state.counters["plan_MiB"] = static_cast<double>(planned_bytes(config, T, lora ? &lora_config : nullptr)) / (1 << 20);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(T * state.iterations()), benchmark::Counter::kIsRate);
}

void BM_TrainStep(benchmark::State& state) { train_step(state, false); }
void BM_TrainStepLora(benchmark::State& state) { train_step(state, true); }

// Args: config, samples G, prompt length, new tokens per sample. One iteration: prefill the
// prompt (not timed), fork it G times, decode `steps` batched steps of G tokens (timed), picking
// each next token by argmax (the same rule the peer uses), free the sequences.
void BM_Decode(benchmark::State& state) {
  const int64_t which = state.range(0), G = state.range(1), prompt_len = state.range(2), steps = state.range(3);
  QwenConfig config = bench_config(which);
  QwenModel model = random_model(config);
  const int64_t V = config.vocab_size, block_size = 16;
  const int64_t blocks_per_sample = (prompt_len + steps + block_size - 1) / block_size + 1;
  PagedKVCache cache = make_kv_cache(config, G * blocks_per_sample, block_size);
  std::vector<int32_t> prompt = random_tokens(prompt_len, V, 1000);
  std::vector<float> logits;
  int64_t decoded = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<int64_t> handles{kv_new_sequence(cache)};
    forward_cached(model, cache, {{handles[0], prompt}}, logits);
    for (int64_t i = 1; i < G; ++i) handles.push_back(kv_fork(cache, handles[0]));
    std::vector<float> step_logits;
    for (int64_t i = 0; i < G; ++i) step_logits.insert(step_logits.end(), logits.begin(), logits.end());
    state.ResumeTiming();
    std::vector<CachedInput> next(static_cast<size_t>(G));
    for (int64_t step = 0; step < steps; ++step) {
      for (int64_t i = 0; i < G; ++i) {
        const float* row = step_logits.data() + i * V;
        next[i] = {handles[i], {static_cast<int32_t>(std::max_element(row, row + V) - row)}};
      }
      forward_cached(model, cache, next, step_logits);
    }
    decoded += G * steps;
    state.PauseTiming();
    for (int64_t h : handles) kv_free(cache, h);
    state.ResumeTiming();
  }
  state.SetLabel(config_label(which));
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(decoded), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_TrainStep)
    ->ArgNames({"cfg", "seqs", "len"})
    ->Args({0, 16, 256})
    ->Args({1, 16, 256})
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

BENCHMARK(BM_TrainStepLora)
    ->ArgNames({"cfg", "seqs", "len"})
    ->Args({0, 16, 256})
    ->Args({1, 16, 256})
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

BENCHMARK(BM_Decode)
    ->ArgNames({"cfg", "G", "prompt", "new"})
    ->Args({0, 8, 128, 128})
    ->Args({1, 8, 128, 128})
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

}  // namespace
}  // namespace sqlrl

BENCHMARK_MAIN();
