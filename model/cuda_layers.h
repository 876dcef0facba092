// Internals shared by model/cuda_model.cpp, cuda_lora.cpp, cuda_train.cpp and cuda_infer.cpp: the
// bf16 views of the weight buffer (the CPU table, offset for offset), the linear layer on
// cuBLASLt, the LoRA term of an adapted projection and AdamW over one (master, weights, grads).
#pragma once
#include <cstdint>
#include <vector>

#include "model/cuda_lora.h"
#include "model/cuda_model.h"
#include "runtime/gemm.h"

namespace sqlrl {

// One layer's bf16 weights (null where the architecture has no such tensor).
struct CudaLayerWeights {
  const uint16_t* attn_norm = nullptr;
  const uint16_t *wq = nullptr, *bq = nullptr, *wk = nullptr, *bk = nullptr, *wv = nullptr, *bv = nullptr;
  const uint16_t *wo = nullptr, *bo = nullptr, *q_norm = nullptr, *k_norm = nullptr, *mlp_norm = nullptr;
  const uint16_t *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;
};
struct CudaWeights {
  const uint16_t* embed = nullptr;
  std::vector<CudaLayerWeights> layers;
  const uint16_t *final_norm = nullptr, *lm_head = nullptr;
};

CudaWeights bf16_weights(const CudaModel& model);
// The f32 gradient views (the CPU model's ModelWeights bound to the device grads buffer).
ModelWeights grad_views(CudaModel& model);

// out[T, OC] (bf16) = inp[T, C] @ weight[OC, C]^T + bias, plus out's old value when
// `accumulate` (the residual: one f32 sum, one rounding).
void linear_forward_cuda(uint16_t* out, const uint16_t* inp, const uint16_t* weight, const uint16_t* bias, int64_t T,
                         int64_t C, int64_t OC, bool accumulate, const CudaModel& model);
// dinp[T, C] (+)= dout @ weight (f32 when dinp_f32, else bf16; added when dinp_accumulate,
// else overwritten); dweight[OC, C] += dout^T @ inp and dbias[OC] += column sums of dout, both
// f32. Null gradients are skipped.
void linear_backward_cuda(void* dinp, bool dinp_f32, bool dinp_accumulate, float* dweight, float* dbias, const uint16_t* dout,
                          const uint16_t* inp, const uint16_t* weight, int64_t T, int64_t C, int64_t OC,
                          const CudaModel& model);
// out[R, OC] f32 = inp[R, C] @ weight^T (the lm_head for logits).
void logits_cuda(float* out, const uint16_t* inp, const uint16_t* weight, int64_t R, int64_t C, int64_t OC,
                 const CudaModel& model);
// C[m, n] (c_type) = alpha op(A) op(B) + beta C on packed row-major bf16 operands (leading
// dimensions from the shapes).
GemmProblem bf16_row_major(int64_t m, int64_t n, int64_t k, const void* a, bool trans_a, const void* b, bool trans_b,
                           void* c, DType c_type, float beta, float alpha = 1.0f);

// --- the paged cache (model/cuda_infer.cpp) --------------------------------------------------
// One layer's K or V cache inside cache.k / cache.v.
uint16_t* layer_cache(const Tensor& t, const PagedKVCache& b, int64_t layer);
// kv_reserve with the copy on write done on the device (the host k/v of `book` are empty): a
// shared, partly filled last block is copied (on model.stream) before `handle` writes into it.
void reserve_on_device(const CudaModel& m, CudaKVCache& cache, int64_t handle, int64_t n);

// --- LoRA (model/cuda_lora.cpp) ---------------------------------------------------------------
// The adapter as one forward or backward threads it through the layers; a null CudaLoraRun*
// means no adapter, and the lora_*_cuda calls below then launch nothing.
struct CudaLoraRun {
  const CudaLora* lora = nullptr;
  std::vector<CudaLoraLayerWeights> weights;  // bf16 views of lora->weights
  std::vector<CudaLoraLayerGrads> grads;      // f32 views of lora->grads (backward only)
  Tensor scratch;                             // bf16: u [T, rank], then du [T, rank] (backward)
  uint16_t *u = nullptr, *du = nullptr;
  int64_t tokens = 0;  // rows the scratch holds
};
// Checks the adapter against the model (shape, device, buffers; the backward: gradients
// allocated, no dropout) and takes the scratch for `tokens` rows; `who` names the caller.
CudaLoraRun lora_run_cuda(const CudaLora& lora, const CudaModel& model, int64_t tokens, bool backward, const char* who);
// out[T, OC] (bf16) += scale * (x[T, C] A^T) B^T for projection m of `layer`: u = x A^T into the
// scratch (bf16), then one GEMM adding scale * u B^T into out with beta = 1 (out's old value and
// the product summed in f32, rounded once). A no-op when run is null or m is not adapted.
void lora_forward_cuda(const CudaLoraRun* run, int64_t layer, LoraModule m, uint16_t* out, const uint16_t* x,
                       int64_t T, int64_t C, int64_t OC, const CudaModel& model);
// The backward of lora_forward_cuda given dy [T, OC] (bf16), lora_backward_cpu's formulas: with
// u = x A^T (recomputed) and du = scale * dy B (bf16),
//   dB += scale * dy^T u,   dA += du^T x   (f32, into lora->grads),   dx += du A
// where dx [T, C] (nullable) is f32 when dx_f32, else bf16, and always added to (the base's
// input gradient was written first). A no-op when run is null or m is not adapted.
void lora_backward_cuda(const CudaLoraRun* run, int64_t layer, LoraModule m, void* dx, bool dx_f32, const uint16_t* dy,
                        const uint16_t* x, int64_t T, int64_t C, int64_t OC, const CudaModel& model);

// A tensor's data, or null when it was never allocated (a frozen upload's master and grads).
template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data_as<T>() : nullptr;
}

// --- AdamW over one parameter buffer (model/cuda_model.cpp) -----------------------------------
// What make_cuda_adamw / adamw_step_cuda / grad_norm_cuda do for a CudaModel and a CudaLora alike:
// master f32, weights its bf16 copy, grads f32, n elements each.
CudaAdamW make_cuda_adamw_for(int64_t n, int device, const CudaStream& stream, const AdamWConfig& config,
                              bool bf16_moments, bool allocate_moments);
// first_index: the parameter index of element 0 (a ZeRO slice; bf16 moments draw its rounding bits).
void adamw_step_buffers(float* master, uint16_t* weights, const float* grads, int64_t n, CudaAdamW& opt, float lr,
                        float max_norm, bool sq_sum_ready, const CudaStream& stream, int64_t first_index = 0);
double grad_norm_buffers(const float* grads, int64_t n, CudaAdamW& opt, const CudaStream& stream);

}  // namespace sqlrl
