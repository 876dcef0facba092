// The CPU row of rl/policy_backend.h: the host QwenModel (f32) trained in place with the
// model/ functions rollout and grpo called before there was a CUDA path (bit for bit the same),
// AdamW's moments in OptimizerState, every buffer allocated once at the start of a run, and
// --grad-accum shards summed in rank order (rl/data_parallel.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "rl/policy_backend.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl::rl {
namespace {

void check_usable(const std::string&, int64_t, const std::string&) {}  // the CPU runs any model

Policy frozen(QwenModel& model, int) { return cpu_policy(model); }

void attach_lora(Policy& policy, LoraAdapter* adapter, bool) { policy.lora = adapter; }

Policy training(QwenModel& model, const TrainingPolicySpec& spec) {
  Policy p = cpu_policy(model);
  attach_lora(p, spec.adapter, false);
  // The moments' slice is OptimizerState's size (grpo_step and sft check it): nothing to record.
  return p;
}

Policy base(const Policy& policy) { return cpu_policy(*policy.host); }

int64_t kv_block_bytes(const Policy& policy, int64_t block_size) {
  const QwenConfig& c = policy.config();
  return 2 * c.num_hidden_layers * block_size * c.kv_dim() * static_cast<int64_t>(sizeof(float));
}

PolicyKV make_kv(const Policy& policy, int64_t num_blocks, int64_t block_size, const Tensor*) {
  PolicyKV kv;
  kv.backend = policy.backend;
  kv.host = make_kv_cache(policy.config(), num_blocks, block_size);
  return kv;
}

PagedKVCache& kv_book(PolicyKV& kv) { return kv.host; }

void forward(const Policy& policy, PolicyKV& cache, const std::vector<CachedInput>& inputs, PolicyLogits& logits,
             bool batch_invariant) {
  forward_cached(*policy.host, cache.host, inputs, logits.host, false, policy.lora, batch_invariant);
}

std::vector<SampledToken> sample(const Policy& policy, PolicyLogits& logits, const std::vector<int64_t>& rows,
                                 const std::vector<SamplingRequest>& requests, int64_t vocab_limit) {
  const int64_t V = policy.config().vocab_size, known = std::min(vocab_limit, V);
  std::vector<SampledToken> out(requests.size());
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

std::vector<GeneratedSample> generate_on(const Policy& policy, const std::vector<int32_t>& prompt, int64_t blocks,
                                         int64_t block_size, const GenerateOptions& options,
                                         const TokenCallback& on_token) {
  PagedKVCache cache = make_kv_cache(policy.config(), blocks, block_size);
  return generate(*policy.host, cache, prompt, 1, options, on_token, policy.lora);
}

PolicyActivations init_training(Policy& policy, const TrainOptions& options, const AdamWConfig&) {
  if (policy.lora) {
    // The base stays frozen: no base gradients at all (a LoRA run's memory plan prices none).
    if (policy.lora->grads.size() != policy.lora->params.size()) alloc_lora_grads(*policy.lora);
  } else if (policy.host->grads.size() != policy.host->params.size()) {
    alloc_grads(*policy.host);
  }
  PolicyActivations acts;
  acts.backend = policy.backend;
  acts.host = make_train_state(policy.config(), options);
  return acts;
}

const TrainOptions& acts_options(const PolicyActivations& acts) { return acts.host.options; }

bool training_ready(const Policy& policy) {
  if (policy.lora) return policy.lora->grads.size() == policy.lora->params.size();
  return policy.host->grads.size() == policy.host->params.size();
}

int64_t num_trainable(const Policy& policy) { return policy.lora ? policy.lora->num_params : policy.host->num_params; }

TrainableBuffers trainable(Policy& policy) {
  if (policy.lora)
    return {policy.lora->params.data(), policy.lora->grads.empty() ? nullptr : policy.lora->grads.data(),
            policy.lora->num_params};
  QwenModel& m = *policy.host;
  return {m.params.data(), m.grads.empty() ? nullptr : m.grads.data(), m.num_params};
}

void forward_logprobs_on(const Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                         const std::vector<int32_t>& targets, const uint8_t* mask, float* logprobs, float* entropy,
                         float logit_scale) {
  // Masked: the rows outside the mask skip their vocabulary work (unspecified there).
  if (mask) forward_logprobs_masked(*policy.host, acts.host, batch, targets, mask, logprobs, policy.lora);
  else forward_logprobs(*policy.host, acts.host, batch, targets, logprobs, entropy, logit_scale, policy.lora);
}

void backward_logprobs_on(Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                          const std::vector<int32_t>& targets, const float* dlogprobs, const float* dentropy,
                          const float* entropy) {
  backward_logprobs(*policy.host, acts.host, batch, targets, dlogprobs, dentropy, entropy, policy.lora);
}

void zero_grads_on(Policy& policy) {
  if (policy.lora) zero_lora_grads(*policy.lora);
  else zero_grads(*policy.host);
}

double grad_sq_sum(Policy& policy) {
  const TrainableBuffers t = trainable(policy);
  return grad_sq_sum_cpu(t.grads, t.n);
}

// AdamW on parameters [lo, lo + n) from `grads` with the state's moments (all of them: a slice's).
void adamw_on(float* params, OptimizerState& optimizer, const float* grads, int64_t n, int64_t lo,
              const AdamWConfig& config, float lr, float max_norm, double grad_sq_sum) {
  const float scale = clip_coefficient(grad_sq_sum, max_norm);
  if (optimizer.bf16)
    adamw_bf16_moments_cpu(params, optimizer.m16.data(), optimizer.v16.data(), grads, n, config, optimizer.adam_step,
                           lr, scale, lo);
  else
    adamw_cpu(params, optimizer.m.data(), optimizer.v.data(), grads, n, config, optimizer.adam_step, lr, scale);
}

void adamw_step(Policy& policy, OptimizerState& optimizer, const AdamWConfig& config, float lr, float max_norm,
                double grad_sq_sum) {
  const TrainableBuffers t = trainable(policy);
  check(moments_size(optimizer) == t.n, "adamw: optimizer state has ", moments_size(optimizer), " moments for ", t.n,
        policy.lora ? " adapter parameters" : " parameters");
  adamw_on(t.params, optimizer, t.grads, t.n, 0, config, lr, max_norm, grad_sq_sum);
}

void adamw_step_slice(Policy& policy, OptimizerState& optimizer, const float* grads, int64_t lo, int64_t hi,
                      const AdamWConfig& config, float lr, float max_norm, double grad_sq_sum) {
  const TrainableBuffers t = trainable(policy);
  check(lo >= 0 && lo <= hi && hi <= t.n, "adamw: slice [", lo, ", ", hi, ") of ", t.n, " parameters");
  check(moments_size(optimizer) == hi - lo, "adamw: optimizer state has ", moments_size(optimizer),
        " moments for the slice of ", hi - lo, " parameters");
  adamw_on(t.params + lo, optimizer, grads, hi - lo, lo, config, lr, max_norm, grad_sq_sum);
}

void download(const Policy& policy, QwenModel& out) {
  if (&out != policy.host) out.params = policy.host->params;
}

// The f32 parameters the CPU forward reads: the adapter's with one attached, else the model's.
float* rollout_floats(const Policy& policy, int64_t& n) {
  if (policy.lora) return n = policy.lora->num_params, policy.lora->params.data();
  return n = policy.host->num_params, policy.host->params.data();
}
int64_t rollout_weight_bytes(const Policy& policy) {
  int64_t n = 0;
  rollout_floats(policy, n);
  return n * static_cast<int64_t>(sizeof(float));
}
void read_rollout_weights(const Policy& policy, void* out) {
  int64_t n = 0;
  const float* w = rollout_floats(policy, n);
  std::memcpy(out, w, static_cast<size_t>(n) * sizeof(float));
}
void write_rollout_weights(Policy& policy, const void* in) {
  int64_t n = 0;
  float* w = rollout_floats(policy, n);
  std::memcpy(w, in, static_cast<size_t>(n) * sizeof(float));
}

void download_optimizer(const Policy&, OptimizerState&) {}  // the moments are OptimizerState's own
void upload_optimizer(Policy&, const OptimizerState&) {}

double reduce_gradients(Policy& policy, const DataParallel& dp, const std::vector<std::vector<float>>& shard_grads,
                        std::vector<float>& slice_buffer, const float** own) {
  const TrainableBuffers t = trainable(policy);
  const int64_t n = t.n, R = dp.shards(), A = dp.grad_accum;
  float* grads = t.grads;
  if (R == 1) return grad_sq_sum_cpu(grads, n);
  // The norm's slices: one per shard, so that each lies within one rank's ZeRO slice.
  const std::vector<int64_t> bounds = shard_bounds(n, static_cast<int>(R));
  check(A == 1 || static_cast<int64_t>(shard_grads.size()) == A, "data parallel: ", shard_grads.size(),
        " shard gradients for ", A, " shards");
  std::vector<const float*> parts;
  if (A == 1) parts.push_back(grads);
  for (const auto& g : shard_grads) parts.push_back(g.data());
  std::vector<std::vector<double>> rows;
  auto norm_rows = [&](const float* reduced, int64_t first) {  // reduced: the buffer's element `first`
    for (int64_t a = 0; a < A; ++a) {
      const int64_t s = dp.rank() * A + a;
      rows.push_back({grad_sq_sum_cpu(reduced + bounds[s] - first, bounds[s + 1] - bounds[s])});
    }
  };
  if (!dp.distributed()) {
    add_in_rank_order(grads, parts, n);
    norm_rows(grads, 0);
    return sum_over_shards(dp, rows)[0];
  }
  const std::vector<int64_t> zero = zero_bounds(dp, n);
  const int64_t lo = zero[dp.rank()], count = zero[dp.rank() + 1] - lo;
  if (dp.zero_stage >= 2) {
    slice_buffer.resize(static_cast<size_t>(count));
    comm_reduce_scatter_sum(*dp.comm, parts, slice_buffer.data(), zero, dp.ordered);
    *own = slice_buffer.data();
  } else if (A == 1 && !dp.ordered) {
    comm_all_reduce_sum(*dp.comm, grads, n);
    *own = grads + lo;
  } else {  // the sum in shard order, every rank's slice into everyone's buffer
    comm_all_reduce_sum(*dp.comm, parts, grads, zero, dp.ordered);
    *own = grads + lo;
  }
  norm_rows(*own, lo);
  return sum_over_shards(dp, rows)[0];
}

void gather_update(Policy& policy, const DataParallel& dp, const std::vector<int64_t>& bounds) {
  comm_all_gather(*dp.comm, trainable(policy).params, bounds);
}

// The fp32 weights every forward reads are the whole master on every rank (ZeRO 3 runs as 2).
void gather_download(const Policy& policy, const DataParallel&, QwenModel& out) { download(policy, out); }

// Everything once, for the whole run: the gradients, the activations and the rollout's cache.
void start_memory(Policy& policy, TrainMemory& mem, const AdamWConfig& adamw, OptimizerState& optimizer) {
  // Data parallel with ZeRO 1-3: the rank's slice of them (grpo_step checks the exact size).
  const int64_t n = num_trainable(policy);
  check(moments_size(optimizer) > 0 && moments_size(optimizer) <= n, "memory plan: the optimizer state has ",
        moments_size(optimizer), " moments for ", n, " parameters");
  mem.acts = init_training(policy, mem.train, adamw);
  if (mem.plan.kv_blocks > 0) mem.kv = make_kv(policy, mem.plan.kv_blocks, mem.kv_block_size, nullptr);  // none for SFT
}

void memory_to_phase(Policy&, TrainMemory&, OptimizerState&) {}  // nothing takes turns
void memory_optimizer_to_host(const Policy&, const TrainMemory&, OptimizerState&) {}

TrainModes live_modes(const Policy& policy, const TrainMemory& mem, const OptimizerState& optimizer) {
  TrainModes m;
  const std::vector<bool>& recompute = mem.acts.host.options.recompute;
  m.recompute = recompute.empty() ? std::vector<bool>(static_cast<size_t>(policy.config().num_hidden_layers), false)
                                  : recompute;
  m.bf16_moments = optimizer.bf16;
  return m;
}

int64_t memory_bytes(int) { return host_memory_bytes(); }

const PolicyBackend& row() {
  static const PolicyBackend r{
      .name = "cpu",
      .help = "f32",
      .device = DeviceType::CPU,
      .host_moments = true,
      .shard_gradients_apart = true,
      .host_blas = true,
      .device_collectives = false,
      .zero_shards_adapter = true,
      .memory_bytes = memory_bytes,
      .reserve_bytes = int64_t(1) << 30,  // the process itself: code, tokenizer, data, SQLite
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
      .memory_to_rollout = memory_to_phase,
      .memory_to_train = memory_to_phase,
      .memory_optimizer_to_host = memory_optimizer_to_host,
      .live_modes = live_modes,
  };
  return r;
}

}  // namespace

const PolicyBackend& cpu_backend() { return row(); }

}  // namespace sqlrl::rl
