// Device memory plan for GRPO training of a Qwen model on one GPU, as the CUDA model path lays
// it out: bf16 weights for the forward passes, fp32 master weights, fp32 (or bf16) gradients and
// AdamW moments in one contiguous buffer each, activations for one micro-batch of packed tokens
// (stored per layer, or only each layer's input when the layer is recomputed in the backward),
// the chunked log-prob scratch, and what is left for the rollout's paged KV cache.
// Pure arithmetic on the config: `llm_sqlrl plan` prints it before anyone rents a GPU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "weights/config.h"

namespace sqlrl {

struct MemoryPlanOptions {
  int64_t tokens_per_micro_batch = 8192;  // packed tokens in one forward/backward
  int64_t logprob_chunk_tokens = 1024;    // rows of logits made at once by the fused log-prob
  int64_t device_bytes = int64_t(80) * 1000 * 1000 * 1000;  // an "80 GB" H100
  int64_t reserve_bytes = int64_t(2) << 30;  // CUDA context, cuBLASLt workspaces, fragmentation
  int64_t rollout_sequence_tokens = 8192;    // one trajectory's cap, to express the KV budget in sequences
  bool bf16_gradients = false;               // gradients kept in bf16 instead of fp32
  bool reference_model = false;              // a frozen bf16 copy for the k3 KL term
};

struct MemoryLine {
  std::string what;
  int64_t bytes = 0;
};

struct MemoryPlan {
  int64_t num_params = 0;
  std::vector<MemoryLine> resident;         // held for the whole run
  int64_t activations_stored = 0;           // every layer keeps its activations
  int64_t activations_recomputed = 0;       // every layer recomputed in the backward
  int64_t backward_scratch = 0;             // one layer's activation gradients + the residual gradient
  int64_t logprob_scratch = 0;
  int64_t resident_total = 0;
  int64_t train_total_stored = 0, train_total_recomputed = 0;  // resident + activations + scratch
  int64_t kv_bytes_per_token = 0;           // bf16 K and V of every layer
  int64_t kv_budget_bytes = 0;              // device - reserve - resident - rollout working set (<0: none)
  int64_t kv_budget_tokens = 0;
};

MemoryPlan plan_memory(const QwenConfig& config, const MemoryPlanOptions& options);
// The table `llm_sqlrl plan` prints (GiB with two decimals, and a verdict per training mode).
std::string format_memory_plan(const QwenConfig& config, const MemoryPlan& plan, const MemoryPlanOptions& options);

}  // namespace sqlrl
