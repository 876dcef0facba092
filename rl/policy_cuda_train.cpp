// The CUDA row's training calls (rl/policy_backend.h): the gradient's reduction over ranks on the
// device (NCCL or host staging) and the memory plan's two phases. The bf16 weights, fp32 master,
// the bf16 KL reference and (unless offloaded) the moments are resident; ONE device region of
// plan.phase_bytes is allocated once, and the rollout's KV cache and the train step's gradients,
// activations (and offloaded moments) take turns in it. With offload the moments move to the
// OptimizerState's host vectors before each rollout (where a checkpoint reads them) and back
// before each train step.
#include "model/cuda_ops.h"
#include "rl/policy_cuda.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl::rl::cuda_impl {

// One gradient buffer per rank, into which the backward of every local shard adds (--grad-accum:
// grpo_step and sft keep no per-shard copies here), so N ranks compute what one rank with
// --grad-accum N computes up to the order of fp32 additions, not bit for bit.
// ZeRO 0, 1: the whole sum on every rank (ZeRO 1 then updates its slice); 2, 3: only this rank's
// slice of the sum, in place at its own offset of the buffer, and the norm summed over the
// slices in rank order.
double reduce_gradients(Policy& policy, const DataParallel& dp, const std::vector<std::vector<float>>&,
                        std::vector<float>&, const float** own) {
  if (!dp.comm || !comm_has_device_transport(*dp.comm)) {
    check(!dp.distributed(), "data parallel: several ranks on cuda need the job's NCCL communicator or host staging "
          "(app/launch.h join_job_gpu)");
    return policy_grad_sq_sum(policy);
  }
  const Comm& c = *dp.comm;
  // The trainable buffer's gradient: the adapter's in a LoRA run (the frozen base has none).
  Tensor& g = policy.lora ? policy.cuda_lora.grads : policy.cuda.grads;
  float* grads = static_cast<float*>(g.data());
  const int64_t n = policy_num_trainable(policy);
  const CudaStream& stream = policy.cuda.stream;
  if (dp.zero_stage >= 2 && dp.distributed()) {
    const std::vector<int64_t> b = zero_bounds(dp, n);
    const int64_t lo = b[c.rank], hi = b[c.rank + 1];
    comm_reduce_scatter_sum_device(c, grads, grads + lo, b, dp.ordered, stream);
    *own = grads + lo;
    std::vector<double> sq{grad_sq_sum_slice_cuda(grads + lo, hi - lo, policy.cuda_adamw, stream)};
    comm_sum_in_rank_order(c, sq);
    return sq[0];
  }
  // A communicator of one rank runs the same code (the sum is the gradient itself).
  if (dp.ordered) comm_all_reduce_sum_ordered_device(c, grads, n, stream);
  else comm_all_reduce_sum_device(c, grads, n, stream);
  if (dp.zero_stage == 1 && dp.distributed()) *own = grads + zero_bounds(dp, n)[c.rank];
  return policy_grad_sq_sum(policy);  // every rank holds the same sum: the same norm
}

// Every rank's updated slice of the bf16 copy every forward reads and, where each rank keeps a
// whole master (ZeRO 1, 2), of the master too.
void gather_update(Policy& policy, const DataParallel& dp, const std::vector<int64_t>& bounds) {
  comm_all_gather_device(*dp.comm, policy.cuda.weights.data(), 2, bounds, policy.cuda.stream);
  if (policy.cuda.master.numel() == policy.cuda.num_params())
    comm_all_gather_device(*dp.comm, policy.cuda.master.data(), 4, bounds, policy.cuda.stream);
}

// ZeRO 3: each rank's slice of the master, gathered over the host.
void gather_download(const Policy& policy, const DataParallel& dp, QwenModel& out) {
  const CudaModel& m = policy.cuda;
  if (policy.lora || !m.master.defined() || m.master.numel() == m.num_params()) return policy_download(policy, out);
  const int64_t n = m.num_params();
  const std::vector<int64_t> bounds = zero_bounds(dp, n);
  check(dp.distributed() && m.master_first == bounds[dp.rank()] && m.master.numel() == bounds[dp.rank() + 1] - m.master_first,
        "data parallel: the device master holds [", m.master_first, ", ", m.master_first + m.master.numel(),
        "), not this rank's ZeRO slice");
  out.params.resize(static_cast<size_t>(n));
  download_master_slice(m, out.params.data() + m.master_first);
  comm_all_gather(*dp.comm, out.params.data(), bounds);
}

namespace {

// Offset of the next 256-byte aligned piece of the region.
size_t take(size_t& used, size_t bytes) {
  const size_t at = static_cast<size_t>(region_aligned(static_cast<int64_t>(used)));
  used = at + bytes;
  return at;
}

bool moments_in_region(const TrainMemory& memory) { return memory.plan.modes.offload_optimizer; }

}  // namespace

void start_memory(Policy& policy, TrainMemory& mem, const AdamWConfig& adamw, OptimizerState& optimizer) {
  const MemoryPlan& plan = mem.plan;
  const bool offload = plan.modes.offload_optimizer;
  const int64_t n = policy_num_trainable(policy);
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
}

void memory_to_rollout(Policy& policy, TrainMemory& mem, OptimizerState& optimizer) {
  if (mem.phase == TrainMemory::Phase::Rollout) return;
  if (mem.phase == TrainMemory::Phase::Train && moments_in_region(mem)) {
    policy_download_optimizer(policy, optimizer);  // the host copy is current from here on
    policy.cuda_adamw.m = Tensor{}, policy.cuda_adamw.v = Tensor{};
  }
  policy.cuda.grads = Tensor{};
  policy.cuda_lora.grads = Tensor{};
  mem.acts = PolicyActivations{};
  mem.kv = make_policy_kv(policy, mem.plan.kv_blocks, mem.kv_block_size, &mem.region);
}

void memory_to_train(Policy& policy, TrainMemory& mem, OptimizerState& optimizer) {
  if (mem.phase == TrainMemory::Phase::Train) return;
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
  if (moments_in_region(mem)) {
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
  mem.acts = PolicyActivations{};
  mem.acts.backend = policy.backend;
  mem.acts.cuda = make_cuda_train_state(policy.cuda, mem.train, &acts_region);
}

void memory_optimizer_to_host(const Policy& policy, const TrainMemory& mem, OptimizerState& optimizer) {
  // Offloaded: the host copy is current outside train steps.
  if (moments_in_region(mem) && mem.phase != TrainMemory::Phase::Train) return;
  policy_download_optimizer(policy, optimizer);
}

TrainModes live_modes(const Policy& policy, const TrainMemory& mem, const OptimizerState&) {
  TrainModes m;
  const TrainOptions& live = mem.phase == TrainMemory::Phase::Train ? mem.acts.cuda.options : mem.train;
  m.recompute = live.recompute.empty() ? std::vector<bool>(static_cast<size_t>(policy.config().num_hidden_layers), false)
                                       : live.recompute;
  m.bf16_moments = policy.cuda_adamw.bf16_moments;
  // Offloaded: the device moments are absent or live inside the phase region (views there are
  // their own Storage objects: compare addresses), not in an allocation of their own.
  auto in_region = [&](const Tensor& t) {
    if (!mem.region.defined()) return false;
    const char* p = static_cast<const char*>(t.data());
    const char* r = static_cast<const char*>(mem.region.data());
    return p >= r && p < r + mem.region.nbytes();
  };
  m.offload_optimizer = !policy.cuda_adamw.m.defined() || in_region(policy.cuda_adamw.m);
  return m;
}

}  // namespace sqlrl::rl::cuda_impl
