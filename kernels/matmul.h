// Linear layers as llm.c writes them: activations [T, C] row-major, weights [OC, C] as Hugging
// Face stores them (out = inp @ weight^T + bias). The CPU path is OpenBLAS sgemm (runtime/gemm.h).
// Backward accumulates (+=) into every gradient it is given, so residual branches and tied
// weights add up without extra buffers; pass nullptr for a gradient that is not wanted.
#pragma once
#include <cstdint>

namespace sqlrl {

// out[T, OC] = inp[T, C] @ weight[OC, C]^T + bias[OC] (bias may be null). Overwrites out.
void matmul_forward_cpu(float* out, const float* inp, const float* weight, const float* bias, int64_t tokens,
                        int64_t in_features, int64_t out_features);

// The same product for a few tokens (decode steps, T <= ~16): streams each weight row once,
// where sgemm packs the whole weight on every call. Sums in another order than sgemm (results
// differ from matmul_forward_cpu in the last bits); threads split the outputs. Each output of a
// token is one fixed-order sum over that token's row, so its bits depend neither on T, nor on
// where the token sits in the call, nor on the thread count (sgemm's do: runtime/gemm.h); any T
// is taken (many tokens in blocks: a batch-invariant prefill, model/infer.h).
void matmul_forward_rows_cpu(float* out, const float* inp, const float* weight, const float* bias, int64_t tokens,
                             int64_t in_features, int64_t out_features);

// dinp[T, C] += dout @ weight; dweight[OC, C] += dout^T @ inp; dbias[OC] += column sums of dout.
void matmul_backward_cpu(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, int64_t tokens, int64_t in_features, int64_t out_features);

}  // namespace sqlrl
