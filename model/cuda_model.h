// The Qwen model on one CUDA device, mirroring the CPU model (model/model.h, train.h, infer.h)
// layer for layer: bf16 weights for every forward and backward GEMM, fp32 master weights for the
// optimizer, fp32 gradients, each ONE contiguous buffer with the CPU model's table of views (the
// layout model/memory_plan.h prices). Activations are bf16 with fp32 RMSNorm rstd and attention
// log-sum-exp, planned once for max_tokens. Everything runs on one stream in order; the calls
// taking host vectors copy them in and out (and so synchronise). Built without CUDA (or run
// without a device) every entry point fails with the reason, from the kernel launchers or the
// device allocator.
//
// Kernel limits that bind the model (kernels/*.h): head_dim 64 or 128 (flash and paged
// attention), hidden_size <= 8192 (RMSNorm).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/sampling.h"
#include "model/infer.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/train.h"
#include "runtime/stream.h"
#include "runtime/tensor.h"

namespace sqlrl {

struct CudaLora;  // model/cuda_lora.h

struct CudaModel {
  QwenModel shape;  // config + table of views; params and grads stay empty on the host
  int device = 0;
  CudaStream stream;  // every launch of this model goes here (default: the legacy stream)
  Tensor weights;     // bf16 [num_params]: the copy every matmul reads
  Tensor master;      // f32: what AdamW updates; parameters [master_first, master_first + master.numel())
  int64_t master_first = 0;  // 0 with a whole master; a ZeRO-3 rank's slice starts elsewhere
  Tensor grads;       // f32 [num_params], zeroed on upload; backward adds into it
  const QwenConfig& config() const { return shape.config; }
  int64_t num_params() const { return shape.num_params; }
};

// Uploads a host model: master = params (f32, exact), weights = params rounded to bf16, and
// (grads) a zeroed gradient buffer; without, the caller places one (rl/train_memory.h).
CudaModel upload_model(const QwenModel& model, int device = 0, const CudaStream& stream = CudaStream{},
                       bool grads = true);
// A frozen copy (the KL reference): only the bf16 weights go to the device (2 bytes/parameter;
// no master, no gradients), rounded on the host slice by slice.
CudaModel upload_frozen_model(const QwenModel& model, int device = 0, const CudaStream& stream = CudaStream{});
// A model straight on the device (no host copy: a 4B model's f32 host buffer is 16 GB): matrices
// and biases N(0, 0.02), norm weights 1, from Philox (runtime/random.h). For benchmarks.
CudaModel random_cuda_model(const QwenConfig& config, uint64_t seed, int device = 0,
                            const CudaStream& stream = CudaStream{});
// ZeRO 3 (rl/data_parallel.h): the bf16 copy of every parameter (rounded on the host, as
// upload_frozen_model) and the fp32 master of parameters [lo, hi) only; no gradient buffer.
CudaModel upload_model_sliced(const QwenModel& model, int64_t lo, int64_t hi, int device = 0,
                              const CudaStream& stream = CudaStream{});
// Master weights (f32) back into a host model of the same table (for checkpoints); a whole
// master only.
void download_model(const CudaModel& model, QwenModel& out);
// The master's master.numel() floats (the slice starting at master_first) into `out` (host).
void download_master_slice(const CudaModel& model, float* out);
std::vector<float> download_grads(const CudaModel& model);
void zero_grads(CudaModel& model);

// --- training (model/cuda_train.cpp) --------------------------------------------------------
struct CudaLayerActs {
  uint16_t *ln1 = nullptr, *q_raw = nullptr, *k_raw = nullptr, *q = nullptr, *k = nullptr, *v = nullptr;
  uint16_t *att = nullptr, *resid_mid = nullptr, *ln2 = nullptr, *gate = nullptr, *up = nullptr, *h = nullptr;
  float *rstd1 = nullptr, *q_rstd = nullptr, *k_rstd = nullptr, *lse = nullptr, *rstd2 = nullptr;
};

struct CudaTrainState {
  QwenConfig config;
  TrainOptions options;  // logprob_chunk = tokens per log-prob tile here
  int64_t chunk_vocab = 16384;
  Tensor arena;          // every buffer below is a piece of this one allocation
  uint16_t* resid = nullptr;  // [(layers + 1), max_tokens, hidden] bf16
  std::vector<CudaLayerActs> layer_acts;
  uint16_t* lnf = nullptr;
  float *rstdf = nullptr, *vocab_lse = nullptr, *logprobs = nullptr, *entropy = nullptr, *dlogprobs = nullptr;
  float* dentropy = nullptr;
  int32_t *tokens = nullptr, *positions = nullptr, *targets = nullptr;
  // cu_seqlens, then (a batch with shared prefixes) the prefix arrays and sharer lists of
  // `prefixes`; grows with the sequence count (empty sequences make it unbounded)
  Tensor cu_seqlens_buf;
  int32_t* cu_seqlens = nullptr;
  SharedPrefixesCuda prefixes;          // of the batch last run forward (seq == nullptr: none)
  std::vector<int32_t> prefix_staging;  // the host copy of the buffer's prefix part
  // backward scratch: dresid/datt/dq.. bf16, dln_f32 accumulates the q/k/v (gate/up) input
  // gradients in f32 before one rounding to bf16 (dln)
  uint16_t *dresid = nullptr, *dln = nullptr, *datt = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  uint16_t *dq_raw = nullptr, *dk_raw = nullptr, *dh = nullptr, *dgate = nullptr, *dup = nullptr;
  float* dln_f32 = nullptr;
  void* workspace = nullptr;  // shared by the attention, RMSNorm, embedding and log-prob launchers
  size_t workspace_bytes = 0;
  int64_t max_seqlen = 0, num_tokens = 0;  // of the batch last run forward
  float logit_scale = 1.0f;                // of the last log-prob forward (vocab_lse belongs to it)
  bool has_entropy = false;                // the last log-prob forward filled `entropy`
  const CudaLora* lora = nullptr;          // the adapter the last forward ran with (null: none)
  int64_t bytes() const { return static_cast<int64_t>(arena.nbytes()); }
};

// place_in (nullable): a device region of at least cuda_train_state_bytes to carve the state
// from (the trainer's phase region, shared with the rollout's KV cache); null: a fresh arena.
CudaTrainState make_cuda_train_state(const CudaModel& model, const TrainOptions& options,
                                     const Tensor* place_in = nullptr);
// The device bytes make_cuda_train_state takes (what model/memory_plan.h prices on CUDA).
int64_t cuda_train_state_bytes(const QwenConfig& config, const TrainOptions& options);

// As forward_logits / forward_logprobs / backward_logprobs of model/train.h; host in and out.
// lora (nullable): a LoRA adapter (model/cuda_lora.h) applied unmerged, as the CPU forward's;
// without one the forward launches exactly what it did before adapters existed.
void forward_logits_cuda(const CudaModel& model, CudaTrainState& state, const PackedBatch& batch, float* logits,
                         const CudaLora* lora = nullptr);
// entropy (nullable): -sum p log p of each row, from the same fused pass; logit_scale as in
// forward_logprobs.
void forward_logprobs_cuda(const CudaModel& model, CudaTrainState& state, const PackedBatch& batch,
                           const std::vector<int32_t>& targets, float* logprobs, float* entropy = nullptr,
                           float logit_scale = 1.0f, const CudaLora* lora = nullptr);
// dentropy (host, nullable) as backward_logprobs's: needs the last forward_logprobs_cuda to have
// computed the entropy (the state keeps it on the device). lora: the adapter that forward ran
// with (or null, as it did); with one the base is frozen: no base gradient is computed (model.grads
// and master may be undefined) and the adapter's gradients add into lora->grads.
void backward_logprobs_cuda(CudaModel& model, CudaTrainState& state, const PackedBatch& batch,
                            const std::vector<int32_t>& targets, const float* dlogprobs,
                            const float* dentropy = nullptr, CudaLora* lora = nullptr);

// AdamW over the master buffer with bf16 copy-out into model.weights (kernels/adamw.h), global
// grad-norm clipping on the device (max_norm <= 0: none). Returns nothing: no host round trip.
struct CudaAdamW {
  AdamWConfig config;
  bool bf16_moments = false;  // m, v bf16 with stochastic rounding (kernels/adamw.h)
  Tensor m, v;       // [num_params], f32 or bf16; undefined while offloaded to the host (rl/train_memory.h)
  Tensor sq_sum;     // one f64
  Tensor workspace;  // grad_sq_sum_workspace_bytes()
  int64_t step = 0;
  DType moment_dtype() const { return bf16_moments ? DType::BF16 : DType::F32; }
};
// allocate_moments false: m and v are placed later (the trainer's phase region).
// moments: how many (a ZeRO slice's); -1: one per parameter.
CudaAdamW make_cuda_adamw(const CudaModel& model, const AdamWConfig& config, bool bf16_moments = false,
                          bool allocate_moments = true, int64_t moments = -1);
// sq_sum_ready: opt.sq_sum already holds these gradients' sum of squares (grad_norm_cuda ran
// after the last backward), which saves a pass over every gradient.
void adamw_step_cuda(CudaModel& model, CudaAdamW& opt, float lr, float max_norm, bool sq_sum_ready = false);
double grad_norm_cuda(CudaModel& model, CudaAdamW& opt);  // sqrt of the sum of squares (synchronises)
// ZeRO 1-3: AdamW over parameters [lo, hi) only. grads: the slice's (reduced) gradient, hi - lo
// device floats; opt.m / v: hi - lo moments; the master must hold [lo, hi); the bf16 copy's
// [lo, hi) is rewritten. The clip reads opt.sq_sum, which must hold the whole gradient's sum of
// squares (grad_norm_cuda, or set_grad_sq_sum_cuda of the sum over ranks' slices).
void adamw_step_slice_cuda(CudaModel& model, CudaAdamW& opt, const float* grads, int64_t lo, int64_t hi, float lr,
                           float max_norm);
// The sum of squares of n device floats (synchronises; uses opt's workspace and sq_sum).
double grad_sq_sum_slice_cuda(const float* grads, int64_t n, CudaAdamW& opt, const CudaStream& stream);
void set_grad_sq_sum_cuda(CudaAdamW& opt, double sq_sum, const CudaStream& stream);

// --- inference (model/cuda_infer.cpp) ---------------------------------------------------------
// The host PagedKVCache keeps the bookkeeping (block tables, ref counts, lengths; its k and v
// stay empty); K and V live on the device as bf16 [layers, num_blocks, block_size, kv_heads,
// head_dim]. Fork and free are the host kv_fork / kv_free on `book`; writes go through
// forward_cached_cuda, which copies a shared partly filled block on the device before writing.
// How a step whose inputs are all one token runs (model/cuda_decode.h): graphs replays the fused
// decode kernels as a CUDA graph, kernels launches the same kernels one by one (the same bits),
// unfused takes the prefill path.
enum class CudaDecodeMode : uint8_t { graphs, kernels, unfused };
struct CudaDecodeState;  // model/cuda_decode.cpp
struct CudaKVCache {
  PagedKVCache book;
  Tensor k, v;
  CudaDecodeMode decode_mode = CudaDecodeMode::graphs;  // make_cuda_kv_cache: from SQLRL_CUDA_DECODE
  // Steps of more rows run their products on cuBLASLt (inside the same step and graph; the
  // few-row kernel still where cuBLASLt cannot take a product in one GEMM: biases, parts stored
  // apart): on an H200 (2026-11-28, Qwen3-4B) the few-row kernels beat the unfused path at 1 row
  // (4.20 vs 5.47 ms a step) and lost at 16 (6.06 vs 5.61) and 64 (13.2 vs 7.0).
  int64_t decode_fused_rows = 8;
  std::shared_ptr<CudaDecodeState> decoder;  // made by the first decode step
};
// place_in (nullable): a device region to place K and V in (the trainer's phase region; the V
// half starts 256-byte aligned, so it needs 2 x the K bytes rounded up); null: fresh tensors.
CudaKVCache make_cuda_kv_cache(const CudaModel& model, int64_t num_blocks, int64_t block_size,
                               const Tensor* place_in = nullptr);

// As forward_cached: logits [rows, vocab] f32 stay on the device in `logits` (reallocated when
// too small); rows = one per input, or every new token with all_positions. lora (nullable): an
// adapter applied unmerged (the cache then holds the adapted model's K and V).
void forward_cached_cuda(const CudaModel& model, CudaKVCache& cache, const std::vector<CachedInput>& inputs,
                         Tensor& logits, bool all_positions = false, const CudaLora* lora = nullptr);
// One sampled token per row of `logits` (row i with requests[i]); token + log-probs.
std::vector<SampledToken> sample_cuda(const CudaModel& model, const Tensor& logits,
                                      const std::vector<SamplingRequest>& requests);
// As generate() of model/infer.h, on the device; lora (nullable) as in forward_cached_cuda.
std::vector<GeneratedSample> generate_cuda(const CudaModel& model, CudaKVCache& cache,
                                           const std::vector<int32_t>& prompt, int64_t num_samples,
                                           const GenerateOptions& options, const TokenCallback& on_token = {},
                                           const CudaLora* lora = nullptr);

}  // namespace sqlrl
