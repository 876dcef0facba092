// Internals shared by model/cuda_model.cpp, cuda_train.cpp and cuda_infer.cpp: the bf16 views
// of the weight buffer (the CPU table, offset for offset) and the linear layer on cuBLASLt.
#pragma once
#include <cstdint>
#include <vector>

#include "model/cuda_model.h"

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

}  // namespace sqlrl
