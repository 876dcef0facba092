// RMSNorm (Qwen): out = x / sqrt(mean(x^2) + eps) * weight, over the last dimension of
// [rows, dim]. Used for the layer norms (dim = hidden) and Qwen3's q_norm/k_norm (rows =
// tokens * heads, dim = head_dim). Forward saves 1/rms per row for the backward.
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/stream.h"

namespace sqlrl {

void rmsnorm_forward_cpu(float* out, float* rstd, const float* x, const float* weight, int64_t rows, int64_t dim,
                         float eps);

// dx[rows, dim] += dL/dx; dweight[dim] += dL/dweight (dweight may be null).
void rmsnorm_backward_cpu(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                          const float* rstd, int64_t rows, int64_t dim);

// CUDA (kernels/cuda/rmsnorm.cu): device pointers, bf16 stored as uint16_t bits, f32 math.
// x, out, dx, dout [rows, dim] bf16; weight [dim] bf16; rstd [rows] f32 (may be null in the
// forward); dweight [dim] f32. dim <= 8192 (16-byte vectors when dim % 8 == 0 and the pointers
// are 16-byte aligned, scalar otherwise, then dim <= 4096).
void rmsnorm_forward_cuda(uint16_t* out, float* rstd, const uint16_t* x, const uint16_t* weight, int64_t rows,
                          int64_t dim, float eps, const CudaStream& stream);

// dx += dL/dx (bf16 in, f32 sum, bf16 out); dweight += dL/dweight (may be null). The weight
// gradient is reduced without atomics: each team of threads keeps partial column sums over a
// fixed set of rows in registers, writes them to `workspace`, and a second kernel adds them in a
// fixed order, so the result is bitwise repeatable. workspace: rmsnorm_backward_workspace_bytes.
size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t dim);
void rmsnorm_backward_cuda(uint16_t* dx, float* dweight, const uint16_t* dout, const uint16_t* x, const uint16_t* weight,
                           const float* rstd, int64_t rows, int64_t dim, void* workspace, size_t workspace_bytes,
                           const CudaStream& stream);

}  // namespace sqlrl
