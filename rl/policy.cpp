// rl/policy.h's calls, each through the row of rl/policy_backend.h the policy was made with, and
// the table of rows.
#include "rl/policy.h"

#include "rl/policy_backend.h"
#include "runtime/error.h"

namespace sqlrl::rl {

const std::vector<const PolicyBackend*>& policy_backends() {
  static const std::vector<const PolicyBackend*> rows{&cpu_backend(), &cuda_backend()};
  return rows;
}

const PolicyBackend& find_backend(const std::string& name) {
  const std::vector<const PolicyBackend*>& rows = policy_backends();
  std::string names;  // "cpu or cuda"
  for (size_t i = 0; i < rows.size(); ++i) {
    if (name == rows[i]->name) return *rows[i];
    names += str_cat(i == 0 ? "" : i + 1 == rows.size() ? " or " : ", ", rows[i]->name);
  }
  fail("device '", name, "' is not ", names);
}

const PolicyBackend& policy_backend(DeviceType device) {
  for (const PolicyBackend* b : policy_backends())
    if (b->device == device) return *b;
  fail("device: no backend for device type ", static_cast<int>(device));
}

DeviceType parse_device_type(const std::string& name) { return find_backend(name).device; }
const char* device_type_name(DeviceType device) { return policy_backend(device).name; }

std::string backend_help() {
  std::string help;
  for (const PolicyBackend* b : policy_backends()) help += str_cat(help.empty() ? "" : " | ", b->name, " (", b->help, ")");
  return help;
}

void check_backend_usable(const PolicyBackend& backend, const std::string& who, int64_t head_dim,
                          const std::string& hint) {
  backend.check_usable(who, head_dim, hint);
}

OptimizerState fresh_optimizer_state(const PolicyBackend& backend, int64_t moments, bool bf16) {
  if (backend.host_moments) return make_optimizer_state(moments, bf16);
  OptimizerState o;  // the device's moments come with start_train_memory
  o.bf16 = bf16;
  return o;
}

DeviceType policy_device(const Policy& policy) { return policy.backend->device; }

Policy frozen_policy(const PolicyBackend& backend, QwenModel& model, int gpu) { return backend.frozen(model, gpu); }

Policy training_policy(const PolicyBackend& backend, QwenModel& model, const TrainingPolicySpec& spec) {
  return backend.training(model, spec);
}

Policy cpu_policy(QwenModel& model) {
  Policy p;
  p.host = &model;
  return p;
}

// Read-only users never reach a function that writes through `host`.
Policy cpu_policy(const QwenModel& model) { return cpu_policy(const_cast<QwenModel&>(model)); }

void policy_attach_lora(Policy& policy, LoraAdapter* adapter, bool grads) {
  policy.backend->attach_lora(policy, adapter, grads);
}

Policy policy_base(const Policy& policy) { return policy.backend->base(policy); }

PagedKVCache& PolicyKV::book() { return backend->kv_book(*this); }
const PagedKVCache& PolicyKV::book() const { return backend->kv_book(const_cast<PolicyKV&>(*this)); }

int64_t policy_kv_block_bytes(const Policy& policy, int64_t block_size) {
  return policy.backend->kv_block_bytes(policy, block_size);
}

PolicyKV make_policy_kv(const Policy& policy, int64_t num_blocks, int64_t block_size, const Tensor* place_in) {
  return policy.backend->make_kv(policy, num_blocks, block_size, place_in);
}

void policy_forward_cached(const Policy& policy, PolicyKV& cache, const std::vector<CachedInput>& inputs,
                           PolicyLogits& logits, bool batch_invariant) {
  check(cache.backend == policy.backend, "policy: the KV cache is on ", cache.backend->name, ", the policy on ",
        policy.backend->name);
  policy.backend->forward_cached(policy, cache, inputs, logits, batch_invariant);
}

std::vector<SampledToken> policy_sample(const Policy& policy, PolicyLogits& logits, const std::vector<int64_t>& rows,
                                        const std::vector<SamplingRequest>& requests, int64_t vocab_limit) {
  check(rows.size() == requests.size(), "policy_sample: ", rows.size(), " rows for ", requests.size(), " requests");
  if (requests.empty()) return {};
  return policy.backend->sample(policy, logits, rows, requests, vocab_limit);
}

std::vector<GeneratedSample> policy_generate(const Policy& policy, const std::vector<int32_t>& prompt, int64_t blocks,
                                             int64_t block_size, const GenerateOptions& options,
                                             const TokenCallback& on_token) {
  return policy.backend->generate(policy, prompt, blocks, block_size, options, on_token);
}

const TrainOptions& PolicyActivations::options() const { return backend->acts_options(*this); }

PolicyActivations policy_init_training(Policy& policy, const TrainOptions& options, const AdamWConfig& adamw) {
  return policy.backend->init_training(policy, options, adamw);
}

bool policy_training_ready(const Policy& policy) { return policy.backend->training_ready(policy); }
TrainableBuffers policy_trainable(Policy& policy) { return policy.backend->trainable(policy); }
int64_t policy_num_trainable(const Policy& policy) { return policy.backend->num_trainable(policy); }

std::pair<int64_t, int64_t> policy_moment_range(const Policy& policy) {
  return {policy.moments_lo, policy.moments_hi < 0 ? policy_num_trainable(policy) : policy.moments_hi};
}

void policy_shard_moments(Policy& policy, int64_t lo, int64_t hi) {
  const int64_t n = policy_num_trainable(policy);
  check(0 <= lo && lo <= hi && hi <= n, "policy: moment slice [", lo, ", ", hi, ") of ", n, " parameters");
  check(policy.backend->zero_shards_adapter || !policy.lora || hi - lo == n, "policy: a LoRA adapter on ",
        policy.backend->name, " trains whole (ZeRO 0: its ", n,
        " parameters' state is small); --zero-stage shards a full fine-tuning run");
  check(!policy.cuda_adamw.m.defined(), "policy: policy_shard_moments after the device moments were made");
  policy.moments_lo = lo, policy.moments_hi = hi;
}

namespace {

void check_same_device(const Policy& policy, const PolicyActivations& acts) {
  check(acts.backend == policy.backend, "policy: the activations are on ", acts.backend->name, ", the model on ",
        policy.backend->name);
}

}  // namespace

void policy_forward_logprobs(const Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                             const std::vector<int32_t>& targets, float* logprobs, float* entropy,
                             float logit_scale) {
  check_same_device(policy, acts);
  policy.backend->forward_logprobs(policy, acts, batch, targets, nullptr, logprobs, entropy, logit_scale);
}

void policy_forward_logprobs_masked(const Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                                    const std::vector<int32_t>& targets, const uint8_t* mask, float* logprobs) {
  check_same_device(policy, acts);
  policy.backend->forward_logprobs(policy, acts, batch, targets, mask, logprobs, nullptr, 1.0f);
}

void policy_backward_logprobs(Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                              const std::vector<int32_t>& targets, const float* dlogprobs, const float* dentropy,
                              const float* entropy) {
  check(!dentropy || entropy, "policy backward: dentropy needs the entropy the forward returned");
  check_same_device(policy, acts);
  policy.backend->backward_logprobs(policy, acts, batch, targets, dlogprobs, dentropy, entropy);
}

void policy_zero_grads(Policy& policy) { policy.backend->zero_grads(policy); }
double policy_grad_sq_sum(Policy& policy) { return policy.backend->grad_sq_sum(policy); }

void policy_adamw_step(Policy& policy, OptimizerState& optimizer, const AdamWConfig& config, float lr, float max_norm,
                       double grad_sq_sum) {
  policy.backend->adamw_step(policy, optimizer, config, lr, max_norm, grad_sq_sum);
}

void policy_adamw_step_slice(Policy& policy, OptimizerState& optimizer, const float* grads, int64_t lo, int64_t hi,
                             const AdamWConfig& config, float lr, float max_norm, double grad_sq_sum) {
  policy.backend->adamw_step_slice(policy, optimizer, grads, lo, hi, config, lr, max_norm, grad_sq_sum);
}

int64_t policy_rollout_weight_bytes(const Policy& policy) { return policy.backend->rollout_weight_bytes(policy); }
void policy_read_rollout_weights(const Policy& policy, void* out) { policy.backend->read_rollout_weights(policy, out); }
void policy_write_rollout_weights(Policy& policy, const void* in) { policy.backend->write_rollout_weights(policy, in); }

void policy_download(const Policy& policy, QwenModel& out) { policy.backend->download(policy, out); }
void policy_download_optimizer(const Policy& policy, OptimizerState& out) {
  policy.backend->download_optimizer(policy, out);
}
void policy_upload_optimizer(Policy& policy, const OptimizerState& in) { policy.backend->upload_optimizer(policy, in); }

}  // namespace sqlrl::rl
