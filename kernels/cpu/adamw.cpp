#include "kernels/adamw.h"

#include <algorithm>
#include <vector>

#include "runtime/error.h"
#include "runtime/thread_pool.h"

namespace sqlrl {

namespace {
constexpr int64_t kChunk = 1 << 16;  // fixed chunks: the norm's summation order ignores threads
}

void adamw_cpu(float* params, float* m, float* v, const float* grads, int64_t n, const AdamWConfig& config,
               int64_t step, float lr, float grad_scale) {
  check(step >= 1, "adamw: step counts from 1, got ", step);
  float bc1 = 1.0f - std::pow(config.beta1, static_cast<float>(step));
  float bc2_sqrt = std::sqrt(1.0f - std::pow(config.beta2, static_cast<float>(step)));
  default_thread_pool().parallel_for(static_cast<size_t>(n), 1 << 14, [&](size_t begin, size_t end) {
    // Restrict-qualified locals let the compiler vectorise (the four buffers never overlap).
    float* __restrict p = params;
    float* __restrict mm = m;
    float* __restrict vv = v;
    const float* __restrict g = grads;
    for (size_t i = begin; i < end; ++i) adamw_element(p[i], mm[i], vv[i], g[i], lr, grad_scale, bc1, bc2_sqrt, config);
  });
}

void adamw_bf16_moments_cpu(float* params, uint16_t* m, uint16_t* v, const float* grads, int64_t n,
                            const AdamWConfig& config, int64_t step, float lr, float grad_scale, int64_t first_index) {
  check(step >= 1, "adamw: step counts from 1, got ", step);
  float bc1 = 1.0f - std::pow(config.beta1, static_cast<float>(step));
  float bc2_sqrt = std::sqrt(1.0f - std::pow(config.beta2, static_cast<float>(step)));
  // The rounding bits are a function of (step, i) alone, so the thread split changes nothing.
  default_thread_pool().parallel_for(static_cast<size_t>(n), 1 << 14, [&](size_t begin, size_t end) {
    float* __restrict p = params;
    uint16_t* __restrict mm = m;
    uint16_t* __restrict vv = v;
    const float* __restrict g = grads;
    for (size_t i = begin; i < end; ++i)
      adamw_bf16_moments_element(p[i], mm[i], vv[i], g[i], lr, grad_scale, bc1, bc2_sqrt, config, step,
                                 first_index + static_cast<int64_t>(i));
  });
}

double grad_sq_sum_cpu(const float* grads, int64_t n) {
  int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
  default_thread_pool().parallel_for(static_cast<size_t>(chunks), 1, [&](size_t begin, size_t end) {
    for (size_t c = begin; c < end; ++c) {
      double s = 0;
      int64_t i1 = std::min<int64_t>(n, static_cast<int64_t>(c + 1) * kChunk);
      for (int64_t i = static_cast<int64_t>(c) * kChunk; i < i1; ++i) s += static_cast<double>(grads[i]) * grads[i];
      partial[c] = s;
    }
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace sqlrl
