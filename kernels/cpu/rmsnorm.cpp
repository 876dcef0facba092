#include "kernels/rmsnorm.h"

#include <cmath>
#include <vector>

#include "runtime/thread_pool.h"

namespace sqlrl {

void rmsnorm_forward_cpu(float* out, float* rstd, const float* x, const float* weight, int64_t rows, int64_t dim,
                         float eps) {
  default_thread_pool().parallel_for(static_cast<size_t>(rows), 16, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      const float* xr = x + r * dim;
      float* yr = out + r * dim;
      float sum = 0.0f;
      for (int64_t i = 0; i < dim; ++i) sum += xr[i] * xr[i];
      float s = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
      if (rstd) rstd[r] = s;
      for (int64_t i = 0; i < dim; ++i) yr[i] = weight[i] * (xr[i] * s);
    }
  });
}

void rmsnorm_backward_cpu(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                          const float* rstd, int64_t rows, int64_t dim) {
  // y = w * xhat, xhat = x * s, s = (mean(x^2) + eps)^-1/2:
  // dx = s * (g - xhat * mean(g * xhat)) with g = dout * w.
  default_thread_pool().parallel_for(static_cast<size_t>(rows), 16, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      const float* xr = x + r * dim;
      const float* dy = dout + r * dim;
      float s = rstd[r];
      float dot = 0.0f;
      for (int64_t i = 0; i < dim; ++i) dot += dy[i] * weight[i] * xr[i] * s;
      dot /= static_cast<float>(dim);
      float* dxr = dx + r * dim;
      for (int64_t i = 0; i < dim; ++i) dxr[i] += s * (dy[i] * weight[i] - xr[i] * s * dot);
    }
  });
  if (!dweight) return;
  // Columns in parallel, rows in order: deterministic whatever the thread count. Rows outer,
  // the chunk's columns inner, so memory is read once, row by row (a column-at-a-time walk
  // re-reads every row's cache lines per column); each column's sum keeps its row order.
  default_thread_pool().parallel_for(static_cast<size_t>(dim), 16, [&](size_t begin, size_t end) {
    std::vector<float> sum(end - begin, 0.0f);
    const int64_t b = static_cast<int64_t>(begin), n = static_cast<int64_t>(end - begin);
    for (int64_t r = 0; r < rows; ++r) {
      const float* dy = dout + r * dim + b;
      const float* xr = x + r * dim + b;
      for (int64_t i = 0; i < n; ++i) sum[i] += dy[i] * xr[i] * rstd[r];
    }
    for (int64_t i = 0; i < n; ++i) dweight[b + i] += sum[i];
  });
}

}  // namespace sqlrl
