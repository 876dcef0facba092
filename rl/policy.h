// The policy as rollout(), grpo_step() and run_eval() see it: the host QwenModel (CPU, f32) or a
// CudaModel (bf16 weights, f32 master and gradients, AdamW moments on the device) behind the
// same few free functions, so the engine and the trainer are one code path on either device.
// A plain struct with both halves; `backend`, the row of rl/policy_backend.h it was made with,
// implements every call for its device (rl/policy_cpu.cpp: the CPU's model/ functions, bit for
// bit what rollout and grpo called before; rl/policy_cuda*.cpp: model/cuda_model.h's). The
// functions below dispatch through it: chosen once, when the policy is made.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/sampling.h"
#include "model/cuda_lora.h"
#include "model/cuda_model.h"
#include "model/infer.h"
#include "model/kv_cache.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/train.h"
#include "rl/optimizer.h"
#include "runtime/device.h"

namespace sqlrl::rl {

// ---- the devices (rows of rl/policy_backend.h)
struct PolicyBackend;
const PolicyBackend& cpu_backend();
const PolicyBackend& cuda_backend();
// The row of a --device value; an unknown name fails listing the rows.
const PolicyBackend& find_backend(const std::string& name);
const PolicyBackend& policy_backend(DeviceType device);
DeviceType parse_device_type(const std::string& name);  // find_backend(name)'s device
const char* device_type_name(DeviceType device);         // its row's name: "cpu", "cuda"
std::string backend_help();  // --device's help: each row's name and line
// One line naming what is missing when `backend` cannot run a model of this head_dim (0: not
// known yet), "<who>: --device cuda: ..." (who "": "device cuda: ..."); nothing on the CPU.
// hint: how to get a head_dim it takes, or which model it is.
void check_backend_usable(const PolicyBackend& backend, const std::string& who, int64_t head_dim = 0,
                          const std::string& hint = "");
// A fresh optimizer state for `moments` trainable parameters: zero host moments where the backend
// keeps them on the host, else the counters alone (start_train_memory makes the device's).
OptimizerState fresh_optimizer_state(const PolicyBackend& backend, int64_t moments, bool bf16 = false);

struct Policy {
  // CPU: the model itself (trained in place). CUDA: the shape, and the staging buffer that
  // policy_download fills for checkpoints. Never owned. Read-only users (rollout, eval) take a
  // const Policy&.
  QwenModel* host = nullptr;
  const PolicyBackend* backend = &cpu_backend();  // the device: every call below goes through it
  CudaModel cuda;       // CUDA: weights, master, grads
  CudaAdamW cuda_adamw;  // CUDA, after policy_init_training: m, v (OptimizerState's m/v stay empty)
  // Never owned: a LoRA adapter every forward applies unmerged (model/lora.h); null: the model
  // alone. With one, training updates the adapter alone: the gradients, their norm and
  // all-reduce, AdamW and its ZeRO slices act on the adapter's buffers (policy_trainable) and the
  // base model stays frozen, bit for bit. On CUDA set it with policy_attach_lora, which uploads it
  // into cuda_lora; then `lora` is the host copy policy_download refreshes for checkpoints.
  LoraAdapter* lora = nullptr;
  // CUDA with lora: the adapter on the device (master, bf16 copy, grads; model/cuda_lora.h),
  // passed to every CUDA model call. cuda_adamw then holds the adapter's moments, not the base's.
  CudaLora cuda_lora;
  // ZeRO 1-3 over several ranks (rl/data_parallel.h): the trainable parameters whose AdamW moments
  // this rank keeps on the device, [moments_lo, moments_hi); -1: all of them. Set before
  // start_train_memory (policy_shard_moments); the CPU keeps its moments in OptimizerState.
  int64_t moments_lo = 0, moments_hi = -1;
  const QwenConfig& config() const { return host->config; }
};
DeviceType policy_device(const Policy& policy);

// The backend's policies for a model: inference only (eval, generate, rollouts outside training,
// a KL reference), and a trainer's (its adapter attached, its ZeRO slice; the gradients left for
// start_train_memory to place).
Policy frozen_policy(const PolicyBackend& backend, QwenModel& model, int gpu = 0);
struct TrainingPolicySpec {
  LoraAdapter* adapter = nullptr;       // trained on the frozen model; null: the whole model trains
  int64_t slice_lo = 0, slice_hi = -1;  // ZeRO 1-3: this rank's moments cover [lo, hi); -1: all
  bool shard_master = false;            // ZeRO 3 over several ranks: the slice's fp32 master only (CUDA)
  int gpu = 0;                          // the device index (CUDA)
};
Policy training_policy(const PolicyBackend& backend, QwenModel& model, const TrainingPolicySpec& spec);

// Wraps a host model (no copy). The const overload is for read-only use (rollout, eval).
Policy cpu_policy(QwenModel& model);
Policy cpu_policy(const QwenModel& model);
// Uploads `host` to CUDA device `device` (master = params exactly, weights rounded to bf16).
// Fails with one line naming the device when there is none, or when the model's head_dim is
// not one the CUDA attention takes (64, 128).
// grads false: no gradient buffer (the trainer places one in its phase region, rl/train_memory.h).
Policy cuda_policy(QwenModel& host, int device = 0, bool grads = true);
// ZeRO 3 on CUDA: every bf16 weight, but the fp32 master of trainable parameters [lo, hi) only
// (model/cuda_model.h upload_model_sliced); no gradient buffer (the trainer places one).
Policy cuda_policy_sharded(QwenModel& host, int64_t lo, int64_t hi, int device = 0);
// A frozen copy: only the bf16 weights on the device (2 bytes/parameter; no fp32 master, no
// gradients): the KL reference, and every inference-only use (eval, generate, the demo's and
// self-taught's rollouts), where the master and gradient buffers would take 8 bytes/parameter
// for nothing.
Policy cuda_frozen_policy(QwenModel& host, int device = 0);
// Sets policy.lora = adapter (null: none). On CUDA it also uploads the adapter next to the base
// (upload_lora: same device and stream; grads false: no gradient buffer, the trainer places one in
// its phase region) and drops any device moments (they were the previous trainable buffer's).
// A LoRA run on CUDA uploads the base with cuda_frozen_policy (bf16 weights only) and then
// attaches: the base is never trained, so it needs no master and no gradients.
void policy_attach_lora(Policy& policy, LoraAdapter* adapter, bool grads = true);
// The base alone, sharing the policy's device weights (no second upload) or its host model: a
// LoRA run's KL reference (the base with the adapter off). Read-only use only: it holds no
// master, gradients or moments.
Policy policy_base(const Policy& policy);

// ---- inference: a paged KV cache on the policy's device and one batched forward ----
struct PolicyKV {
  PagedKVCache host;  // CPU cache (f32)
  CudaKVCache cuda;   // CUDA: bookkeeping in cuda.book, K/V bf16 on the device
  const PolicyBackend* backend = &cpu_backend();
  PagedKVCache& book();  // the block tables and lengths, on either device
  const PagedKVCache& book() const;
};
// Bytes one cache block takes on the policy's device (f32 on the CPU, bf16 on CUDA).
int64_t policy_kv_block_bytes(const Policy& policy, int64_t block_size);
// place_in (CUDA, nullable): the device region to place K and V in (make_cuda_kv_cache).
PolicyKV make_policy_kv(const Policy& policy, int64_t num_blocks, int64_t block_size, const Tensor* place_in = nullptr);

// Logits of the last forward (host vector or device tensor) and the CPU sampler's buffers.
struct PolicyLogits {
  std::vector<float> host;
  Tensor cuda;
  SamplingScratch scratch;
  std::vector<float> masked;  // a row with the padded ids set to -inf (CPU)
};
// forward_cached / forward_cached_cuda: one logits row per input (its last new token).
// batch_invariant: forward_cached's (a token's bits independent of what else the call carries;
// the CPU only). On CUDA it changes nothing and the bits depend on the batch: cuBLASLt picks its
// algorithm (tiling, split-K, and so the order of each row's sums) by the GEMM's shape, M
// included. Making the CUDA path batch-invariant would take GEMMs run with one fixed algorithm
// and no split-K whatever M (the paged attention already cuts a query's context by
// kPagedSplitTokens, a function of its length alone, and bf16 K/V rounding is per element).
void policy_forward_cached(const Policy& policy, PolicyKV& cache, const std::vector<CachedInput>& inputs,
                           PolicyLogits& logits, bool batch_invariant = false);
// One token per request, request i drawn from logits row rows[i]; ids >= vocab_limit are never
// drawn (a padded vocabulary). CPU: sample_token_cpu row by row; CUDA: sample_tokens_cuda.
std::vector<SampledToken> policy_sample(const Policy& policy, PolicyLogits& logits, const std::vector<int64_t>& rows,
                                        const std::vector<SamplingRequest>& requests, int64_t vocab_limit);
// Generates from one prompt as model/infer.h generate() does, on the policy's device, with a KV
// cache of its own of `blocks` blocks of block_size tokens (`llm_sqlrl generate`).
std::vector<GeneratedSample> policy_generate(const Policy& policy, const std::vector<int32_t>& prompt, int64_t blocks,
                                             int64_t block_size, const GenerateOptions& options,
                                             const TokenCallback& on_token = {});

// ---- training ----
// The host buffers training updates: a LoRA adapter's A and B (params, grads) when one is
// attached, else the whole model's. Gradient reduction, the norm, AdamW and checkpoints' optimizer
// moments all run over this one buffer. CPU only (grads empty until policy_init_training); on
// CUDA the same roles are the device buffers (cuda.* or, with an adapter, cuda_lora.*).
struct TrainableBuffers {
  float* params = nullptr;
  float* grads = nullptr;
  int64_t n = 0;
};
TrainableBuffers policy_trainable(Policy& policy);
// The number of parameters training updates (the adapter's or the model's), on either device.
int64_t policy_num_trainable(const Policy& policy);
// The device moments' range: [moments_lo, moments_hi), all trainable parameters by default.
std::pair<int64_t, int64_t> policy_moment_range(const Policy& policy);
// CUDA ZeRO 1-3: the device keeps the moments of [lo, hi) only (before start_train_memory).
void policy_shard_moments(Policy& policy, int64_t lo, int64_t hi);
// Activations for micro-batches of up to max_tokens positions (shared by policy and reference).
struct PolicyActivations {
  TrainState host;
  CudaTrainState cuda;
  const PolicyBackend* backend = &cpu_backend();
  const TrainOptions& options() const;  // what they were made for, on either device
  int64_t max_tokens() const { return options().max_tokens; }
};
// Allocates the gradients (CPU: alloc_grads, or the adapter's alloc_lora_grads; CUDA: a buffer
// of its own when the upload made none) and, on CUDA, the AdamW moments (zero) of the trainable
// buffer (of its moment range); returns the activation plan for `options`.
PolicyActivations policy_init_training(Policy& policy, const TrainOptions& options, const AdamWConfig& adamw);
bool policy_training_ready(const Policy& policy);  // gradients (and device moments) allocated

// logit_scale: as forward_logprobs (1 / the sampling temperature for the policy that sampled).
void policy_forward_logprobs(const Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                             const std::vector<int32_t>& targets, float* logprobs, float* entropy = nullptr,
                             float logit_scale = 1.0f);
// Only rows with mask[t] != 0 are needed (the others are unspecified): the CPU skips their
// vocabulary work (forward_logprobs_masked); CUDA computes every row.
void policy_forward_logprobs_masked(const Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                                    const std::vector<int32_t>& targets, const uint8_t* mask, float* logprobs);
// dentropy (nullable): also adds d(sum_t dentropy[t] entropy_t)/d(param); then the last forward
// must have computed the entropy, and `entropy` is what it returned (the CPU reads it; CUDA
// uses its own device copy of it).
void policy_backward_logprobs(Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                              const std::vector<int32_t>& targets, const float* dlogprobs,
                              const float* dentropy = nullptr, const float* entropy = nullptr);
void policy_zero_grads(Policy& policy);
double policy_grad_sq_sum(Policy& policy);
// One AdamW update with adam step optimizer.adam_step (already advanced by the caller), the
// gradients scaled by clip_coefficient(grad_sq_sum, max_norm). grad_sq_sum must be what
// policy_grad_sq_sum returned for these gradients: CUDA uses the device copy it left (no second
// pass over the gradients, no round trip). CPU: optimizer.m/v; CUDA: the device moments.
void policy_adamw_step(Policy& policy, OptimizerState& optimizer, const AdamWConfig& config, float lr, float max_norm,
                       double grad_sq_sum);

// ZeRO (rl/grpo/grpo.h DataParallel): the update of parameters [lo, hi) only, from `grads` (the
// slice's gradient, grads[0] for parameter lo) and the optimizer's moments of that slice
// (optimizer.m/v hold hi - lo elements). The same per-element arithmetic as policy_adamw_step.
// CUDA: `grads` is a device pointer, the device moments are the slice's (policy_shard_moments),
// and grad_sq_sum (the whole gradient's, summed over ranks) is written to the device for the clip.
// A LoRA adapter on CUDA trains whole (ZeRO 0: its state is small).
void policy_adamw_step_slice(Policy& policy, OptimizerState& optimizer, const float* grads, int64_t lo, int64_t hi,
                             const AdamWConfig& config, float lr, float max_norm, double grad_sq_sum);

// ---- rollout ranks: the weights a rollout reads, as bytes (rl/policy_backend.h) ----
int64_t policy_rollout_weight_bytes(const Policy& policy);
// Into `out` (host, policy_rollout_weight_bytes of it), after the work queued on the policy.
void policy_read_rollout_weights(const Policy& policy, void* out);
// From `in` (host, as policy_read_rollout_weights wrote it on a policy of the same model): the
// next rollout forward runs on them. Sizes are the caller's to agree on (the bytes travel).
void policy_write_rollout_weights(Policy& policy, const void* in);

// ---- checkpoints: master weights and moments to the host and back ----
// CPU: copies params when out is another model. CUDA: the master into `out`; with an adapter the
// adapter's master into *policy.lora instead (the frozen base has no master: the host copy is
// current, copied into out when out is another model).
void policy_download(const Policy& policy, QwenModel& out);
// CUDA: m, v (the trainable buffer's: the adapter's with one; the moment range's) into out / from in.
void policy_download_optimizer(const Policy& policy, OptimizerState& out);
void policy_upload_optimizer(Policy& policy, const OptimizerState& in);

}  // namespace sqlrl::rl
