// Inference with the paged KV cache: prefill and decode are the same call (new tokens of each
// sequence, attending to everything the cache holds for it), and generation with sampling.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/sampling.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace sqlrl {

struct LoraAdapter;  // model/lora.h

struct CachedInput {
  int64_t sequence = 0;          // cache handle
  std::vector<int32_t> tokens;   // appended at positions length, length + 1, ...
};

// Runs the new tokens, writes their K/V into the cache and advances each sequence's length.
// logits: [inputs.size(), vocab] for the last new token of each input, or with all_positions
// [total new tokens, vocab] in input order. lora (nullable): a LoRA adapter applied unmerged, as
// in the training forward (model/train.h).
//
// Which bits a token gets: attention, the norms, RoPE and SwiGLU compute each token from its own
// row and the cache alone (paged attention runs one query at a time, the same code for a prefill
// and a decode step). The linear layers do not: a call of at most kRowsKernelTokens tokens (a
// decode step of a few sequences) takes the few-token kernel, a longer one sgemm, and the two sum
// in different orders; and OpenBLAS's sgemm itself sums a row in an order that depends on where
// the row sits in the call (its micro-kernel's row blocks; runtime/gemm.h). So by default a
// token's K/V and logits depend on what shares its call: a prefill that recomputes a decoded
// stretch differs in the last bits from the decode steps that first wrote it
// (tests/model/test_kv_cache.cpp RecomputedHistory...).
// batch_invariant: every linear layer (LoRA's too) takes the few-token kernel, whose sum for one
// token and one output is a fixed order over that token's row alone (kernels/matmul.h), so a
// token's bits depend on its own row and its cache only, whatever else the call carries (a
// rollout's schedule, preemption and recompute included). Slower prefills: that kernel reads the
// weights in place instead of sgemm's packed blocks.
constexpr int64_t kRowsKernelTokens = 16;
void forward_cached(const QwenModel& model, PagedKVCache& cache, const std::vector<CachedInput>& inputs,
                    std::vector<float>& logits, bool all_positions = false, const LoraAdapter* lora = nullptr,
                    bool batch_invariant = false);

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // ends a sample (the token is kept)
  uint64_t first_sample_id = 0;      // sample i draws with Philox stream first_sample_id + i
};

struct GeneratedSample {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;     // under the sampling distribution
  std::vector<float> logprobs_t1;  // under the model at temperature 1
  bool stopped = false;            // ended by a stop token or the callback
};

// Called after every sampled token (sample index, token); returning false ends that sample.
using TokenCallback = std::function<bool(int64_t sample, int32_t token)>;

// Prefills the prompt once, forks it num_samples times (the samples share the prompt's
// blocks) and decodes them as one batch. The cache sequences are freed before returning.
// lora (nullable): an adapter every forward applies unmerged (forward_cached).
std::vector<GeneratedSample> generate(const QwenModel& model, PagedKVCache& cache, const std::vector<int32_t>& prompt,
                                      int64_t num_samples, const GenerateOptions& options,
                                      const TokenCallback& on_token = {}, const LoraAdapter* lora = nullptr);

// The loop generate() and generate_cuda() share, given the device's two steps. `forward` runs
// the cached forward (one logits row per input, kept by the caller); `sample` draws requests[a]
// from logits row a, or every request from the one row of the prompt when `from_prompt`.
// `book` is the cache's bookkeeping (handles, forks); `who` names the caller in errors.
struct DecodeSteps {
  std::function<void(const std::vector<CachedInput>& inputs)> forward;
  std::function<std::vector<SampledToken>(const std::vector<SamplingRequest>& requests, bool from_prompt)> sample;
};
std::vector<GeneratedSample> generate_with(const DecodeSteps& steps, PagedKVCache& book,
                                           const std::vector<int32_t>& prompt, int64_t num_samples,
                                           const GenerateOptions& options, const TokenCallback& on_token,
                                           const char* who);

}  // namespace sqlrl
