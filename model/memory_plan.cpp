#include "model/memory_plan.h"

#include <algorithm>
#include <cstdio>

#include "model/cuda_model.h"
#include "model/train.h"
#include "runtime/comm.h"
#include "runtime/error.h"
#include "weights/qwen_params.h"

namespace sqlrl {
namespace {

// GiB, or MiB / KiB for the small models of tests and the embedded default.
std::string gib(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= int64_t(1) << 30 || bytes <= -(int64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%8.2f GiB", b / (1 << 30));
  else if (bytes >= 1 << 20 || bytes <= -(1 << 20)) std::snprintf(buf, sizeof buf, "%8.2f MiB", b / (1 << 20));
  else std::snprintf(buf, sizeof buf, "%8.2f KiB", b / (1 << 10));
  return buf;
}

std::vector<bool> first_layers(int64_t L, int64_t k) {
  std::vector<bool> r(static_cast<size_t>(L), false);
  for (int64_t l = 0; l < k; ++l) r[l] = true;
  return r;
}

// Everything the choice depends on, priced once per candidate.
// N: the model's parameters; P: the trained ones (N, or a LoRA adapter's). With LoRA the base is
// frozen (no master, gradients or moments of its own; on CUDA its bf16 weights only) and the
// adapter is what trains: an fp32 master, on CUDA a bf16 copy for the GEMMs, fp32 gradients, moments.
struct Pricer {
  const QwenConfig& config;
  const MemoryPlanOptions& o;
  bool cuda;
  int64_t N, L, P;

  bool lora() const { return o.lora.has_value(); }
  int64_t weights() const { return N * (cuda ? 2 : 4); }
  bool sharded() const { return o.zero_stage > 0 && o.world_size > 1; }
  // The largest ZeRO slice of the trained parameters (shard_bounds, as the trainer's
  // optimizer_slice allocates), or all of them with one rank or ZeRO 0.
  int64_t slice_params() const {
    if (!sharded()) return P;
    const std::vector<int64_t> b = shard_bounds(P, o.world_size);
    int64_t most = 0;
    for (size_t r = 0; r + 1 < b.size(); ++r) most = std::max(most, b[r + 1] - b[r]);
    return most;
  }
  // The base's fp32 master for AdamW: CUDA full fine-tuning only (the CPU trains its one fp32 copy
  // in place; a LoRA base is frozen). ZeRO 3: this rank's slice.
  int64_t master() const { return cuda && !lora() ? (o.zero_stage == 3 ? slice_params() : N) * 4 : 0; }
  // With LoRA the base, run without the adapter, is the reference.
  int64_t reference() const { return o.reference_model && !lora() ? N * (cuda ? 2 : 4) : 0; }
  int64_t adapter() const { return lora() ? P * 4 : 0; }                   // fp32 A and B, what AdamW updates
  int64_t adapter_bf16() const { return cuda && lora() ? P * 2 : 0; }      // CUDA: the copy the GEMMs read
  int64_t grads() const { return P * 4; }
  // The moments this rank keeps: all, or (ZeRO 1-3) its slice's.
  int64_t moments(bool bf16) const { return 2 * slice_params() * (bf16 ? 2 : 4); }
  // ZeRO 2 and 3 on the CPU: the reduced gradient of this rank's slice (reduce-scatter), beside
  // the rank's own gradient accumulated over its micro-batches (grads(): rl/data_parallel.h). On
  // CUDA the reduce-scatter writes the slice in place in the gradient buffer: nothing more.
  int64_t slice_grads() const { return !cuda && o.zero_stage >= 2 && sharded() ? slice_params() * 4 : 0; }
  int64_t activations(int64_t recomputed) const {
    TrainOptions to;
    to.max_tokens = o.tokens_per_micro_batch;
    to.logprob_chunk = o.logprob_chunk_tokens;
    if (recomputed > 0) to.recompute = first_layers(L, recomputed);
    return cuda ? cuda_train_state_bytes(config, to) : 4 * train_state_floats(config, to);
  }
  int64_t lora_scratch() const { return lora() ? 4 * lora_backward_scratch_floats(*o.lora, o.tokens_per_micro_batch) : 0; }
  int64_t block_bytes() const { return 2 * L * o.kv_block_size * config.kv_dim() * (cuda ? 2 : 4); }
  int64_t blocks_per_sequence() const { return (o.rollout_sequence_tokens + o.kv_block_size - 1) / o.kv_block_size; }
  // One logits row per live sequence for each decode step (fp32). On CUDA they come from the
  // caching allocator, inside the reserve (64 rows of Qwen3's vocabulary: 39 MB), not the region.
  int64_t decode_logits() const { return o.rollout && !cuda ? o.rollout_sequences * config.vocab_size * 4 : 0; }
  // The train step's peak: with every buffer of both devices' plans that is live then (on the
  // CPU the KV cache is too: min_kv, the least the rollout can run with).
  int64_t train_peak(bool bf16, int64_t recomputed, int64_t min_kv) const {
    int64_t t = weights() + master() + reference() + adapter() + adapter_bf16() + grads() + slice_grads() +
                moments(bf16) + activations(recomputed) + lora_scratch();
    return cuda ? t : t + min_kv + decode_logits();
  }
};

}  // namespace

Choice parse_choice(const std::string& value, const std::string& what) {
  if (value == "auto") return Choice::Auto;
  if (value == "on") return Choice::On;
  if (value == "off") return Choice::Off;
  fail(what, ": expected auto, on or off, got '", value, "'");
}

int64_t TrainModes::recomputed_layers() const {
  return static_cast<int64_t>(std::count(recompute.begin(), recompute.end(), true));
}

std::string TrainModes::describe() const {
  return str_cat("recompute ", recomputed_layers(), "/", recompute.size(), " layers, AdamW moments ",
                 bf16_moments ? "bf16" : "fp32", offload_optimizer ? ", moments offloaded to host during rollouts" : "");
}

MemoryPlan plan_memory(const QwenConfig& config, const MemoryPlanOptions& o) {
  validate_config(config, "memory plan");
  for (auto [value, what] : {std::pair{o.tokens_per_micro_batch, "tokens per micro-batch"},
                             {o.logprob_chunk_tokens, "log-prob chunk"},
                             {o.rollout_sequence_tokens, "rollout sequence tokens"},
                             {o.rollout_sequences, "rollout sequences"},
                             {o.min_rollout_sequences, "minimum rollout sequences"},
                             {o.kv_block_size, "KV block size"},
                             {o.device_bytes, "device memory"}})
    check(value > 0, "memory plan: ", what, " must be positive, got ", value);
  check(o.reserve_bytes >= 0, "memory plan: the reserve must not be negative, got ", o.reserve_bytes);
  check(o.world_size >= 1, "memory plan: world size must be at least 1, got ", o.world_size);
  check(o.zero_stage >= 0 && o.zero_stage <= 3, "memory plan: zero stage ", o.zero_stage, " is not 0, 1, 2 or 3");
  const bool cuda = o.device == DeviceType::CUDA;
  check(cuda || o.offload_optimizer != Choice::On,
        "memory plan: offloading the optimizer is a CUDA mode (on the CPU the moments are in host memory already)");
  MemoryPlan p;
  p.device = o.device;
  p.num_params = count_parameters(qwen_parameters(config));
  p.trainable_params = o.lora ? lora_num_params(*o.lora, config) : p.num_params;
  const Pricer price{config, o, cuda, p.num_params, config.num_hidden_layers, p.trainable_params};
  const int64_t L = price.L, usable = o.device_bytes - o.reserve_bytes;
  p.usable_bytes = usable;
  p.kv_block_size = o.kv_block_size;
  p.kv_block_bytes = price.block_bytes();
  p.kv_bytes_per_token = p.kv_block_bytes / o.kv_block_size;
  const int64_t per_seq = price.blocks_per_sequence();
  check(o.kv_blocks >= 0, "memory plan: KV blocks must be >= 0 (0 = sized by the plan), got ", o.kv_blocks);
  // A cache sized by hand is what the rollout gets, and on the CPU what the train step holds too.
  const int64_t min_kv = !o.rollout ? 0
                         : o.kv_blocks > 0 ? o.kv_blocks * p.kv_block_bytes
                                           : o.min_rollout_sequences * per_seq * p.kv_block_bytes;
  const int64_t wanted_kv = !o.rollout ? 0
                            : o.kv_blocks > 0
                                ? o.kv_blocks * p.kv_block_bytes
                                : std::max(o.rollout_sequences, o.min_rollout_sequences) * per_seq * p.kv_block_bytes;

  // 1. moments, 2. recomputed layers: the cheapest that lets the train step fit.
  const int64_t max_recompute = o.recompute == Choice::Off ? 0 : L;
  bool bf16 = o.bf16_moments == Choice::On;
  if (o.bf16_moments == Choice::Auto) bf16 = price.train_peak(false, max_recompute, min_kv) > usable;
  int64_t k = o.recompute == Choice::On ? L : 0;
  if (o.recompute == Choice::Auto)
    while (k < L && price.train_peak(bf16, k, min_kv) > usable) ++k;
  p.modes.recompute = first_layers(L, k);
  p.modes.bf16_moments = bf16;
  p.activation_bytes = price.activations(k);
  const int64_t moments = price.moments(bf16);
  const std::string moments_what =
      str_cat("AdamW moments m, v (", bf16 ? "bf16" : "fp32",
              price.sharded() ? str_cat(", this rank's ZeRO slice of 1/", o.world_size) : std::string(),
              o.lora ? ", LoRA adapter" : "", ")");
  const std::string acts_what = str_cat("activations + backward scratch (", o.tokens_per_micro_batch, " tokens, ", k,
                                        "/", L, " layers recomputed)");

  // 3. the KV cache: what is left, up to what the rollout wants.
  auto add = [](std::vector<MemoryLine>& lines, int64_t& total, std::string what, int64_t bytes) {
    if (bytes > 0) lines.push_back({std::move(what), bytes}), total += bytes;
  };
  const std::string weights_what = cuda ? "weights (bf16, every forward)" : "weights (fp32, trained in place)";
  // With LoRA the frozen base, run with the adapter off, is also the KL reference.
  const std::string base_what = str_cat("base weights (", cuda ? "bf16" : "fp32", ", frozen",
                                        o.reference_model ? "; adapter off: the KL reference" : "", ")");
  const std::string scratch_what = str_cat("LoRA backward scratch u, du (", o.tokens_per_micro_batch, " tokens x rank ",
                                           o.lora ? o.lora->rank : 0, " x 2, fp32)");
  if (cuda) {
    const int64_t fixed = price.weights() + price.master() + price.reference() + price.adapter() + price.adapter_bf16();
    bool offload = o.offload_optimizer == Choice::On;
    if (o.offload_optimizer == Choice::Auto) offload = usable - fixed - moments - price.decode_logits() < wanted_kv;
    check(o.rollout || !offload, "memory plan: offloading the optimizer needs a rollout phase to offload it during");
    p.modes.offload_optimizer = offload;
    const int64_t rollout_room = usable - fixed - (offload ? 0 : moments) - price.decode_logits();
    p.kv_blocks = std::max<int64_t>(0, std::min(wanted_kv, rollout_room) / p.kv_block_bytes);
    add(p.resident, p.resident_bytes, o.lora ? base_what : weights_what, price.weights());
    add(p.resident, p.resident_bytes,
        str_cat("master weights (fp32, AdamW", o.zero_stage == 3 && price.sharded() ? str_cat(", this rank's ZeRO slice of 1/", o.world_size) : "", ")"),
        price.master());
    add(p.resident, p.resident_bytes, "reference model (bf16, KL)", price.reference());
    if (o.lora) {
      add(p.resident, p.resident_bytes, str_cat("LoRA adapter master A, B (fp32, rank ", o.lora->rank, ", AdamW)"),
          price.adapter());
      add(p.resident, p.resident_bytes, "LoRA adapter copy (bf16, every forward)", price.adapter_bf16());
    }
    if (!offload) add(p.resident, p.resident_bytes, moments_what, moments);
    add(p.rollout, p.rollout_bytes, str_cat("KV cache (bf16, ", p.kv_blocks, " blocks of ", o.kv_block_size, " tokens)"),
        p.kv_blocks * p.kv_block_bytes);
    add(p.rollout, p.rollout_bytes, str_cat("decode logits (", o.rollout_sequences, " rows x vocab, fp32)"),
        price.decode_logits());
    // The region's layout (rl/train_memory.cpp): gradients (with LoRA the adapter's), then m and
    // v, then the adapter's backward scratch, each piece aligned; the activations take the rest.
    add(p.train, p.train_bytes, o.lora ? "LoRA adapter gradients (fp32)" : "gradients (fp32)",
        region_aligned(price.grads()));
    if (offload) add(p.train, p.train_bytes, moments_what + ", back from host memory", 2 * region_aligned(moments / 2));
    add(p.train, p.train_bytes, scratch_what, region_aligned(price.lora_scratch()));
    add(p.train, p.train_bytes, acts_what, p.activation_bytes);
    p.phase_bytes = std::max(p.rollout_bytes, p.train_bytes);
  } else {
    const int64_t without_kv = price.weights() + price.reference() + price.adapter() + price.grads() +
                               price.slice_grads() + moments + p.activation_bytes + price.lora_scratch() +
                               price.decode_logits();
    p.kv_blocks = std::max<int64_t>(0, std::min(wanted_kv, usable - without_kv) / p.kv_block_bytes);
    add(p.resident, p.resident_bytes, o.lora ? base_what : weights_what, price.weights());
    add(p.resident, p.resident_bytes, "reference model (fp32, KL)", price.reference());
    if (o.lora)
      add(p.resident, p.resident_bytes, str_cat("LoRA adapter A, B (fp32, rank ", o.lora->rank, ")"), price.adapter());
    add(p.resident, p.resident_bytes, o.lora ? "LoRA adapter gradients (fp32)" : "gradients (fp32)", price.grads());
    add(p.resident, p.resident_bytes, str_cat("this rank's reduced gradient slice (fp32, ZeRO ", o.zero_stage, ")"),
        price.slice_grads());
    add(p.resident, p.resident_bytes, moments_what, moments);
    add(p.resident, p.resident_bytes, acts_what, p.activation_bytes);
    add(p.resident, p.resident_bytes, scratch_what, price.lora_scratch());
    add(p.resident, p.resident_bytes, str_cat("KV cache (fp32, ", p.kv_blocks, " blocks of ", o.kv_block_size, " tokens)"),
        p.kv_blocks * p.kv_block_bytes);
    add(p.resident, p.resident_bytes, str_cat("decode logits (", o.rollout_sequences, " rows x vocab, fp32)"),
        price.decode_logits());
  }
  p.peak_bytes = p.resident_bytes + p.phase_bytes;
  p.kv_sequences = p.kv_blocks / per_seq;

  const int64_t train_peak = price.train_peak(bf16, k, min_kv);
  if (o.rollout && o.kv_blocks > 0 && p.kv_blocks < o.kv_blocks) {  // first: on the CPU it is also why training cannot fit
    p.problem = str_cat("kv-cache-blocks ", o.kv_blocks, " (", gib(o.kv_blocks * p.kv_block_bytes),
                        ") does not fit: room for ", p.kv_blocks, " blocks is left");
  } else if (train_peak > usable) {
    p.problem = str_cat("the train step needs ", gib(train_peak), " with ", p.modes.describe(), " and ",
                        o.tokens_per_micro_batch, "-token micro-batches; ", gib(usable),
                        " usable (fewer tokens per micro-batch, or a device with more memory)");
  } else if (o.rollout && o.kv_blocks > 0 && p.kv_sequences < o.min_rollout_sequences) {
    p.problem = str_cat("kv-cache-blocks ", o.kv_blocks, " holds ", p.kv_sequences, " trajectories of ",
                        o.rollout_sequence_tokens, " tokens; the rollout needs ", o.min_rollout_sequences,
                        " (one group): at least ", o.min_rollout_sequences * per_seq, " blocks");
  } else if (o.rollout && p.kv_sequences < o.min_rollout_sequences) {
    p.problem = str_cat("the KV cache left holds ", p.kv_sequences, " trajectories of ", o.rollout_sequence_tokens,
                        " tokens; the rollout needs ", o.min_rollout_sequences,
                        " (one group): a shorter max_total_tokens, a smaller group, or more memory");
  }
  p.fits = p.problem.empty();
  return p;
}

int64_t kv_sequences_at(const MemoryPlan& plan, int64_t mean_tokens) {
  if (mean_tokens <= 0 || plan.kv_block_size <= 0) return 0;
  return plan.kv_blocks / ((mean_tokens + plan.kv_block_size - 1) / plan.kv_block_size);
}

std::string format_memory_plan(const QwenConfig& config, const MemoryPlan& p, const MemoryPlanOptions& o) {
  std::string out;
  auto line = [&](const std::string& indent, const std::string& what, int64_t bytes) {
    size_t width = 72 - indent.size();
    out += str_cat(indent, what, std::string(width - std::min(width, what.size()), ' '), gib(bytes), "\n");
  };
  char params[64];
  std::snprintf(params, sizeof params, "%.3f B", p.num_params / 1e9);
  out += str_cat(arch_name(config.arch), ": ", config.num_hidden_layers, " layers, hidden ", config.hidden_size,
                 ", intermediate ", config.intermediate_size, ", heads ", config.num_attention_heads, "/",
                 config.num_key_value_heads, " x ", config.head_dim, ", vocab ", config.vocab_size, ", ", params,
                 " parameters\n");
  if (o.lora) {
    std::string targets = o.lora->target_pattern;
    for (const std::string& m : o.lora->target_modules) targets += (targets.empty() ? "" : ",") + m;
    char scale[32];
    std::snprintf(scale, sizeof scale, "%g", static_cast<double>(lora_scale(*o.lora)));
    out += str_cat("LoRA rank ", o.lora->rank, ": ", p.trainable_params, " trainable parameters, the base frozen (alpha ",
                   o.lora->alpha, o.lora->use_rslora ? ", rsLoRA" : "", ": scale ", scale, "; targets ", targets, ")\n");
  }
  const bool cuda = p.device == DeviceType::CUDA;
  out += str_cat(cuda ? "device cuda " : "device cpu (host memory) ", gib(o.device_bytes), ", reserve ",
                 gib(o.reserve_bytes), ": ", gib(p.usable_bytes), " usable\n");
  if (o.world_size > 1)
    out += str_cat("data parallel: each of ", o.world_size, " ranks", cuda ? " (one GPU each)" : "", ", ZeRO ",
                   o.zero_stage, "; every figure below is one rank's\n");
  if (o.world_size > 1 && o.zero_stage == 3 && !cuda)
    out += "  (on the cpu the fp32 weights the forward reads are the master AdamW updates: ZeRO 3 holds what ZeRO 2 does)\n";
  out += str_cat("modes: ", p.modes.describe(), "\n\n");
  out += cuda ? "resident for the whole run\n" : "allocated once, held for the whole run\n";
  for (const MemoryLine& l : p.resident) line("  ", l.what, l.bytes);
  line("  ", "total", p.resident_bytes);
  if (cuda && o.rollout) {
    out += "\none device region, allocated once; rollout and train take turns in it\n";
    out += "  rollout\n";
    for (const MemoryLine& l : p.rollout) line("    ", l.what, l.bytes);
    line("    ", "total", p.rollout_bytes);
    out += "  train step\n";
    for (const MemoryLine& l : p.train) line("    ", l.what, l.bytes);
    line("    ", "total", p.train_bytes);
    line("  ", "region (the larger)", p.phase_bytes);
  } else if (cuda) {
    out += "\nthe train step's device region\n";
    for (const MemoryLine& l : p.train) line("  ", l.what, l.bytes);
    line("  ", "total", p.train_bytes);
  }
  out += "\n";
  line("", p.fits ? "peak  (fits)" : "peak  (does NOT fit)", p.peak_bytes);
  char per_token[32];
  std::snprintf(per_token, sizeof per_token, "%.1f KiB", p.kv_bytes_per_token / 1024.0);
  if (o.rollout)
    out += str_cat("KV cache: ", gib(p.kv_blocks * p.kv_block_bytes), " at ", per_token, " per token = ", p.kv_tokens(),
                 " tokens = ", p.kv_sequences, " trajectories of ", o.rollout_sequence_tokens, " tokens at once (",
                 o.kv_blocks > 0 ? "sized by hand" : str_cat(o.rollout_sequences, " wanted"), ")\n");
  if (o.rollout && o.rollout_mean_tokens > 0)
    out += str_cat("  at a mean of ", o.rollout_mean_tokens, " tokens: ", kv_sequences_at(p, o.rollout_mean_tokens),
                   " trajectories in flight (optimistic admission, preempting when the cache runs out; ",
                   p.kv_sequences, " reserving the full length each)\n");
  if (!p.fits) out += str_cat("does not fit: ", p.problem, "\n");
  return out;
}

}  // namespace sqlrl
