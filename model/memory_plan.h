// The memory plan of GRPO/SFT training, shared by `llm_sqlrl plan` and the trainers: the
// trainers allocate what the plan lists and run with the modes it chose, so what `plan` prints
// is what a run does. Pure arithmetic on the config and the options; the activation bytes come
// from the functions that size the real allocations (train_state_floats on the CPU,
// cuda_train_state_bytes on CUDA), so the two cannot drift apart.
//
// A run alternates two phases. Rollout: the bf16 weights decode with a paged KV cache. Train:
// forward/backward over packed micro-batches, gradients, AdamW. On CUDA the buffers only one
// phase needs share ONE device region allocated once for the run (rollout: the KV cache; train:
// gradients, activations, and the AdamW moments when they are offloaded to host memory while
// rollouts run), so the KV cache gets whatever training does not need to keep. On the CPU every
// buffer is allocated once and kept (host memory is not the constraint the plan fights there).
//
// The modes are chosen, in this order, to fit `device_bytes - reserve_bytes`:
//  1. AdamW moments in bf16 (stochastic rounding, kernels/adamw.h) only when training cannot fit
//     with fp32 moments even with every layer recomputed;
//  2. the fewest layers recomputed in the backward (gradient checkpointing; layers 0..k-1) for
//     the train phase to fit (k = 1 saves nothing: recomputed layers share one slot);
//  3. on CUDA, the moments offloaded to pinned host memory during rollouts when the KV cache
//     would otherwise hold fewer than `rollout_sequences` trajectories.
// Each can be forced on or off instead (Choice).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/lora.h"
#include "runtime/device.h"
#include "weights/config.h"

namespace sqlrl {

enum class Choice : uint8_t { Auto, Off, On };
// "auto" | "on" | "off"; what names the flag/key in the error.
Choice parse_choice(const std::string& value, const std::string& what);

struct MemoryPlanOptions {
  DeviceType device = DeviceType::CUDA;
  int64_t device_bytes = int64_t(80) * 1000 * 1000 * 1000;  // an "80 GB" H100
  int64_t reserve_bytes = int64_t(2) << 30;  // CUDA context, cuBLASLt workspaces, fragmentation
  int64_t tokens_per_micro_batch = 8192;     // packed tokens in one forward/backward (TrainOptions.max_tokens)
  int64_t logprob_chunk_tokens = 1024;       // rows of logits made at once (TrainOptions.logprob_chunk)
  int64_t rollout_sequence_tokens = 8192;    // one trajectory's cap
  int64_t rollout_sequences = 64;            // trajectories the rollout wants in flight at once
  int64_t min_rollout_sequences = 1;         // the KV cache must hold at least these (one GRPO group)
  int64_t kv_block_size = 16;
  // > 0: the KV cache has exactly this many blocks (train --kv-cache-blocks) instead of what is
  // left up to rollout_sequences trajectories at the full length; the plan fails when they do not
  // fit or hold fewer than min_rollout_sequences full trajectories.
  int64_t kv_blocks = 0;
  // > 0: the mean trajectory length (tokens) the optimistic admission expects: the plan's text
  // also shows how many trajectories of that length the cache holds (kv_sequences_at).
  int64_t rollout_mean_tokens = 0;
  bool rollout = true;                       // false (SFT): no rollout phase, no KV cache
  bool reference_model = false;              // a frozen copy for the k3 KL term (bf16 on CUDA)
  Choice bf16_moments = Choice::Auto;
  Choice recompute = Choice::Auto;           // On: every layer; Off: none
  Choice offload_optimizer = Choice::Auto;   // CUDA only (On is refused on the CPU)
  // Data parallel (rl/data_parallel.h): the plan is one rank's, and rollout_sequences that
  // rank's share. ZeRO 1-3: the AdamW moments of the rank's slice shard_bounds(n, world_size);
  // 2 and 3 add the slice's reduced gradient on the CPU (CUDA reduces it in place); 3 (CUDA)
  // holds only the slice's fp32 master.
  int world_size = 1;
  int zero_stage = 0;
  // LoRA (model/lora.h): the base stays frozen and only the adapter trains, so the adapter's fp32
  // A and B (its master), their fp32 gradients and their AdamW moments replace the base's master,
  // gradients and moments (none are allocated), the train step adds the adapter's backward
  // scratch (lora_backward_scratch_floats), and the KL reference is the base itself, run without
  // the adapter (reference_model then costs nothing). CPU: the base in fp32, all held. CUDA: the
  // base as bf16 weights only (2 bytes a parameter) and a bf16 copy of the adapter for the GEMMs
  // are resident beside its master and (unless offloaded) moments; the adapter's gradients and
  // backward scratch are in the train phase of the region, as the base's gradients would be.
  std::optional<LoraConfig> lora;
};

struct TrainModes {
  std::vector<bool> recompute;       // per layer: re-run its forward in the backward
  bool bf16_moments = false;         // AdamW m and v in bf16
  bool offload_optimizer = false;    // CUDA: m and v in host memory while rollouts run
  int64_t recomputed_layers() const;
  std::string describe() const;      // one line, as `plan` and the trainers print it
  bool operator==(const TrainModes&) const = default;
};

struct MemoryLine {
  std::string what;
  int64_t bytes = 0;
};

struct MemoryPlan {
  DeviceType device = DeviceType::CUDA;
  int64_t num_params = 0;
  int64_t trainable_params = 0;      // num_params, or the LoRA adapter's
  TrainModes modes;
  std::vector<MemoryLine> resident;  // allocated once, held for the whole run
  std::vector<MemoryLine> rollout;   // CUDA: the phase region during rollouts
  std::vector<MemoryLine> train;     // CUDA: the phase region during the train step
  int64_t resident_bytes = 0, rollout_bytes = 0, train_bytes = 0;
  int64_t phase_bytes = 0;           // CUDA: max(rollout, train): the shared region's size
  int64_t peak_bytes = 0;            // resident + phase region
  int64_t usable_bytes = 0;          // device - reserve
  int64_t kv_bytes_per_token = 0;
  int64_t kv_block_bytes = 0;
  int64_t kv_blocks = 0;             // the KV cache the trainer allocates
  int64_t kv_tokens() const { return kv_blocks * kv_block_size; }
  int64_t kv_block_size = 0;
  int64_t kv_sequences = 0;          // trajectories of rollout_sequence_tokens it holds at once
  int64_t activation_bytes = 0;      // the train state (activations + backward scratch)
  bool fits = false;
  std::string problem;               // why not, when !fits
};

MemoryPlan plan_memory(const QwenConfig& config, const MemoryPlanOptions& options);

// Trajectories of mean_tokens tokens each that the plan's KV cache holds at once: what the
// rollout's optimistic admission (rl/agent/rollout.h) keeps in flight when trajectories average
// that length, where plan.kv_sequences counts them at the full length (the worst case a
// reservation must assume). Prompt blocks a group shares are counted per trajectory, so a few
// more fit. 0 when mean_tokens <= 0.
int64_t kv_sequences_at(const MemoryPlan& plan, int64_t mean_tokens);

// Pieces of the CUDA phase region start at multiples of this (rl/train_memory.cpp lays them out;
// the plan counts the padding, so the region it sizes holds them).
constexpr int64_t kRegionAlign = 256;
inline int64_t region_aligned(int64_t bytes) { return (bytes + kRegionAlign - 1) / kRegionAlign * kRegionAlign; }
// The table `llm_sqlrl plan` prints and the trainers write to RUN/memory_plan.txt.
std::string format_memory_plan(const QwenConfig& config, const MemoryPlan& plan, const MemoryPlanOptions& options);

}  // namespace sqlrl
