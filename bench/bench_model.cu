// The CUDA model at Qwen3-4B shapes (random weights on the device, never zeros):
//  * decode: one forward_cached_cuda step for B sequences at a given context, against the floor
//    of reading every bf16 weight once (the tied embedding read once, as the lm_head) plus the
//    K/V of every context token of every sequence (the forks share the prompt's blocks but each
//    query reads them), at the device-to-device copy bandwidth measured in the same run
//    (bytes read + written). The step includes its host work (block tables, uploads, launches).
//    Each shape runs the three decode modes (model/cuda_decode.h): unfused (the prefill path, as
//    before the fused step), kernels (the fused kernels launched one by one), graphs (replayed).
//  * training: forward_logprobs_cuda + backward_logprobs_cuda over packed 1024-token sequences:
//    tokens/s and MFU = (6 N + 6 L q_dim s) FLOPs per token (N: matmul parameters of the stack
//    incl. the lm_head; s: sequence length; causal attention forward + 2x backward) over the
//    bf16 GEMM rate measured in the same run (8192^3 through runtime/gemm.h).
//  * a GRPO group (1536-token prompt, 8 responses of 256 tokens) trained fwd+bwd with the prompt
//    packed once (shared prefixes) against the same group packed whole, as verl and TRL pack it
//    (8 layers: the ratio is per layer; the lm_head share differs a little).
// Usage: bench_model_cuda [train_layers (36)] [train_tokens (4096)]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/cuda_bench.h"
#include "model/cuda_decode.h"
#include "model/cuda_model.h"
#include "runtime/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/gemm.h"
#include "runtime/random.h"
#include "runtime/tensor.h"
#include "weights/config.h"

using namespace sqlrl;

static double copy_gbs() {
  int64_t words = int64_t{1} << 28;  // 1 GiB
  Tensor a = empty({words}, DType::I32, cuda_device(0)), b = empty({words}, DType::I32, cuda_device(0));
  fill_random_bits(a, 1, 0);
  size_t bytes = a.nbytes();
  float ms = bench::median_ms([&] { CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, nullptr)); });
  return 2.0 * static_cast<double>(bytes) / ms / 1e6;
}

static double gemm_tflops() {
  int64_t n = 8192;
  Tensor a32 = empty({n, n}, DType::F32, cuda_device(0)), b32 = empty({n, n}, DType::F32, cuda_device(0));
  fill_normal(a32, 2, 0);
  fill_normal(b32, 3, 0);
  Tensor a = to_dtype(a32, DType::BF16), b = to_dtype(b32, DType::BF16), c = empty({n, n}, DType::BF16, cuda_device(0));
  float ms = bench::median_ms([&] { gemm(a, b, c, false, true); });
  return 2.0 * n * n * n / ms / 1e9;
}

// Matmul parameters of `layers` layers plus the lm_head (embedding lookups do no FLOPs).
static double matmul_params(const QwenConfig& c, int64_t layers) {
  double per_layer = static_cast<double>(c.hidden_size) * (c.q_dim() + 2 * c.kv_dim()) +
                     static_cast<double>(c.q_dim()) * c.hidden_size + 3.0 * c.hidden_size * c.intermediate_size;
  return layers * per_layer + static_cast<double>(c.vocab_size) * c.hidden_size;
}

static void decode_rows(const CudaModel& m, double gbs) {
  const QwenConfig& c = m.config();
  double weight_bytes = 2.0 * static_cast<double>(m.num_params());
  for (int64_t batch : {1, 16, 64}) {
    for (int64_t context : {512, 2048}) {
      // unfused: the prefill path, as every step ran before model/cuda_decode.h; kernels: the
      // fused decode kernels launched one by one; graphs: the same replayed as a CUDA graph;
      // graphs+gemm: the graph step with cuBLASLt's products (what steps above
      // decode_fused_rows run).
      for (int variant = 0; variant < 4; ++variant) {
        const CudaDecodeMode mode = variant == 0   ? CudaDecodeMode::unfused
                                    : variant == 1 ? CudaDecodeMode::kernels
                                                   : CudaDecodeMode::graphs;
        const bool gemm_products = variant == 3;
        int64_t block = 16, steps = 25;
        // The forks share the prompt's blocks; each needs blocks for its own new tokens only.
        int64_t blocks = context / block + 2 + batch * ((steps + 8) / block + 2);
        CudaKVCache cache = make_cuda_kv_cache(m, blocks, block);
        cache.decode_mode = mode;
        cache.decode_fused_rows = gemm_products ? 0 : batch;  // not the default crossover: each variant at every batch
        std::vector<int32_t> prompt(static_cast<size_t>(context));
        for (int64_t i = 0; i < context; ++i) prompt[i] = static_cast<int32_t>((i * 7919) % c.vocab_size);
        Tensor logits;
        int64_t root = kv_new_sequence(cache.book);
        forward_cached_cuda(m, cache, {{root, prompt}}, logits);
        std::vector<int64_t> seqs;
        for (int64_t b = 0; b < batch; ++b) seqs.push_back(kv_fork(cache.book, root));
        int32_t token = 11;
        auto step = [&] {
          std::vector<CachedInput> in;
          for (int64_t s : seqs) in.push_back({s, {token}});
          forward_cached_cuda(m, cache, in, logits);
          token = (token + 1) % static_cast<int32_t>(c.vocab_size);
        };
        float ms = bench::median_ms(step, 3, steps - 5);
        double kv_bytes = 2.0 * 2.0 * static_cast<double>(c.kv_dim()) * c.num_hidden_layers * batch * (context + steps);
        double floor_ms = (weight_bytes + kv_bytes) / (gbs * 1e6);
        char name[160];
        std::snprintf(name, sizeof(name), "decode step B=%lld ctx=%lld (%lld layers), %s", static_cast<long long>(batch),
                      static_cast<long long>(context), static_cast<long long>(c.num_hidden_layers),
                      gemm_products ? "graphs+gemm" : cuda_decode_mode_name(mode));
        bench::print_row(name, ms, "ms", "weights+KV bytes / copy GB/s", floor_ms);
        if (mode == CudaDecodeMode::graphs) {  // where the step's time goes (events between kernels)
          std::vector<CachedInput> in;
          for (int64_t s : seqs) in.push_back({s, {token}});
          const std::vector<double> ops = decode_step_profile_cuda(m, cache, in);
          std::printf("  (one step by op, ms:");
          for (size_t i = 0; i < ops.size(); ++i)
            std::printf("%s %s %.3f", i ? "," : "", decode_op_name(static_cast<DecodeOp>(i)), ops[i]);
          std::printf(")\n");
        }
      }
    }
  }
}

static void train_rows(QwenConfig c, int64_t layers, int64_t tokens, double peak_tflops) {
  c.num_hidden_layers = layers;
  CudaModel m = random_cuda_model(c, 7);
  TrainOptions opt;
  opt.max_tokens = tokens;
  opt.logprob_chunk = 1024;
  for (bool recompute : {false, true}) {
    opt.recompute.assign(static_cast<size_t>(layers), recompute);
    CudaTrainState s = make_cuda_train_state(m, opt);
    int64_t seq = 1024;
    std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(tokens / seq));
    for (size_t i = 0; i < seqs.size(); ++i)
      for (int64_t t = 0; t < seq; ++t) seqs[i].push_back(static_cast<int32_t>((i * 131 + t * 7919) % c.vocab_size));
    PackedBatch batch = pack_sequences(seqs);
    int64_t T = batch.num_tokens();
    std::vector<int32_t> targets(batch.tokens.begin() + 1, batch.tokens.end());
    targets.push_back(0);
    std::vector<float> lp(static_cast<size_t>(T)), dlp(static_cast<size_t>(T), -1.0f / static_cast<float>(T));
    float ms = bench::median_ms(
        [&] {
          forward_logprobs_cuda(m, s, batch, targets, lp.data());
          backward_logprobs_cuda(m, s, batch, targets, dlp.data());
        },
        2, 5);
    double flops = T * (6.0 * matmul_params(c, layers) + 6.0 * layers * c.q_dim() * seq);
    double tflops = flops / ms / 1e9;
    char name[160];
    std::snprintf(name, sizeof(name), "train fwd+bwd %lld layers, %lld tokens (seq %lld)%s: %.0f tok/s, MFU",
                  static_cast<long long>(layers), static_cast<long long>(T), static_cast<long long>(seq),
                  recompute ? ", recompute" : "", T / (ms / 1e3));
    bench::print_row(name, tflops, "TFLOP/s", "bf16 GEMM 8192^3 TFLOP/s", peak_tflops);
    std::printf("  (activations + workspace %.2f GiB)\n", static_cast<double>(s.bytes()) / (1 << 30));
  }
}

static void group_rows(QwenConfig c) {
  const int64_t layers = 8, prompt = 1536, response = 256, G = 8;
  c.num_hidden_layers = layers;
  CudaModel m = random_cuda_model(c, 9);
  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(G));
  for (int64_t i = 0; i < G; ++i)
    for (int64_t t = 0; t < prompt + response; ++t)
      seqs[i].push_back(static_cast<int32_t>(((t < prompt ? 0 : i + 1) * 131 + t * 7919) % c.vocab_size));
  std::vector<PackItem> items;
  for (int64_t i = 0; i < G; ++i)
    items.push_back({&seqs[i], prompt + response, i == 0 ? -1 : 0, i == 0 ? 0 : prompt});
  double ms[2] = {0, 0};
  for (int shared = 0; shared < 2; ++shared) {
    PackedBatch batch = shared ? pack_with_prefixes(items) : pack_sequences(seqs);
    const int64_t T = batch.num_tokens();
    TrainOptions opt;
    opt.max_tokens = T;
    opt.logprob_chunk = 1024;
    CudaTrainState s = make_cuda_train_state(m, opt);
    std::vector<int32_t> targets(batch.tokens.begin() + 1, batch.tokens.end());
    targets.push_back(0);
    std::vector<float> lp(static_cast<size_t>(T)), dlp(static_cast<size_t>(T), -1.0f / static_cast<float>(T));
    ms[shared] = bench::median_ms(
        [&] {
          forward_logprobs_cuda(m, s, batch, targets, lp.data());
          backward_logprobs_cuda(m, s, batch, targets, dlp.data());
        },
        2, 5);
    std::printf("  (group packed %s: %lld positions, %.2f ms)\n", shared ? "with shared prefixes" : "whole",
                static_cast<long long>(T), ms[shared]);
  }
  bench::print_row("GRPO group fwd+bwd, 8 layers, prompt 1536 + 8 x 256, prompt packed once", 1e3 / ms[1],
                   "groups/s", "the group packed whole (verl, TRL)", 1e3 / ms[0]);
}

int main(int argc, char** argv) {
  if (cuda_device_count() == 0) {
    std::printf("bench_model_cuda: skipped: %s\n", cuda_unavailable_reason().c_str());
    return 0;
  }
  int64_t train_layers = argc > 1 ? std::atoll(argv[1]) : 36;
  int64_t train_tokens = argc > 2 ? std::atoll(argv[2]) : 4096;
  std::printf("### CUDA model, Qwen3-4B shapes, on %s\n\n", cuda_device_info(0).name.c_str());
  double gbs = copy_gbs(), tflops = gemm_tflops();
  std::printf("measured: D2D copy %.0f GB/s (read + write), bf16 GEMM %.0f TFLOP/s\n\n", gbs, tflops);
  bench::print_header();
  QwenConfig c = preset_config("qwen3-4b");
  {
    CudaModel m = random_cuda_model(c, 5);
    decode_rows(m, gbs);
  }
  cuda_empty_cache(0);
  train_rows(c, train_layers, train_tokens, tflops);
  cuda_empty_cache(0);
  group_rows(c);
  return 0;
}
