// Fused AdamW over one contiguous fp32 parameter buffer (the model's single params buffer, its
// grads buffer and one buffer per moment), as torch.optim.AdamW (decoupled weight decay):
//   g  = grad * grad_scale                     (grad_scale: the clip coefficient, or 1)
//   p -= lr * weight_decay * p
//   m  = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)
// step counts from 1 (the first update uses bias corrections 1 - b1 and 1 - b2).
// Weight decay applies to every element (verl's FSDP AdamW has no no-decay groups either).
//
// Global grad norm: sum of squares in float64 over fixed chunks / fixed blocks, then a fixed
// ordered sum (a two-level deterministic reduction, independent of the thread count), and
// torch.nn.utils.clip_grad_norm_'s coefficient min(1, max_norm / (norm + 1e-6)).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "runtime/hd.h"
#include "runtime/stream.h"

namespace sqlrl {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
};

// max_norm <= 0 disables clipping (coefficient 1).
SQLRL_HD float clip_coefficient(double grad_sq_sum, float max_norm) {
  if (!(max_norm > 0.0f)) return 1.0f;
  double c = static_cast<double>(max_norm) / (sqrt(grad_sq_sum) + 1e-6);
  return c < 1.0 ? static_cast<float>(c) : 1.0f;
}

SQLRL_HD void adamw_element(float& p, float& m, float& v, float grad, float lr, float grad_scale, float bc1,
                            float bc2_sqrt, const AdamWConfig& c) {
  float g = grad * grad_scale;
  p -= lr * c.weight_decay * p;
  m = c.beta1 * m + (1.0f - c.beta1) * g;
  v = c.beta2 * v + (1.0f - c.beta2) * g * g;
  p -= (lr / bc1) * m / (sqrtf(v) / bc2_sqrt + c.eps);
}

void adamw_cpu(float* params, float* m, float* v, const float* grads, int64_t n, const AdamWConfig& config,
               int64_t step, float lr, float grad_scale);
double grad_sq_sum_cpu(const float* grads, int64_t n);

// CUDA. adamw_cuda reads its clip coefficient from the device: when grad_sq_sum (a device
// double written by grad_sq_sum_cuda) is non-null, grad_scale = clip_coefficient(*grad_sq_sum,
// max_norm), so norm, clip and update run without a host round trip. bf16_out (nullable, [n]
// bf16 bits) receives the updated parameters rounded to nearest-even for the bf16 model copy.
void adamw_cuda(float* params, float* m, float* v, const float* grads, uint16_t* bf16_out, int64_t n,
                const AdamWConfig& config, int64_t step, float lr, const double* grad_sq_sum, float max_norm,
                const CudaStream& stream);
// out: one device double; workspace: grad_sq_sum_workspace_bytes() device bytes.
size_t grad_sq_sum_workspace_bytes();
void grad_sq_sum_cuda(double* out, const float* grads, int64_t n, void* workspace, const CudaStream& stream);

}  // namespace sqlrl
