// The CUDA row of rl/policy_backend.h, its model calls: a CudaModel (bf16 weights every forward
// reads, the fp32 master and gradients), the AdamW moments on the device (CudaAdamW) and a LoRA
// adapter beside the base (CudaLora), all through model/cuda_model.h. The data-parallel and
// memory-phase calls of the row are rl/policy_cuda_train.cpp's.
#include <algorithm>

#include "kernels/attention.h"
#include "model/cuda_ops.h"
#include "rl/policy_cuda.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl::rl {

namespace {

void check_cuda_device(const QwenModel& host, int device) {
  check(cuda_device_count() > 0, "device cuda: ", cuda_unavailable_reason());
  check(cuda_device_count() > device, "device cuda: no CUDA device ", device, " (", cuda_device_count(), " present)");
  check(cuda_attention_takes_head_dim(host.config.head_dim), "device cuda: the model's head_dim is ",
        host.config.head_dim, "; the CUDA attention kernels take 64 or 128 (the embedded model: --tiny-head-dim 64)");
}

}  // namespace

namespace cuda_impl {

CudaLora* device_lora(Policy& policy, const char* who) {
  if (!policy.lora) return nullptr;
  check(policy.cuda_lora.weights.defined() && policy.cuda_lora.num_params == policy.lora->num_params, who,
        ": the policy's LoRA adapter is not on the device (attach it with policy_attach_lora)");
  return &policy.cuda_lora;
}
const CudaLora* device_lora(const Policy& policy, const char* who) {
  return device_lora(const_cast<Policy&>(policy), who);
}

}  // namespace cuda_impl

Policy cuda_policy(QwenModel& host, int device, bool grads) {
  check_cuda_device(host, device);
  Policy p;
  p.host = &host;
  p.backend = &cuda_backend();
  p.cuda = upload_model(host, device, CudaStream{}, grads);
  return p;
}

Policy cuda_policy_sharded(QwenModel& host, int64_t lo, int64_t hi, int device) {
  check_cuda_device(host, device);
  Policy p;
  p.host = &host;
  p.backend = &cuda_backend();
  p.cuda = upload_model_sliced(host, lo, hi, device);
  return p;
}

Policy cuda_frozen_policy(QwenModel& host, int device) {
  check_cuda_device(host, device);
  Policy p;
  p.host = &host;
  p.backend = &cuda_backend();
  p.cuda = upload_frozen_model(host, device);  // bf16 weights only: never trained
  return p;
}

namespace cuda_impl {

void check_usable(const std::string& who, int64_t head_dim, const std::string& hint) {
  const std::string at = who.empty() ? "device cuda: " : who + ": --device cuda: ";
  check(cuda_device_count() > 0, at, cuda_unavailable_reason());
  check(head_dim <= 0 || cuda_attention_takes_head_dim(head_dim), at, "the model's head_dim is ", head_dim,
        "; the CUDA attention kernels take 64 or 128", hint.empty() ? "" : " (" + hint + ")");
}

Policy frozen(QwenModel& model, int gpu) { return cuda_frozen_policy(model, gpu); }

void attach_lora(Policy& policy, LoraAdapter* adapter, bool grads) {
  policy.lora = adapter;
  policy.cuda_lora = CudaLora{};
  policy.cuda_adamw = CudaAdamW{};  // the moments of what trained before (the base or another adapter)
  if (adapter) policy.cuda_lora = upload_lora(*adapter, policy.cuda, grads);
}

// LoRA: the base frozen (bf16 weights only, as the plan prices it), the adapter trained (its
// gradients placed in the phase region by start_train_memory: attached without). ZeRO 3: the fp32
// master of this rank's slice only (every bf16 weight, for rollouts).
Policy training(QwenModel& model, const TrainingPolicySpec& spec) {
  const int64_t hi = spec.slice_hi < 0 ? model.num_params : spec.slice_hi;
  Policy p = spec.adapter        ? cuda_frozen_policy(model, spec.gpu)
             : spec.shard_master ? cuda_policy_sharded(model, spec.slice_lo, hi, spec.gpu)
                                 : cuda_policy(model, spec.gpu, /*grads=*/false);
  attach_lora(p, spec.adapter, /*grads=*/false);
  if (!spec.adapter) policy_shard_moments(p, spec.slice_lo, hi);
  return p;
}

Policy base(const Policy& policy) {
  Policy p;
  p.host = policy.host;
  p.backend = policy.backend;
  // The same bf16 weights (Tensor copies share their storage), nothing trainable: the reference
  // never runs a backward or an optimizer step.
  p.cuda.shape = policy.cuda.shape;
  p.cuda.device = policy.cuda.device;
  p.cuda.stream = policy.cuda.stream;
  p.cuda.weights = policy.cuda.weights;
  return p;
}

int64_t kv_block_bytes(const Policy& policy, int64_t block_size) {
  const QwenConfig& c = policy.config();
  return 2 * c.num_hidden_layers * block_size * c.kv_dim() * 2;  // bf16 K and V
}

PolicyKV make_kv(const Policy& policy, int64_t num_blocks, int64_t block_size, const Tensor* place_in) {
  PolicyKV kv;
  kv.backend = policy.backend;
  kv.cuda = make_cuda_kv_cache(policy.cuda, num_blocks, block_size, place_in);
  return kv;
}

PagedKVCache& kv_book(PolicyKV& kv) { return kv.cuda.book; }

// batch_invariant changes nothing here (rl/policy.h policy_forward_cached).
void forward(const Policy& policy, PolicyKV& cache, const std::vector<CachedInput>& inputs, PolicyLogits& logits,
             bool) {
  forward_cached_cuda(policy.cuda, cache.cuda, inputs, logits.cuda, false, device_lora(policy, "policy_forward_cached"));
}

std::vector<SampledToken> sample(const Policy& policy, PolicyLogits& logits, const std::vector<int64_t>& rows,
                                 const std::vector<SamplingRequest>& requests, int64_t vocab_limit) {
  const int64_t V = policy.config().vocab_size, known = std::min(vocab_limit, V);
  std::vector<SampledToken> out(requests.size());
  // The device sampler reads consecutive rows: gather them when requests share or skip rows.
  const int64_t n = static_cast<int64_t>(rows.size());
  const Tensor* source = &logits.cuda;
  Tensor gathered;
  bool identity = true;
  for (int64_t i = 0; i < n; ++i) identity = identity && rows[i] == i;
  Device dev = cuda_device(policy.cuda.device);
  if (!identity) {
    gathered = empty({n, V}, DType::F32, dev);
    for (int64_t i = 0; i < n; ++i)
      model_copy(gathered.data_as<float>() + i * V, logits.cuda.data_as<float>() + rows[i] * V, sizeof(float) * V,
                 CopyKind::DeviceToDevice, policy.cuda.stream);
    source = &gathered;
  }
  Tensor d_req = empty({static_cast<int64_t>(requests.size() * sizeof(SamplingRequest))}, DType::U8, dev);
  Tensor d_out = empty({static_cast<int64_t>(out.size() * sizeof(SampledToken))}, DType::U8, dev);
  Tensor d_ws = empty({static_cast<int64_t>(sample_tokens_cuda_workspace_bytes(n, known))}, DType::U8, dev);
  model_copy(d_req.data(), requests.data(), d_req.nbytes(), CopyKind::HostToDevice, policy.cuda.stream);
  // vocab = known, ld = V: the padded columns are skipped as the CPU path's -inf mask does.
  sample_tokens_cuda(static_cast<SampledToken*>(d_out.data()), source->data_as<float>(), n, known, V,
                     static_cast<const SamplingRequest*>(d_req.data()), d_ws.data(), d_ws.nbytes(),
                     policy.cuda.stream);
  model_copy(out.data(), d_out.data(), d_out.nbytes(), CopyKind::DeviceToHost, policy.cuda.stream);
  return out;
}

std::vector<GeneratedSample> generate_on(const Policy& policy, const std::vector<int32_t>& prompt, int64_t blocks,
                                         int64_t block_size, const GenerateOptions& options,
                                         const TokenCallback& on_token) {
  CudaKVCache cache = make_cuda_kv_cache(policy.cuda, blocks, block_size);
  return generate_cuda(policy.cuda, cache, prompt, 1, options, on_token, device_lora(policy, "policy_generate"));
}

PolicyActivations init_training(Policy& policy, const TrainOptions& options, const AdamWConfig& adamw) {
  PolicyActivations acts;
  acts.backend = policy.backend;
  acts.cuda = make_cuda_train_state(policy.cuda, options);
  if (CudaLora* lora = device_lora(policy, "policy_init_training")) {
    // Attached without gradients (or placed and since dropped): a buffer of its own.
    if (!lora->grads.defined()) {
      lora->grads = empty({lora->num_params}, DType::F32, cuda_device(lora->device));
      zero_lora_grads_cuda(*lora);
    }
    if (!policy.cuda_adamw.m.defined()) policy.cuda_adamw = make_cuda_adamw(*lora, adamw);
  } else {
    // Uploaded without gradients (cuda_policy_sharded, or grads false): a buffer of its own.
    if (!policy.cuda.grads.defined()) {
      policy.cuda.grads = empty({policy.cuda.num_params()}, DType::F32, cuda_device(policy.cuda.device));
      zero_grads(policy.cuda);
    }
    const auto [lo, hi] = policy_moment_range(policy);
    if (!policy.cuda_adamw.m.defined()) policy.cuda_adamw = make_cuda_adamw(policy.cuda, adamw, false, true, hi - lo);
  }
  return acts;
}

const TrainOptions& acts_options(const PolicyActivations& acts) { return acts.cuda.options; }

bool training_ready(const Policy& policy) {
  if (policy.lora) return policy.cuda_lora.grads.defined() && policy.cuda_adamw.m.defined();
  return policy.cuda.grads.defined() && policy.cuda_adamw.m.defined();
}

int64_t num_trainable(const Policy& policy) { return policy.lora ? policy.cuda_lora.num_params : policy.cuda.num_params(); }

TrainableBuffers trainable(Policy&) {
  fail("policy_trainable: the host buffers of a cuda policy are not the trained ones");
}

void forward_logprobs_on(const Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                         const std::vector<int32_t>& targets, const uint8_t*, float* logprobs, float* entropy,
                         float logit_scale) {
  // A mask saves nothing here: every row is computed.
  forward_logprobs_cuda(policy.cuda, acts.cuda, batch, targets, logprobs, entropy, logit_scale,
                        device_lora(policy, "policy_forward_logprobs"));
}

void backward_logprobs_on(Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                          const std::vector<int32_t>& targets, const float* dlogprobs, const float* dentropy,
                          const float*) {
  // The entropy is the device copy the forward kept.
  backward_logprobs_cuda(policy.cuda, acts.cuda, batch, targets, dlogprobs, dentropy,
                         device_lora(policy, "policy_backward_logprobs"));
}

void zero_grads_on(Policy& policy) {
  if (CudaLora* lora = device_lora(policy, "policy_zero_grads")) zero_lora_grads_cuda(*lora);
  else zero_grads(policy.cuda);
}

double grad_sq_sum(Policy& policy) {
  CudaLora* lora = device_lora(policy, "policy_grad_sq_sum");
  const double norm = lora ? grad_norm_cuda(*lora, policy.cuda_adamw) : grad_norm_cuda(policy.cuda, policy.cuda_adamw);
  return norm * norm;
}

void check_moment_dtype(const Policy& policy, const OptimizerState& optimizer) {
  check(policy.cuda_adamw.bf16_moments == optimizer.bf16, "adamw: the device moments are ",
        policy.cuda_adamw.bf16_moments ? "bf16" : "fp32", ", the optimizer state says ", optimizer.bf16 ? "bf16" : "fp32");
}

void adamw_step(Policy& policy, OptimizerState& optimizer, const AdamWConfig& config, float lr, float max_norm,
                double) {
  check_moment_dtype(policy, optimizer);
  policy.cuda_adamw.config = config;
  policy.cuda_adamw.step = optimizer.adam_step - 1;  // adamw_step_cuda advances it to adam_step
  // The squared norm is the device copy grad_sq_sum left (no second pass, no round trip).
  if (CudaLora* lora = device_lora(policy, "policy_adamw_step"))
    adamw_step_cuda(*lora, policy.cuda_adamw, lr, max_norm, /*sq_sum_ready=*/true);
  else
    adamw_step_cuda(policy.cuda, policy.cuda_adamw, lr, max_norm, /*sq_sum_ready=*/true);
}

void adamw_step_slice(Policy& policy, OptimizerState& optimizer, const float* grads, int64_t lo, int64_t hi,
                      const AdamWConfig& config, float lr, float max_norm, double grad_sq_sum) {
  check(!policy.lora, "adamw: a LoRA adapter on cuda trains whole (ZeRO 0)");
  check(policy_moment_range(policy) == std::pair<int64_t, int64_t>{lo, hi}, "adamw: the device moments cover [",
        policy_moment_range(policy).first, ", ", policy_moment_range(policy).second, "), not the slice [", lo, ", ",
        hi, ")");
  check_moment_dtype(policy, optimizer);
  CudaAdamW& opt = policy.cuda_adamw;
  opt.config = config;
  opt.step = optimizer.adam_step - 1;  // adamw_step_slice_cuda advances it to adam_step
  if (max_norm > 0.0f) set_grad_sq_sum_cuda(opt, grad_sq_sum, policy.cuda.stream);
  adamw_step_slice_cuda(policy.cuda, opt, grads, lo, hi, lr, max_norm);
}

void download(const Policy& policy, QwenModel& out) {
  if (const CudaLora* lora = device_lora(policy, "policy_download")) download_lora(*lora, *policy.lora);
  // A frozen base (a LoRA run's, or cuda_frozen_policy's) has no master: the host model it was
  // uploaded from is current.
  if (policy.cuda.master.defined()) return download_model(policy.cuda, out);
  if (&out != policy.host) out.params = policy.host->params;
}

// The host vectors that hold the device moments (bf16 bits or f32), as bytes.
std::pair<void*, void*> host_moments(OptimizerState& o, int64_t n) {
  if (o.bf16) {
    o.m16.resize(static_cast<size_t>(n)), o.v16.resize(static_cast<size_t>(n));
    return {o.m16.data(), o.v16.data()};
  }
  o.m.resize(static_cast<size_t>(n)), o.v.resize(static_cast<size_t>(n));
  return {o.m.data(), o.v.data()};
}

void download_optimizer(const Policy& policy, OptimizerState& out) {
  const CudaAdamW& opt = policy.cuda_adamw;
  check(opt.m.defined(), "policy: no device optimizer state to download");
  out.bf16 = opt.bf16_moments;
  auto [m, v] = host_moments(out, opt.m.numel());
  model_copy(m, opt.m.data(), opt.m.nbytes(), CopyKind::DeviceToHost, policy.cuda.stream);
  model_copy(v, opt.v.data(), opt.v.nbytes(), CopyKind::DeviceToHost, policy.cuda.stream);
}

void upload_optimizer(Policy& policy, const OptimizerState& in) {
  const auto [lo, hi] = policy_moment_range(policy);
  const int64_t n = hi - lo;
  CudaAdamW& opt = policy.cuda_adamw;
  check(opt.m.defined(), "policy: policy_init_training first (no device optimizer state)");
  check(in.bf16 == opt.bf16_moments, "policy: the optimizer state's moments are ", in.bf16 ? "bf16" : "fp32",
        ", the device's ", opt.bf16_moments ? "bf16" : "fp32");
  check(moments_size(in) == n && opt.m.numel() == n, "policy: optimizer state has ", moments_size(in),
        " moments, the device ", opt.m.numel(), ", for ", n, " parameters",
        lo > 0 || hi < num_trainable(policy) ? " (this rank's ZeRO slice)" : "");
  const void* m = in.bf16 ? static_cast<const void*>(in.m16.data()) : in.m.data();
  const void* v = in.bf16 ? static_cast<const void*>(in.v16.data()) : in.v.data();
  model_copy(opt.m.data(), m, opt.m.nbytes(), CopyKind::HostToDevice, policy.cuda.stream);
  model_copy(opt.v.data(), v, opt.v.nbytes(), CopyKind::HostToDevice, policy.cuda.stream);
}

// The bf16 copy every forward reads (the adapter's with one attached): what the trainers' own
// rollouts sample with, so a rollout rank given these bytes samples the same bits. In place: the
// decode graphs captured on these buffers stay valid.
const Tensor& rollout_tensor(const Policy& policy) {
  if (const CudaLora* lora = device_lora(policy, "rollout weights")) return lora->weights;
  check(policy.cuda.weights.defined(), "rollout weights: the policy has no device weights");
  return policy.cuda.weights;
}
int64_t rollout_weight_bytes(const Policy& policy) { return static_cast<int64_t>(rollout_tensor(policy).nbytes()); }
void read_rollout_weights(const Policy& policy, void* out) {
  const Tensor& w = rollout_tensor(policy);
  model_copy(out, w.data(), w.nbytes(), CopyKind::DeviceToHost, policy.cuda.stream);
}
void write_rollout_weights(Policy& policy, const void* in) {
  const Tensor& w = rollout_tensor(policy);
  model_copy(w.data(), in, w.nbytes(), CopyKind::HostToDevice, policy.cuda.stream);
}

int64_t memory_bytes(int device) { return static_cast<int64_t>(cuda_device_info(device).total_memory); }

const PolicyBackend& row() {
  static const PolicyBackend r{
      .name = "cuda",
      .help = "one GPU, bf16 weights; head_dim 64 or 128",
      .device = DeviceType::CUDA,
      .host_moments = false,
      .shard_gradients_apart = false,
      .host_blas = false,
      .device_collectives = true,
      .zero_shards_adapter = false,
      .memory_bytes = memory_bytes,
      .reserve_bytes = int64_t(2) << 30,  // the CUDA context and workspaces
      .check_usable = check_usable,
      .frozen = frozen,
      .training = training,
      .attach_lora = attach_lora,
      .base = base,
      .kv_block_bytes = kv_block_bytes,
      .make_kv = make_kv,
      .kv_book = kv_book,
      .forward_cached = forward,
      .sample = sample,
      .generate = generate_on,
      .init_training = init_training,
      .acts_options = acts_options,
      .training_ready = training_ready,
      .num_trainable = num_trainable,
      .trainable = trainable,
      .forward_logprobs = forward_logprobs_on,
      .backward_logprobs = backward_logprobs_on,
      .zero_grads = zero_grads_on,
      .grad_sq_sum = grad_sq_sum,
      .adamw_step = adamw_step,
      .adamw_step_slice = adamw_step_slice,
      .download = download,
      .download_optimizer = download_optimizer,
      .upload_optimizer = upload_optimizer,
      .rollout_weight_bytes = rollout_weight_bytes,
      .read_rollout_weights = read_rollout_weights,
      .write_rollout_weights = write_rollout_weights,
      .reduce_gradients = reduce_gradients,
      .gather_update = gather_update,
      .gather_download = gather_download,
      .start_memory = start_memory,
      .memory_to_rollout = memory_to_rollout,
      .memory_to_train = memory_to_train,
      .memory_optimizer_to_host = memory_optimizer_to_host,
      .live_modes = live_modes,
  };
  return r;
}

}  // namespace cuda_impl

const PolicyBackend& cuda_backend() { return cuda_impl::row(); }

}  // namespace sqlrl::rl
