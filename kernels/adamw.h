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

#include "runtime/dtype.h"
#include "runtime/hd.h"
#include "runtime/philox.h"
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

// ---- bf16 moments (half the optimizer state) ----------------------------------------------
// Rounds x to bf16 stochastically: adds the low 16 bits of `random_bits` to x's bits below the
// bf16 mantissa and truncates, so E[round(x)] = x (NaN stays NaN, inf stays inf, no overflow of
// finite values to inf beyond what truncation allows).
// Why the bits of x: f32 and bf16 share sign and exponent, so a finite x lies between two
// adjacent bf16 values lo (x's bits truncated) and hi (lo plus one in the last bf16 place; the
// next binade or the smallest normal where the carry ripples on), and its low 16 bits are where
// x sits between them in units of 2^-16 of the gap, subnormals included. Adding r uniform in
// [0, 2^16) carries into the bf16 part with probability (low bits) / 2^16: E = x exactly. The
// sign bit is apart, so negative values round away from zero symmetrically. Finite values above
// the largest finite bf16 (|x|'s bits in (0x7f7f'0000, 0x7f7f'ffff]) would carry into inf: they
// truncate to the largest finite value instead.
SQLRL_HD uint16_t bf16_round_stochastic(float x, uint32_t random_bits) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) >= 0x7f800000u) return f32_to_bf16_bits(x);  // inf stays, NaN stays (quieted)
  const uint32_t r = u + (random_bits & 0xffffu);
  if ((r & 0x7f800000u) == 0x7f800000u) return static_cast<uint16_t>(u >> 16);  // would overflow: truncate
  return static_cast<uint16_t>(r >> 16);
}

// The stochastic rounding's Philox seed; the stream is the step and the index the element, so
// each (step, element) gets fresh bits whatever the thread layout.
inline constexpr uint64_t kAdamWRoundingSeed = 0x5eed'ada3'b16f'0001ull;

// One element of the bf16-moment AdamW, shared by the CPU loop and the CUDA kernel so that both
// run the same arithmetic on the same bits: widen m and v (exact), adamw_element in f32, round
// the new moments back stochastically with Philox words 0 (m) and 1 (v) of (step, i).
SQLRL_HD void adamw_bf16_moments_element(float& p, uint16_t& m, uint16_t& v, float grad, float lr, float grad_scale,
                                         float bc1, float bc2_sqrt, const AdamWConfig& c, int64_t step, int64_t i) {
  float mf = bf16_bits_to_f32(m), vf = bf16_bits_to_f32(v);
  adamw_element(p, mf, vf, grad, lr, grad_scale, bc1, bc2_sqrt, c);
  const Philox4 bits = philox_draw(kAdamWRoundingSeed, static_cast<uint64_t>(step), static_cast<uint64_t>(i));
  m = bf16_round_stochastic(mf, bits.v[0]);
  v = bf16_round_stochastic(vf, bits.v[1]);
}

// As adamw_cpu / adamw_cuda with m and v held in bf16: each element reads them to f32, runs
// adamw_element, and writes them back with bf16_round_stochastic, the random bits from
// philox_draw(kAdamWRoundingSeed, step, i) (word 0 for m, word 1 for v), so CPU and CUDA draw the
// same bits and a run is repeatable. Round-to-nearest would freeze v: with beta2 = 0.999,
// 0.999*v rounds back to v (half a bf16 ulp is 2^-9 relative), so v could never decay.
// Params stay f32 (the master copy); only the moments lose precision, each rounding <= 1 bf16
// ulp (< 2^-7 relative) and zero on average.
// first_index: the parameter index of element 0 (a ZeRO slice updates [first_index, + n) and
// must draw the rounding bits of those indices).
void adamw_bf16_moments_cpu(float* params, uint16_t* m, uint16_t* v, const float* grads, int64_t n,
                            const AdamWConfig& config, int64_t step, float lr, float grad_scale,
                            int64_t first_index = 0);
double grad_sq_sum_cpu(const float* grads, int64_t n);

// CUDA. adamw_cuda reads its clip coefficient from the device: when grad_sq_sum (a device
// double written by grad_sq_sum_cuda) is non-null, grad_scale = clip_coefficient(*grad_sq_sum,
// max_norm), so norm, clip and update run without a host round trip. bf16_out (nullable, [n]
// bf16 bits) receives the updated parameters rounded to nearest-even for the bf16 model copy.
void adamw_cuda(float* params, float* m, float* v, const float* grads, uint16_t* bf16_out, int64_t n,
                const AdamWConfig& config, int64_t step, float lr, const double* grad_sq_sum, float max_norm,
                const CudaStream& stream);
// adamw_bf16_moments_cpu on the device; bf16_out, grad_sq_sum and max_norm exactly as in adamw_cuda,
// first_index as in adamw_bf16_moments_cpu (a ZeRO slice draws its own indices' rounding bits).
void adamw_bf16_moments_cuda(float* params, uint16_t* m, uint16_t* v, const float* grads, uint16_t* bf16_out,
                             int64_t n, const AdamWConfig& config, int64_t step, float lr, const double* grad_sq_sum,
                             float max_norm, const CudaStream& stream, int64_t first_index = 0);
// out: one device double; workspace: grad_sq_sum_workspace_bytes() device bytes.
size_t grad_sq_sum_workspace_bytes();
void grad_sq_sum_cuda(double* out, const float* grads, int64_t n, void* workspace, const CudaStream& stream);

}  // namespace sqlrl
