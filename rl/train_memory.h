// The memory plan (model/memory_plan.h) executed for one training run: the trainers (GRPO, SFT)
// ask plan_memory for the modes and sizes, refuse to start when it does not fit, and then
// allocate exactly what it lists.
//
//   CPU:  gradients, AdamW moments (fp32 or bf16), activations (the plan's recomputed layers)
//         and the rollout's KV cache, each allocated once at the start and kept.
//   CUDA: bf16 weights, fp32 master, the bf16 KL reference and (unless offloaded) the moments
//         are resident; ONE device region of plan.phase_bytes is allocated once, and the
//         rollout's KV cache and the train step's gradients, activations (and offloaded
//         moments) take turns in it: memory_for_rollout / memory_for_train switch it. With
//         offload the moments move to the OptimizerState's host vectors before each rollout
//         (where a checkpoint reads them) and back before each train step.
#pragma once
#include <cstdint>

#include "model/memory_plan.h"
#include "rl/optimizer.h"
#include "rl/options.h"
#include "rl/policy.h"
#include "runtime/comm.h"

namespace sqlrl::rl {

// The budget: memory_gb as given (nothing held back), else the device's memory (CUDA: the GPU's
// total; CPU: physical RAM) less the backend's reserve (2 GiB on CUDA for the context and
// workspaces, 1 GiB on the CPU for the process itself: code, tokenizer, data, SQLite). comm
// (nullable): on CUDA the rank's GPU (comm_gpu), and where ranks share it (comm.device_sharers)
// this rank's equal share.
MemoryPlanOptions memory_plan_options(const MemoryOptions& m, const PolicyBackend& backend, const Comm* comm = nullptr);

struct TrainMemory {
  MemoryPlan plan;
  TrainOptions train;  // the activations' options: max_tokens, logprob_chunk, the plan's recompute
  int64_t kv_block_size = 16;
  Tensor region;            // CUDA: the phase region
  PolicyKV kv;              // the rollout's cache (CUDA: only during rollouts)
  PolicyActivations acts;   // the train step's activations (CUDA: only during train steps)
  enum class Phase : uint8_t { None, Rollout, Train } phase = Phase::None;
};

// After the policy is made (training_policy: on CUDA without gradients) and the optimizer state is
// loaded or fresh: allocates what the plan says. `optimizer` must hold the moments in the plan's
// precision (make_optimizer_state / load_optimizer with plan.modes.bf16_moments); on CUDA without
// offload they go to the device and the host vectors are emptied. Fails with the plan's problem
// when it does not fit.
TrainMemory start_train_memory(Policy& policy, const MemoryPlan& plan, const TrainOptions& train,
                               int64_t kv_block_size, const AdamWConfig& adamw, OptimizerState& optimizer);
// The rollout's KV cache (CUDA: the region becomes the cache; offloaded moments come to the host).
PolicyKV& memory_for_rollout(Policy& policy, TrainMemory& memory, OptimizerState& optimizer);
// The train step's activations (CUDA: the region becomes gradients (zeroed), activations and,
// offloaded, the moments uploaded from the host).
PolicyActivations& memory_for_train(Policy& policy, TrainMemory& memory, OptimizerState& optimizer);
// The moments into optimizer's host vectors for a checkpoint: a download when they are on the
// device, nothing when offloaded (the host copy is current outside train steps).
void memory_optimizer_to_host(const Policy& policy, const TrainMemory& memory, OptimizerState& optimizer);
// What the run really executes, read back from the live buffers (the activations' recompute
// flags, the moments' dtype, where they are), to compare with plan.modes.
TrainModes executed_modes(const Policy& policy, const TrainMemory& memory, const OptimizerState& optimizer);

}  // namespace sqlrl::rl
