#include "kernels/rope.h"

#include <cmath>
#include <vector>

#include "runtime/thread_pool.h"

namespace sqlrl {

namespace {

void rope_rotate(float* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, float theta,
                 float sign) {
  int64_t half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = rope_inv_freq(theta, head_dim, i);
  default_thread_pool().parallel_for(static_cast<size_t>(tokens), 8, [&](size_t begin, size_t end) {
    std::vector<float> cos_v(static_cast<size_t>(half)), sin_v(static_cast<size_t>(half));
    for (size_t t = begin; t < end; ++t) {
      float pos = static_cast<float>(positions[t]);
      for (int64_t i = 0; i < half; ++i) {
        float angle = pos * inv_freq[i];
        cos_v[i] = std::cos(angle);
        sin_v[i] = sign * std::sin(angle);
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + (static_cast<int64_t>(t) * heads + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          float a = v[i], b = v[i + half];
          v[i] = a * cos_v[i] - b * sin_v[i];
          v[i + half] = b * cos_v[i] + a * sin_v[i];
        }
      }
    }
  });
}

}  // namespace

void rope_forward_cpu(float* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, float theta) {
  rope_rotate(x, positions, tokens, heads, head_dim, theta, 1.0f);
}

void rope_backward_cpu(float* dx, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim,
                       float theta) {
  rope_rotate(dx, positions, tokens, heads, head_dim, theta, -1.0f);
}

}  // namespace sqlrl
