// LoRA adapters (model/lora.h) on the CUDA model: the adapter's one contiguous buffer on the
// device in the three forms the CUDA model keeps its own weights in (cuda_model.h): f32 master
// (what AdamW updates), its bf16 copy (what every GEMM reads) and f32 gradients, all with the
// host adapter's table, offset for offset. The base model stays a CudaModel of its own; the
// adapter is passed to forward_logprobs_cuda / forward_logits_cuda / backward_logprobs_cuda /
// forward_cached_cuda / generate_cuda as an optional trailing argument, as on the CPU, so one
// base serves the policy (with the adapter) and GRPO's KL reference (without) at no extra memory.
//
// Each adapted projection adds scale * (x A^T) B^T to its output (bf16, one more rounding) right
// after the base product, where model/train.cpp's lora_add_cpu adds it; the backward recomputes
// u = x A^T per projection as lora_backward_cpu does, into a [T, rank] bf16 scratch taken from
// the caching allocator per call (forward: u, 2 T r bytes; backward: u and du, 4 T r bytes, half
// of the lora_backward_scratch_floats(config, T) * 4 bytes model/memory_plan prices).
//
// With an adapter the backward trains the adapter only: the base is frozen, no base gradient is
// computed (CudaModel::grads and master may be undefined: upload_frozen_model), and dA, dB add
// into CudaLora::grads.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "model/cuda_model.h"
#include "model/lora.h"

namespace sqlrl {

struct CudaLora {
  LoraConfig config;
  QwenConfig model;             // the base the table was laid out for
  std::vector<LoraView> table;  // the host adapter's, offsets in elements of every buffer below
  int64_t num_params = 0;
  float scale = 0;   // lora_scale(config)
  int64_t rank = 0;  // config.rank
  int device = 0;
  CudaStream stream;  // the base model's at upload: every launch on the adapter goes there
  Tensor master;      // f32 [num_params]
  Tensor weights;     // bf16 [num_params]: the copy every GEMM reads
  Tensor grads;       // f32 [num_params], zeroed on upload; undefined for inference
};

// Uploads the adapter for `model` (same device and stream): master = params (exact), weights =
// their bf16 rounding, and (grads) a zeroed gradient buffer. Throws unless the adapter was laid
// out for a model of this shape.
CudaLora upload_lora(const LoraAdapter& adapter, const CudaModel& model, bool grads = true);
// master -> out.params (out: the adapter uploaded, or one with the same table).
void download_lora(const CudaLora& lora, LoraAdapter& out);
std::vector<float> download_lora_grads(const CudaLora& lora);
void zero_lora_grads_cuda(CudaLora& lora);

// One layer's views of a buffer, indexed by LoraModule; null where the projection is not adapted.
struct CudaLoraLayerWeights {
  std::array<const uint16_t*, kLoraModules> a{}, b{};
};
struct CudaLoraLayerGrads {
  std::array<float*, kLoraModules> a{}, b{};
};
std::vector<CudaLoraLayerWeights> lora_bf16_views(const CudaLora& lora);
std::vector<CudaLoraLayerGrads> lora_grad_views(CudaLora& lora);

// AdamW and the gradient norm over the adapter's buffers: the same kernels and the same code as
// the CudaModel overloads (cuda_model.h), on (master, weights, grads, num_params).
CudaAdamW make_cuda_adamw(const CudaLora& lora, const AdamWConfig& config, bool bf16_moments = false,
                          bool allocate_moments = true);
void adamw_step_cuda(CudaLora& lora, CudaAdamW& opt, float lr, float max_norm, bool sq_sum_ready = false);
double grad_norm_cuda(CudaLora& lora, CudaAdamW& opt);  // sqrt of the sum of squares (synchronises)

}  // namespace sqlrl
