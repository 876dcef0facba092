#include "rl/policy.h"

#include <algorithm>
#include <cmath>

#include "model/cuda_ops.h"
#include "kernels/attention.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl::rl {

Policy cpu_policy(QwenModel& model) {
  Policy p;
  p.host = &model;
  return p;
}

// Read-only users never reach a function that writes through `host`.
Policy cpu_policy(const QwenModel& model) { return cpu_policy(const_cast<QwenModel&>(model)); }

namespace {

void check_cuda_device(const QwenModel& host, int device) {
  check(cuda_device_count() > 0, "device cuda: ", cuda_unavailable_reason());
  check(cuda_device_count() > device, "device cuda: no CUDA device ", device, " (", cuda_device_count(), " present)");
  check(cuda_attention_takes_head_dim(host.config.head_dim), "device cuda: the model's head_dim is ",
        host.config.head_dim, "; the CUDA attention kernels take 64 or 128 (the embedded model: --tiny-head-dim 64)");
}

// The device adapter a CUDA model call takes: null without one (and on the CPU). Checked so that
// a `lora` set by hand on a CUDA policy (not uploaded) fails by name instead of the device
// forward silently running the base alone.
CudaLora* device_lora(Policy& policy, const char* who) {
  if (!policy.on_cuda || !policy.lora) return nullptr;
  check(policy.cuda_lora.weights.defined() && policy.cuda_lora.num_params == policy.lora->num_params, who,
        ": the policy's LoRA adapter is not on the device (attach it with policy_attach_lora)");
  return &policy.cuda_lora;
}
const CudaLora* device_lora(const Policy& policy, const char* who) {
  return device_lora(const_cast<Policy&>(policy), who);
}

}  // namespace

Policy cuda_policy(QwenModel& host, int device, bool grads) {
  check_cuda_device(host, device);
  Policy p;
  p.host = &host;
  p.on_cuda = true;
  p.cuda = upload_model(host, device, CudaStream{}, grads);
  return p;
}

Policy cuda_policy_sharded(QwenModel& host, int64_t lo, int64_t hi, int device) {
  check_cuda_device(host, device);
  Policy p;
  p.host = &host;
  p.on_cuda = true;
  p.cuda = upload_model_sliced(host, lo, hi, device);
  return p;
}

Policy cuda_frozen_policy(QwenModel& host, int device) {
  check_cuda_device(host, device);
  Policy p;
  p.host = &host;
  p.on_cuda = true;
  p.cuda = upload_frozen_model(host, device);  // bf16 weights only: never trained
  return p;
}

void policy_attach_lora(Policy& policy, LoraAdapter* adapter, bool grads) {
  policy.lora = adapter;
  policy.cuda_lora = CudaLora{};
  if (!policy.on_cuda) return;
  policy.cuda_adamw = CudaAdamW{};  // the moments of what trained before (the base or another adapter)
  if (adapter) policy.cuda_lora = upload_lora(*adapter, policy.cuda, grads);
}

Policy policy_base(const Policy& policy) {
  Policy p;
  p.host = policy.host;
  p.on_cuda = policy.on_cuda;
  if (policy.on_cuda) {
    // The same bf16 weights (Tensor copies share their storage), nothing trainable: the reference
    // never runs a backward or an optimizer step.
    p.cuda.shape = policy.cuda.shape;
    p.cuda.device = policy.cuda.device;
    p.cuda.stream = policy.cuda.stream;
    p.cuda.weights = policy.cuda.weights;
  }
  return p;
}

int64_t policy_kv_block_bytes(const Policy& policy, int64_t block_size) {
  const QwenConfig& c = policy.config();
  int64_t elem = policy.on_cuda ? 2 : static_cast<int64_t>(sizeof(float));
  return 2 * c.num_hidden_layers * block_size * c.kv_dim() * elem;
}

PolicyKV make_policy_kv(const Policy& policy, int64_t num_blocks, int64_t block_size, const Tensor* place_in) {
  PolicyKV kv;
  kv.on_cuda = policy.on_cuda;
  if (policy.on_cuda) kv.cuda = make_cuda_kv_cache(policy.cuda, num_blocks, block_size, place_in);
  else kv.host = make_kv_cache(policy.config(), num_blocks, block_size);
  return kv;
}

void policy_forward_cached(const Policy& policy, PolicyKV& cache, const std::vector<CachedInput>& inputs,
                           PolicyLogits& logits, bool batch_invariant) {
  check(cache.on_cuda == policy.on_cuda, "policy: the KV cache is on another device than the policy");
  if (policy.on_cuda)
    forward_cached_cuda(policy.cuda, cache.cuda, inputs, logits.cuda, false, device_lora(policy, "policy_forward_cached"));
  else forward_cached(*policy.host, cache.host, inputs, logits.host, false, policy.lora, batch_invariant);
}

std::vector<SampledToken> policy_sample(const Policy& policy, PolicyLogits& logits, const std::vector<int64_t>& rows,
                                        const std::vector<SamplingRequest>& requests, int64_t vocab_limit) {
  check(rows.size() == requests.size(), "policy_sample: ", rows.size(), " rows for ", requests.size(), " requests");
  const int64_t V = policy.config().vocab_size, known = std::min(vocab_limit, V);
  std::vector<SampledToken> out(requests.size());
  if (requests.empty()) return out;
  if (!policy.on_cuda) {
    for (size_t i = 0; i < requests.size(); ++i) {
      const float* row = logits.host.data() + rows[i] * V;
      if (known < V) {  // a padded vocabulary: ids the tokenizer cannot decode are never drawn
        logits.masked.assign(row, row + V);
        std::fill(logits.masked.begin() + known, logits.masked.end(), -INFINITY);
        row = logits.masked.data();
      }
      const SamplingRequest& r = requests[i];
      out[i] = sample_token_cpu(row, V, r.params, r.sequence_id, r.position, logits.scratch);
    }
    return out;
  }
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

PolicyActivations policy_init_training(Policy& policy, const TrainOptions& options, const AdamWConfig& adamw) {
  PolicyActivations acts;
  acts.on_cuda = policy.on_cuda;
  if (policy.on_cuda) {
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
  } else {
    if (policy.lora) {
      // The base stays frozen: no base gradients at all (a LoRA run's memory plan prices none).
      if (policy.lora->grads.size() != policy.lora->params.size()) alloc_lora_grads(*policy.lora);
    } else if (policy.host->grads.size() != policy.host->params.size()) {
      alloc_grads(*policy.host);
    }
    acts.host = make_train_state(policy.config(), options);
  }
  return acts;
}

bool policy_training_ready(const Policy& policy) {
  if (policy.on_cuda && policy.lora) return policy.cuda_lora.grads.defined() && policy.cuda_adamw.m.defined();
  if (policy.on_cuda) return policy.cuda.grads.defined() && policy.cuda_adamw.m.defined();
  if (policy.lora) return policy.lora->grads.size() == policy.lora->params.size();
  return policy.host->grads.size() == policy.host->params.size();
}

TrainableBuffers policy_trainable(Policy& policy) {
  check(!policy.on_cuda, "policy_trainable: the host buffers of a cuda policy are not the trained ones");
  if (policy.lora)
    return {policy.lora->params.data(), policy.lora->grads.empty() ? nullptr : policy.lora->grads.data(),
            policy.lora->num_params};
  QwenModel& m = *policy.host;
  return {m.params.data(), m.grads.empty() ? nullptr : m.grads.data(), m.num_params};
}

int64_t policy_num_trainable(const Policy& policy) {
  if (policy.on_cuda) return policy.lora ? policy.cuda_lora.num_params : policy.cuda.num_params();
  return policy.lora ? policy.lora->num_params : policy.host->num_params;
}

std::pair<int64_t, int64_t> policy_moment_range(const Policy& policy) {
  return {policy.moments_lo, policy.moments_hi < 0 ? policy_num_trainable(policy) : policy.moments_hi};
}

void policy_shard_moments(Policy& policy, int64_t lo, int64_t hi) {
  const int64_t n = policy_num_trainable(policy);
  check(0 <= lo && lo <= hi && hi <= n, "policy: moment slice [", lo, ", ", hi, ") of ", n, " parameters");
  check(!policy.on_cuda || !policy.lora || hi - lo == n, "policy: a LoRA adapter on cuda trains whole (ZeRO 0: its ",
        n, " parameters' state is small); --zero-stage shards a full fine-tuning run");
  check(!policy.cuda_adamw.m.defined(), "policy: policy_shard_moments after the device moments were made");
  policy.moments_lo = lo, policy.moments_hi = hi;
}

void policy_forward_logprobs(const Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                             const std::vector<int32_t>& targets, float* logprobs, float* entropy,
                             float logit_scale) {
  check(acts.on_cuda == policy.on_cuda, "policy: the activations are on another device than the model");
  if (policy.on_cuda)
    forward_logprobs_cuda(policy.cuda, acts.cuda, batch, targets, logprobs, entropy, logit_scale,
                          device_lora(policy, "policy_forward_logprobs"));
  else forward_logprobs(*policy.host, acts.host, batch, targets, logprobs, entropy, logit_scale, policy.lora);
}

void policy_forward_logprobs_masked(const Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                                    const std::vector<int32_t>& targets, const uint8_t* mask, float* logprobs) {
  check(acts.on_cuda == policy.on_cuda, "policy: the activations are on another device than the model");
  if (policy.on_cuda)
    forward_logprobs_cuda(policy.cuda, acts.cuda, batch, targets, logprobs, nullptr, 1.0f,
                          device_lora(policy, "policy_forward_logprobs_masked"));
  else forward_logprobs_masked(*policy.host, acts.host, batch, targets, mask, logprobs, policy.lora);
}

void policy_backward_logprobs(Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                              const std::vector<int32_t>& targets, const float* dlogprobs, const float* dentropy,
                              const float* entropy) {
  check(!dentropy || entropy, "policy backward: dentropy needs the entropy the forward returned");
  if (policy.on_cuda)
    backward_logprobs_cuda(policy.cuda, acts.cuda, batch, targets, dlogprobs, dentropy,
                           device_lora(policy, "policy_backward_logprobs"));
  else backward_logprobs(*policy.host, acts.host, batch, targets, dlogprobs, dentropy, entropy, policy.lora);
}

void policy_zero_grads(Policy& policy) {
  if (CudaLora* lora = device_lora(policy, "policy_zero_grads")) zero_lora_grads_cuda(*lora);
  else if (policy.on_cuda) zero_grads(policy.cuda);
  else if (policy.lora) zero_lora_grads(*policy.lora);
  else zero_grads(*policy.host);
}

double policy_grad_sq_sum(Policy& policy) {
  if (!policy.on_cuda) {
    const TrainableBuffers t = policy_trainable(policy);
    return grad_sq_sum_cpu(t.grads, t.n);
  }
  CudaLora* lora = device_lora(policy, "policy_grad_sq_sum");
  double norm = lora ? grad_norm_cuda(*lora, policy.cuda_adamw) : grad_norm_cuda(policy.cuda, policy.cuda_adamw);
  return norm * norm;
}

void policy_adamw_step_slice(Policy& policy, OptimizerState& optimizer, const float* grads, int64_t lo, int64_t hi,
                             const AdamWConfig& config, float lr, float max_norm, double grad_sq_sum) {
  if (policy.on_cuda) {
    check(!policy.lora, "adamw: a LoRA adapter on cuda trains whole (ZeRO 0)");
    check(policy_moment_range(policy) == std::pair<int64_t, int64_t>{lo, hi}, "adamw: the device moments cover [",
          policy_moment_range(policy).first, ", ", policy_moment_range(policy).second, "), not the slice [", lo, ", ",
          hi, ")");
    check(policy.cuda_adamw.bf16_moments == optimizer.bf16, "adamw: the device moments are ",
          policy.cuda_adamw.bf16_moments ? "bf16" : "fp32", ", the optimizer state says ",
          optimizer.bf16 ? "bf16" : "fp32");
    CudaAdamW& opt = policy.cuda_adamw;
    opt.config = config;
    opt.step = optimizer.adam_step - 1;  // adamw_step_slice_cuda advances it to adam_step
    if (max_norm > 0.0f) set_grad_sq_sum_cuda(opt, grad_sq_sum, policy.cuda.stream);
    adamw_step_slice_cuda(policy.cuda, opt, grads, lo, hi, lr, max_norm);
    return;
  }
  const TrainableBuffers t = policy_trainable(policy);
  check(lo >= 0 && lo <= hi && hi <= t.n, "adamw: slice [", lo, ", ", hi, ") of ", t.n, " parameters");
  check(moments_size(optimizer) == hi - lo, "adamw: optimizer state has ", moments_size(optimizer),
        " moments for the slice of ", hi - lo, " parameters");
  const float scale = clip_coefficient(grad_sq_sum, max_norm);
  if (optimizer.bf16)
    adamw_bf16_moments_cpu(t.params + lo, optimizer.m16.data(), optimizer.v16.data(), grads, hi - lo, config,
                           optimizer.adam_step, lr, scale, lo);
  else
    adamw_cpu(t.params + lo, optimizer.m.data(), optimizer.v.data(), grads, hi - lo, config, optimizer.adam_step, lr,
              scale);
}

void policy_adamw_step(Policy& policy, OptimizerState& optimizer, const AdamWConfig& config, float lr, float max_norm,
                       double grad_sq_sum) {
  if (!policy.on_cuda) {
    const TrainableBuffers t = policy_trainable(policy);
    check(moments_size(optimizer) == t.n, "adamw: optimizer state has ", moments_size(optimizer), " moments for ", t.n,
          policy.lora ? " adapter parameters" : " parameters");
    const float scale = clip_coefficient(grad_sq_sum, max_norm);
    if (optimizer.bf16)
      adamw_bf16_moments_cpu(t.params, optimizer.m16.data(), optimizer.v16.data(), t.grads, t.n, config,
                             optimizer.adam_step, lr, scale);
    else
      adamw_cpu(t.params, optimizer.m.data(), optimizer.v.data(), t.grads, t.n, config, optimizer.adam_step, lr, scale);
    return;
  }
  check(policy.cuda_adamw.bf16_moments == optimizer.bf16, "adamw: the device moments are ",
        policy.cuda_adamw.bf16_moments ? "bf16" : "fp32", ", the optimizer state says ", optimizer.bf16 ? "bf16" : "fp32");
  policy.cuda_adamw.config = config;
  policy.cuda_adamw.step = optimizer.adam_step - 1;  // adamw_step_cuda advances it to adam_step
  if (CudaLora* lora = device_lora(policy, "policy_adamw_step"))
    adamw_step_cuda(*lora, policy.cuda_adamw, lr, max_norm, /*sq_sum_ready=*/true);
  else
    adamw_step_cuda(policy.cuda, policy.cuda_adamw, lr, max_norm, /*sq_sum_ready=*/true);
}

void policy_download(const Policy& policy, QwenModel& out) {
  if (const CudaLora* lora = device_lora(policy, "policy_download")) download_lora(*lora, *policy.lora);
  // A frozen base (a LoRA run's, or cuda_frozen_policy's) has no master: the host model it was
  // uploaded from is current.
  if (policy.on_cuda && policy.cuda.master.defined()) return download_model(policy.cuda, out);
  if (&out != policy.host) out.params = policy.host->params;
}

namespace {

// The host vectors that hold the device moments of `policy` (bf16 bits or f32), as bytes.
std::pair<void*, void*> host_moments(OptimizerState& o, int64_t n) {
  if (o.bf16) {
    o.m16.resize(static_cast<size_t>(n)), o.v16.resize(static_cast<size_t>(n));
    return {o.m16.data(), o.v16.data()};
  }
  o.m.resize(static_cast<size_t>(n)), o.v.resize(static_cast<size_t>(n));
  return {o.m.data(), o.v.data()};
}

}  // namespace

void policy_download_optimizer(const Policy& policy, OptimizerState& out) {
  if (!policy.on_cuda) return;
  const CudaAdamW& opt = policy.cuda_adamw;
  check(opt.m.defined(), "policy: no device optimizer state to download");
  out.bf16 = opt.bf16_moments;
  auto [m, v] = host_moments(out, opt.m.numel());
  model_copy(m, opt.m.data(), opt.m.nbytes(), CopyKind::DeviceToHost, policy.cuda.stream);
  model_copy(v, opt.v.data(), opt.v.nbytes(), CopyKind::DeviceToHost, policy.cuda.stream);
}

void policy_upload_optimizer(Policy& policy, const OptimizerState& in) {
  if (!policy.on_cuda) return;
  const auto [lo, hi] = policy_moment_range(policy);
  const int64_t n = hi - lo;
  CudaAdamW& opt = policy.cuda_adamw;
  check(opt.m.defined(), "policy: policy_init_training first (no device optimizer state)");
  check(in.bf16 == opt.bf16_moments, "policy: the optimizer state's moments are ", in.bf16 ? "bf16" : "fp32",
        ", the device's ", opt.bf16_moments ? "bf16" : "fp32");
  check(moments_size(in) == n && opt.m.numel() == n, "policy: optimizer state has ", moments_size(in),
        " moments, the device ", opt.m.numel(), ", for ", n, " parameters", lo > 0 || hi < policy_num_trainable(policy)
        ? " (this rank's ZeRO slice)" : "");
  const void* m = in.bf16 ? static_cast<const void*>(in.m16.data()) : in.m.data();
  const void* v = in.bf16 ? static_cast<const void*>(in.v16.data()) : in.v.data();
  model_copy(opt.m.data(), m, opt.m.nbytes(), CopyKind::HostToDevice, policy.cuda.stream);
  model_copy(opt.v.data(), v, opt.v.nbytes(), CopyKind::HostToDevice, policy.cuda.stream);
}

}  // namespace sqlrl::rl
