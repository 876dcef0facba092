// Token embedding lookup: out[t] = table[tokens[t]] for table [vocab, dim]. Token ids are
// checked against the vocabulary (bad input is an error, not an out-of-bounds read).
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/stream.h"

namespace sqlrl {

void embedding_forward_cpu(float* out, const float* table, const int32_t* tokens, int64_t num_tokens, int64_t vocab,
                           int64_t dim);
// dtable[tokens[t]] += dout[t]; columns in parallel, tokens in order (deterministic).
void embedding_backward_cpu(float* dtable, const float* dout, const int32_t* tokens, int64_t num_tokens, int64_t vocab,
                            int64_t dim);

// CUDA (kernels/cuda/embedding.cu), device pointers. Forward: bf16 table [vocab, dim] -> bf16 out
// [num_tokens, dim]. A device kernel cannot throw: a token outside [0, vocab) gets a row of NaN
// (never an out-of-bounds read), which any loss downstream turns into a visible NaN.
void embedding_forward_cuda(uint16_t* out, const uint16_t* table, const int32_t* tokens, int64_t num_tokens,
                            int64_t vocab, int64_t dim, const CudaStream& stream);
// dtable [vocab, dim] f32 += bf16 dout rows, deterministic: (token, t) pairs are radix-sorted
// (stable, so t ascends within a token) and each distinct token's rows are summed in t order by
// one block, then added once. Out-of-range tokens are skipped. workspace:
// embedding_backward_workspace_bytes(num_tokens, vocab) device bytes, the caller's.
size_t embedding_backward_workspace_bytes(int64_t num_tokens, int64_t vocab);
void embedding_backward_cuda(float* dtable, const uint16_t* dout, const int32_t* tokens, int64_t num_tokens,
                             int64_t vocab, int64_t dim, void* workspace, size_t workspace_bytes,
                             const CudaStream& stream);

}  // namespace sqlrl
