#include "kernels/swiglu.h"

#include <cmath>

#include "runtime/thread_pool.h"

namespace sqlrl {

void swiglu_forward_cpu(float* out, const float* gate, const float* up, int64_t n) {
  default_thread_pool().parallel_for(static_cast<size_t>(n), 4096, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      float g = gate[i];
      out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  });
}

void swiglu_backward_cpu(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n) {
  // silu(g) = g s, s = sigmoid(g); silu'(g) = s (1 + g (1 - s)).
  default_thread_pool().parallel_for(static_cast<size_t>(n), 4096, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      float g = gate[i];
      float s = 1.0f / (1.0f + std::exp(-g));
      dup[i] = dout[i] * g * s;
      dgate[i] = dout[i] * up[i] * s * (1.0f + g * (1.0f - s));
    }
  });
}

}  // namespace sqlrl
