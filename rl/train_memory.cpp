#include "rl/train_memory.h"

#include <cmath>

#include "rl/policy_backend.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl::rl {

MemoryPlanOptions memory_plan_options(const MemoryOptions& m, const PolicyBackend& backend, const Comm* comm) {
  MemoryPlanOptions o;
  o.device = backend.device;
  if (m.memory_gb > 0) {  // the budget itself: nothing held back
    o.device_bytes = std::llround(m.memory_gb * 1e9);
    o.reserve_bytes = 0;
  } else {
    // On its GPU (comm_gpu: the host's index 0 on the CPU).
    o.device_bytes = backend.memory_bytes(comm ? comm_gpu(*comm) : 0);
    // Ranks sharing one GPU (host-staged tests) each plan an equal share of it (comm_bind_gpu
    // counts them; 1 on the CPU).
    if (comm && comm->device_sharers > 1) o.device_bytes /= comm->device_sharers;
    check(o.device_bytes > 0, "memory plan: device ", backend.name,
          " reports no memory size; give the budget with memory-gb");
    o.reserve_bytes = backend.reserve_bytes;
  }
  o.logprob_chunk_tokens = TrainOptions{}.logprob_chunk;
  o.bf16_moments = parse_choice(m.bf16_moments, "bf16-moments");
  o.recompute = parse_choice(m.recompute, "recompute");
  o.offload_optimizer = parse_choice(m.offload_optimizer, "offload-optimizer");
  return o;
}

TrainMemory start_train_memory(Policy& policy, const MemoryPlan& plan, const TrainOptions& train,
                               int64_t kv_block_size, const AdamWConfig& adamw, OptimizerState& optimizer) {
  check(plan.fits, "memory plan: ", plan.problem);
  check(plan.device == policy_device(policy), "memory plan: made for ", device_type_name(plan.device),
        ", the policy is on ", policy.backend->name);
  check(train.recompute == plan.modes.recompute, "memory plan: the activations' recompute flags are not the plan's");
  check(optimizer.bf16 == plan.modes.bf16_moments, "memory plan: the optimizer state's moments are ",
        optimizer.bf16 ? "bf16" : "fp32", ", the plan's ", plan.modes.bf16_moments ? "bf16" : "fp32");
  TrainMemory mem;
  mem.plan = plan;
  mem.train = train;
  mem.kv_block_size = kv_block_size;
  policy.backend->start_memory(policy, mem, adamw, optimizer);
  return mem;
}

PolicyKV& memory_for_rollout(Policy& policy, TrainMemory& mem, OptimizerState& optimizer) {
  policy.backend->memory_to_rollout(policy, mem, optimizer);
  mem.phase = TrainMemory::Phase::Rollout;
  return mem.kv;
}

PolicyActivations& memory_for_train(Policy& policy, TrainMemory& mem, OptimizerState& optimizer) {
  policy.backend->memory_to_train(policy, mem, optimizer);
  mem.phase = TrainMemory::Phase::Train;
  return mem.acts;
}

void memory_optimizer_to_host(const Policy& policy, const TrainMemory& mem, OptimizerState& optimizer) {
  policy.backend->memory_optimizer_to_host(policy, mem, optimizer);
}

TrainModes executed_modes(const Policy& policy, const TrainMemory& mem, const OptimizerState& optimizer) {
  return policy.backend->live_modes(policy, mem, optimizer);
}

}  // namespace sqlrl::rl
