#include "model/memory_plan.h"

#include <cstdio>

#include "runtime/error.h"
#include "weights/qwen_params.h"

namespace sqlrl {
namespace {

constexpr int64_t kBf16 = 2, kF32 = 4;

// Bytes one layer saves per token for its backward, in the CUDA path's dtypes (bf16 tensors,
// fp32 normalisation/softmax statistics): the same tensors model/train.cpp keeps in fp32.
int64_t layer_bytes_per_token(const QwenConfig& c) {
  int64_t C = c.hidden_size, I = c.intermediate_size, H = c.num_attention_heads, KVH = c.num_key_value_heads;
  int64_t qd = c.q_dim(), kvd = c.kv_dim();
  int64_t bf16_values = C /*ln1*/ + qd + 2 * kvd /*q k v*/ + qd /*attention out*/ + C /*resid_mid*/ + C /*ln2*/ +
                        3 * I /*gate up h*/;
  int64_t f32_values = 2 /*rstd1 rstd2*/ + H /*lse*/;
  if (c.has_qk_norm()) {
    bf16_values += qd + kvd;   // q, k before their RMSNorm
    f32_values += H + KVH;     // their 1/rms
  }
  return bf16_values * kBf16 + f32_values * kF32;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%8.2f GiB", bytes / double(int64_t(1) << 30));
  return buf;
}

}  // namespace

MemoryPlan plan_memory(const QwenConfig& config, const MemoryPlanOptions& options) {
  validate_config(config, "memory plan");
  check(options.tokens_per_micro_batch > 0, "memory plan: tokens per micro-batch must be positive, got ",
        options.tokens_per_micro_batch);
  check(options.logprob_chunk_tokens > 0, "memory plan: log-prob chunk must be positive, got ",
        options.logprob_chunk_tokens);
  check(options.rollout_sequence_tokens > 0, "memory plan: rollout sequence tokens must be positive, got ",
        options.rollout_sequence_tokens);
  MemoryPlan p;
  p.num_params = count_parameters(qwen_parameters(config));
  int64_t N = p.num_params, T = options.tokens_per_micro_batch, C = config.hidden_size, L = config.num_hidden_layers;

  p.resident.push_back({"weights (bf16, forward copy)", N * kBf16});
  p.resident.push_back({"master weights (fp32)", N * kF32});
  p.resident.push_back({options.bf16_gradients ? "gradients (bf16)" : "gradients (fp32)",
                        N * (options.bf16_gradients ? kBf16 : kF32)});
  p.resident.push_back({"AdamW moments m, v (fp32)", 2 * N * kF32});
  if (options.reference_model) p.resident.push_back({"reference model (bf16, KL)", N * kBf16});
  for (const MemoryLine& line : p.resident) p.resident_total += line.bytes;

  int64_t per_layer = layer_bytes_per_token(config) * T;
  int64_t residual_stream = (L + 1) * T * C * kBf16;  // each layer's input, then the last output
  int64_t final_norm = T * (C * kBf16 + kF32) + T * kF32 /*per-token log-sum-exp*/;
  p.activations_stored = residual_stream + L * per_layer + final_norm;
  p.activations_recomputed = residual_stream + per_layer /*the one layer being recomputed*/ + final_norm;
  p.backward_scratch = per_layer + T * C * kF32 /*residual gradient, fp32*/;
  p.logprob_scratch = options.logprob_chunk_tokens * config.vocab_size * kF32;
  p.train_total_stored = p.resident_total + p.activations_stored + p.backward_scratch + p.logprob_scratch;
  p.train_total_recomputed = p.resident_total + p.activations_recomputed + p.backward_scratch + p.logprob_scratch;

  p.kv_bytes_per_token = L * 2 * config.kv_dim() * kBf16;
  // During rollout the training buffers stay resident; the decode working set (one chunk of
  // logits per live sequence batch) is small next to the cache and is covered by the reserve.
  p.kv_budget_bytes = options.device_bytes - options.reserve_bytes - p.resident_total;
  p.kv_budget_tokens = p.kv_budget_bytes > 0 ? p.kv_budget_bytes / p.kv_bytes_per_token : 0;
  return p;
}

std::string format_memory_plan(const QwenConfig& config, const MemoryPlan& p, const MemoryPlanOptions& o) {
  std::string out;
  auto line = [&](const std::string& what, int64_t bytes) { out += str_cat("  ", what, std::string(44 - std::min<size_t>(44, what.size()), ' '), gib(bytes), "\n"); };
  char params[64];
  std::snprintf(params, sizeof params, "%.3f B", p.num_params / 1e9);
  out += str_cat(arch_name(config.arch), ": ", config.num_hidden_layers, " layers, hidden ", config.hidden_size,
                 ", intermediate ", config.intermediate_size, ", heads ", config.num_attention_heads, "/",
                 config.num_key_value_heads, " x ", config.head_dim, ", vocab ", config.vocab_size, ", ", params,
                 " parameters\n");
  out += str_cat("device memory ", gib(o.device_bytes), " (reserve ", gib(o.reserve_bytes), ")\n\n");
  out += "resident for the whole run\n";
  for (const MemoryLine& l : p.resident) line(l.what, l.bytes);
  line("total resident", p.resident_total);
  out += str_cat("\none micro-batch of ", o.tokens_per_micro_batch, " packed tokens\n");
  line("activations, every layer stored", p.activations_stored);
  line("activations, every layer recomputed", p.activations_recomputed);
  line("backward scratch (one layer + residual grad)", p.backward_scratch);
  line(str_cat("log-prob scratch (", o.logprob_chunk_tokens, " tokens x vocab, fp32)"), p.logprob_scratch);
  out += "\ntraining peak\n";
  int64_t usable = o.device_bytes - o.reserve_bytes;
  auto verdict = [&](const char* mode, int64_t total) {
    line(str_cat(mode, total <= usable ? "  (fits)" : "  (does NOT fit)"), total);
  };
  verdict("store all activations", p.train_total_stored);
  verdict("recompute every layer", p.train_total_recomputed);
  out += "\nrollout KV cache (bf16, training state resident)\n";
  char per_token[32];
  std::snprintf(per_token, sizeof per_token, "%8.1f KiB", p.kv_bytes_per_token / 1024.0);
  out += str_cat("  per token", std::string(35, ' '), per_token, "\n");
  if (p.kv_budget_bytes <= 0) {
    out += "  budget                                      none: the training state alone exceeds the device\n";
  } else {
    line("budget", p.kv_budget_bytes);
    out += str_cat("  = ", p.kv_budget_tokens, " tokens = ", p.kv_budget_tokens / o.rollout_sequence_tokens,
                   " sequences of ", o.rollout_sequence_tokens, " tokens\n");
  }
  return out;
}

}  // namespace sqlrl
