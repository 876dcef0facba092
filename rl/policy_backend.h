// The devices a policy runs on, as rows of one table (the manner of ggml's backend interface): each
// row implements the same calls for its device, and a Policy carries the row it was made with
// (`Policy::backend`). rl/policy.h's free functions, rl/data_parallel.h's reduction and
// rl/train_memory.h's phases call through the row, so nothing above the two implementations
// (rl/policy_cpu.cpp, rl/policy_cuda*.cpp) asks which device it is on. Callers plan around the
// named properties below (where the moments live, how shards' gradients add), not the device.
//
// A new device is one row: its calls in its own files, its line in policy_backends().
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/memory_plan.h"
#include "rl/data_parallel.h"
#include "rl/policy.h"
#include "rl/train_memory.h"

namespace sqlrl::rl {

struct PolicyBackend {
  const char* name;  // the --device value
  const char* help;  // its line in --device's help
  DeviceType device;
  // ---- what callers plan around
  // AdamW's moments live in OptimizerState's host vectors; false: on the device (start_train_memory
  // moves them there; the host keeps only the counters, and a checkpoint downloads them).
  bool host_moments;
  // Several local shards (--grad-accum) each keep their own gradient, summed in rank order after
  // (bit-identical to as many ranks); false: every shard's backward adds into one buffer.
  bool shard_gradients_apart;
  // The results' bits depend on the host BLAS core (runtime/blas_core.h): a resume checks it.
  bool host_blas;
  // Its ranks exchange device buffers: a job of several ranks needs the job's NCCL communicator or
  // host staging (runtime/comm.h comm_has_device_transport; app/launch.h join_job_gpu makes it).
  bool device_collectives;
  // ZeRO 1-3 shard a LoRA adapter's moments as a full model's; false: an adapter trains whole
  // (ZeRO 0: its state is small) and --zero-stage is for full fine-tuning only.
  bool zero_shards_adapter;
  // The memory plan's device, its size (device index) and what the plan holds back from it.
  int64_t (*memory_bytes)(int device);
  int64_t reserve_bytes;

  // ---- making a policy
  // Fails in one line, "<who>: --device <name>: ...", when the device cannot run a model of this
  // head_dim (0: not known yet; hint: how to get one it takes); nothing on the CPU.
  void (*check_usable)(const std::string& who, int64_t head_dim, const std::string& hint);
  // Inference only (eval, generate, rollouts outside training, the KL reference).
  Policy (*frozen)(QwenModel& model, int gpu);
  // The trainers' policy: gradients placed by start_train_memory, the spec's adapter attached.
  Policy (*training)(QwenModel& model, const TrainingPolicySpec& spec);
  void (*attach_lora)(Policy& policy, LoraAdapter* adapter, bool grads);
  Policy (*base)(const Policy& policy);

  // ---- inference
  int64_t (*kv_block_bytes)(const Policy& policy, int64_t block_size);
  PolicyKV (*make_kv)(const Policy& policy, int64_t num_blocks, int64_t block_size, const Tensor* place_in);
  PagedKVCache& (*kv_book)(PolicyKV& kv);
  void (*forward_cached)(const Policy& policy, PolicyKV& cache, const std::vector<CachedInput>& inputs,
                         PolicyLogits& logits, bool batch_invariant);
  std::vector<SampledToken> (*sample)(const Policy& policy, PolicyLogits& logits, const std::vector<int64_t>& rows,
                                      const std::vector<SamplingRequest>& requests, int64_t vocab_limit);
  std::vector<GeneratedSample> (*generate)(const Policy& policy, const std::vector<int32_t>& prompt, int64_t blocks,
                                           int64_t block_size, const GenerateOptions& options,
                                           const TokenCallback& on_token);

  // ---- training
  PolicyActivations (*init_training)(Policy& policy, const TrainOptions& options, const AdamWConfig& adamw);
  const TrainOptions& (*acts_options)(const PolicyActivations& acts);
  bool (*training_ready)(const Policy& policy);
  int64_t (*num_trainable)(const Policy& policy);
  TrainableBuffers (*trainable)(Policy& policy);
  // mask (nullable): only rows with mask[t] != 0 are needed.
  void (*forward_logprobs)(const Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                           const std::vector<int32_t>& targets, const uint8_t* mask, float* logprobs, float* entropy,
                           float logit_scale);
  void (*backward_logprobs)(Policy& policy, PolicyActivations& acts, const PackedBatch& batch,
                            const std::vector<int32_t>& targets, const float* dlogprobs, const float* dentropy,
                            const float* entropy);
  void (*zero_grads)(Policy& policy);
  double (*grad_sq_sum)(Policy& policy);
  void (*adamw_step)(Policy& policy, OptimizerState& optimizer, const AdamWConfig& config, float lr, float max_norm,
                     double grad_sq_sum);
  void (*adamw_step_slice)(Policy& policy, OptimizerState& optimizer, const float* grads, int64_t lo, int64_t hi,
                           const AdamWConfig& config, float lr, float max_norm, double grad_sq_sum);

  // ---- checkpoints
  void (*download)(const Policy& policy, QwenModel& out);
  void (*download_optimizer)(const Policy& policy, OptimizerState& out);
  void (*upload_optimizer)(Policy& policy, const OptimizerState& in);

  // ---- rollout ranks (rl/grpo/rollout_ranks.h): the weights every rollout forward reads, as the
  // bytes the trainers send after each update (CPU: the f32 host parameters; CUDA: the bf16 device
  // copy, so the rollout ranks sample with the bits the trainers' own rollouts would use); an
  // attached adapter's alone (the base never changes).
  int64_t (*rollout_weight_bytes)(const Policy& policy);
  void (*read_rollout_weights)(const Policy& policy, void* out);
  void (*write_rollout_weights)(Policy& policy, const void* in);

  // ---- data parallel (rl/data_parallel.h)
  double (*reduce_gradients)(Policy& policy, const DataParallel& dp, const std::vector<std::vector<float>>& shard_grads,
                             std::vector<float>& slice_buffer, const float** own);
  // After a ZeRO 1-3 update of this rank's slice: every rank's updated slice to every rank.
  void (*gather_update)(Policy& policy, const DataParallel& dp, const std::vector<int64_t>& bounds);
  void (*gather_download)(const Policy& policy, const DataParallel& dp, QwenModel& out);

  // ---- the memory plan's phases (rl/train_memory.h)
  void (*start_memory)(Policy& policy, TrainMemory& memory, const AdamWConfig& adamw, OptimizerState& optimizer);
  void (*memory_to_rollout)(Policy& policy, TrainMemory& memory, OptimizerState& optimizer);
  void (*memory_to_train)(Policy& policy, TrainMemory& memory, OptimizerState& optimizer);
  void (*memory_optimizer_to_host)(const Policy& policy, const TrainMemory& memory, OptimizerState& optimizer);
  // The modes the live buffers show (activations' recompute, moments' dtype and place).
  TrainModes (*live_modes)(const Policy& policy, const TrainMemory& memory, const OptimizerState& optimizer);
};

// The rows, CPU first (the default device).
const std::vector<const PolicyBackend*>& policy_backends();

}  // namespace sqlrl::rl
