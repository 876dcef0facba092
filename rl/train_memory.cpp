#include "rl/train_memory.h"

#include <cmath>

#include "model/cuda_ops.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl::rl {

int64_t device_memory_bytes(bool cuda, int device) {
  if (cuda) return static_cast<int64_t>(cuda_device_info(device).total_memory);
  return host_memory_bytes();
}

MemoryPlanOptions memory_plan_options(const MemoryOptions& m, bool cuda, const Comm* comm) {
  MemoryPlanOptions o;
  o.device = cuda ? PlanDevice::Cuda : PlanDevice::Cpu;
  if (m.memory_gb > 0) {  // the budget itself: nothing held back
    o.device_bytes = std::llround(m.memory_gb * 1e9);
    o.reserve_bytes = 0;
  } else {
    o.device_bytes = device_memory_bytes(cuda, cuda && comm ? comm_gpu(*comm) : 0);
    // Ranks sharing one GPU (host-staged tests) each plan an equal share of it.
    if (cuda && comm && comm->device_sharers > 1) o.device_bytes /= comm->device_sharers;
    check(o.device_bytes > 0, "memory plan: the ", cuda ? "CUDA device" : "host",
          " reports no memory size; give the budget with memory-gb");
    o.reserve_bytes = cuda ? int64_t(2) << 30 : int64_t(1) << 30;
  }
  o.logprob_chunk_tokens = TrainOptions{}.logprob_chunk;
  o.bf16_moments = parse_choice(m.bf16_moments, "bf16-moments");
  o.recompute = parse_choice(m.recompute, "recompute");
  o.offload_optimizer = parse_choice(m.offload_optimizer, "offload-optimizer");
  return o;
}

namespace {

// Offset of the next 256-byte aligned piece of the region.
size_t take(size_t& used, size_t bytes) {
  const size_t at = static_cast<size_t>(region_aligned(static_cast<int64_t>(used)));
  used = at + bytes;
  return at;
}

bool moments_in_region(const Policy& policy, const TrainMemory& memory) {
  return memory.plan.modes.offload_optimizer && policy.on_cuda;
}

}  // namespace

TrainMemory start_train_memory(Policy& policy, const MemoryPlan& plan, const TrainOptions& train,
                               int64_t kv_block_size, const AdamWConfig& adamw, OptimizerState& optimizer) {
  check(plan.fits, "memory plan: ", plan.problem);
  check(plan.device == (policy.on_cuda ? PlanDevice::Cuda : PlanDevice::Cpu),
        "memory plan: made for another device than the policy's");
  check(train.recompute == plan.modes.recompute, "memory plan: the activations' recompute flags are not the plan's");
  const int64_t n = policy_num_trainable(policy);
  check(optimizer.bf16 == plan.modes.bf16_moments, "memory plan: the optimizer state's moments are ",
        optimizer.bf16 ? "bf16" : "fp32", ", the plan's ", plan.modes.bf16_moments ? "bf16" : "fp32");
  TrainMemory mem;
  mem.plan = plan;
  mem.train = train;
  mem.kv_block_size = kv_block_size;
  if (!policy.on_cuda) {
    // Data parallel with ZeRO 1-3: the rank's slice of them (grpo_step checks the exact size).
    check(moments_size(optimizer) > 0 && moments_size(optimizer) <= n, "memory plan: the optimizer state has ",
          moments_size(optimizer), " moments for ", n, " parameters");
    mem.acts = policy_init_training(policy, train, adamw);
    if (plan.kv_blocks > 0) mem.kv = make_policy_kv(policy, plan.kv_blocks, kv_block_size);  // none for SFT
    return mem;
  }
  const bool offload = plan.modes.offload_optimizer;
  // With a LoRA adapter (policy_attach_lora on the frozen base) the moments are the adapter's.
  check(!policy.lora || policy.cuda_lora.weights.defined(),
        "memory plan: the policy's LoRA adapter is not on the device (policy_attach_lora)");
  check(!policy.lora || plan.trainable_params == n, "memory plan: priced ", plan.trainable_params,
        " trainable parameters, the policy's LoRA adapter has ", n);
  // ZeRO 1-3: the moments of this rank's slice only (policy_shard_moments).
  const auto [moments_lo, moments_hi] = policy_moment_range(policy);
  const int64_t moments = moments_hi - moments_lo;
  policy.cuda_adamw = policy.lora ? make_cuda_adamw(policy.cuda_lora, adamw, plan.modes.bf16_moments, !offload)
                                  : make_cuda_adamw(policy.cuda, adamw, plan.modes.bf16_moments, /*allocate_moments=*/!offload,
                                                    moments);
  if (moments_size(optimizer) == moments) {  // resumed: the checkpoint's moments
    if (!offload) {
      policy_upload_optimizer(policy, optimizer);
      optimizer.m = {}, optimizer.v = {}, optimizer.m16 = {}, optimizer.v16 = {};
    }
  } else if (offload) {  // fresh: the host copy starts at zero
    OptimizerState zero = make_optimizer_state(moments, optimizer.bf16);
    zero.adam_step = optimizer.adam_step, zero.train_step = optimizer.train_step;
    optimizer = std::move(zero);
  }
  policy.cuda.grads = Tensor{};
  policy.cuda_lora.grads = Tensor{};  // the adapter's, when one: placed in the region per train step
  mem.region = empty({plan.phase_bytes}, DType::U8, cuda_device(policy.cuda.device));
  return mem;
}

PolicyKV& memory_for_rollout(Policy& policy, TrainMemory& mem, OptimizerState& optimizer) {
  if (mem.phase == TrainMemory::Phase::Rollout || !policy.on_cuda) {
    mem.phase = TrainMemory::Phase::Rollout;
    return mem.kv;
  }
  if (mem.phase == TrainMemory::Phase::Train && moments_in_region(policy, mem)) {
    policy_download_optimizer(policy, optimizer);  // the host copy is current from here on
    policy.cuda_adamw.m = Tensor{}, policy.cuda_adamw.v = Tensor{};
  }
  policy.cuda.grads = Tensor{};
  policy.cuda_lora.grads = Tensor{};
  mem.acts = PolicyActivations{};
  mem.kv = make_policy_kv(policy, mem.plan.kv_blocks, mem.kv_block_size, &mem.region);
  mem.phase = TrainMemory::Phase::Rollout;
  return mem.kv;
}

PolicyActivations& memory_for_train(Policy& policy, TrainMemory& mem, OptimizerState& optimizer) {
  if (mem.phase == TrainMemory::Phase::Train || !policy.on_cuda) {
    mem.phase = TrainMemory::Phase::Train;
    return mem.acts;
  }
  mem.kv = PolicyKV{};
  const int64_t n = policy_num_trainable(policy);  // the adapter's parameters in a LoRA run
  size_t used = 0;
  Tensor grads = view_bytes(mem.region, take(used, sizeof(float) * n), {n}, DType::F32);
  if (policy.lora) {
    policy.cuda_lora.grads = std::move(grads);
    zero_lora_grads_cuda(policy.cuda_lora);
  } else {
    policy.cuda.grads = std::move(grads);
    zero_grads(policy.cuda);
  }
  if (moments_in_region(policy, mem)) {
    CudaAdamW& opt = policy.cuda_adamw;
    const auto [lo, hi] = policy_moment_range(policy);  // ZeRO 1-3: this rank's slice
    const size_t bytes = dtype_size(opt.moment_dtype()) * static_cast<size_t>(hi - lo);
    opt.m = view_bytes(mem.region, take(used, bytes), {hi - lo}, opt.moment_dtype());
    opt.v = view_bytes(mem.region, take(used, bytes), {hi - lo}, opt.moment_dtype());
    policy_upload_optimizer(policy, optimizer);
  }
  // The plan's LoRA backward scratch slot (u, du): kept so that the activations sit where the plan
  // put them and the fits-check below is the plan's. The CUDA LoRA functions take their scratch
  // (half of it: bf16) from the caching allocator per call, so the slot itself stays unused.
  if (policy.lora) take(used, static_cast<size_t>(4 * lora_backward_scratch_floats(policy.lora->config, mem.train.max_tokens)));
  const size_t acts_at = take(used, static_cast<size_t>(cuda_train_state_bytes(policy.config(), mem.train)));
  check(used <= mem.region.nbytes(), "memory plan: the train step needs ", used, " region bytes, the plan gave ",
        mem.region.nbytes());
  Tensor acts_region = view_bytes(mem.region, acts_at, {static_cast<int64_t>(mem.region.nbytes() - acts_at)}, DType::U8);
  mem.acts.on_cuda = true;
  mem.acts.cuda = make_cuda_train_state(policy.cuda, mem.train, &acts_region);
  mem.phase = TrainMemory::Phase::Train;
  return mem.acts;
}

void memory_optimizer_to_host(const Policy& policy, const TrainMemory& mem, OptimizerState& optimizer) {
  if (!policy.on_cuda) return;
  if (moments_in_region(policy, mem) && mem.phase != TrainMemory::Phase::Train) return;
  policy_download_optimizer(policy, optimizer);
}

TrainModes executed_modes(const Policy& policy, const TrainMemory& mem, const OptimizerState& optimizer) {
  TrainModes m;
  const int64_t L = policy.config().num_hidden_layers;
  const TrainOptions& live = policy.on_cuda ? (mem.phase == TrainMemory::Phase::Train ? mem.acts.cuda.options : mem.train)
                                            : mem.acts.host.options;
  m.recompute = live.recompute.empty() ? std::vector<bool>(static_cast<size_t>(L), false) : live.recompute;
  m.bf16_moments = policy.on_cuda ? policy.cuda_adamw.bf16_moments : optimizer.bf16;
  // Offloaded: the device moments are absent or live inside the phase region (views there are
  // their own Storage objects: compare addresses), not in an allocation of their own.
  auto in_region = [&](const Tensor& t) {
    if (!mem.region.defined()) return false;
    const char* p = static_cast<const char*>(t.data());
    const char* r = static_cast<const char*>(mem.region.data());
    return p >= r && p < r + mem.region.nbytes();
  };
  m.offload_optimizer = policy.on_cuda && (!policy.cuda_adamw.m.defined() || in_region(policy.cuda_adamw.m));
  return m;
}

}  // namespace sqlrl::rl
