// RMSNorm (Qwen): out = x / sqrt(mean(x^2) + eps) * weight, over the last dimension of
// [rows, dim]. Used for the layer norms (dim = hidden) and Qwen3's q_norm/k_norm (rows =
// tokens * heads, dim = head_dim). Forward saves 1/rms per row for the backward.
#pragma once
#include <cstdint>

namespace sqlrl {

void rmsnorm_forward_cpu(float* out, float* rstd, const float* x, const float* weight, int64_t rows, int64_t dim,
                         float eps);

// dx[rows, dim] += dL/dx; dweight[dim] += dL/dweight (dweight may be null).
void rmsnorm_backward_cpu(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                          const float* rstd, int64_t rows, int64_t dim);

}  // namespace sqlrl
