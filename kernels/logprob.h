// Fused lm_head + log-softmax + gather: logprob[t] = log softmax(hidden[t] @ weight^T)[target[t]]
// for weight [vocab, C]. The logits are made chunk_tokens rows at a time in `scratch`
// ([chunk_tokens, vocab] floats, the caller's), so [tokens x vocab] never exists at once
// (151,936 columns for Qwen3). The backward recomputes each chunk's logits from the saved
// log-sum-exp instead of keeping them.
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/stream.h"

namespace sqlrl {

// logit_scale multiplies the logits before the softmax: 1 / the sampling temperature when the
// log-probs must be those of the policy that sampled (verl's actor divides its logits by the
// rollout temperature); the backward's gradients include the factor.
struct LogprobShape {
  int64_t tokens = 0, hidden = 0, vocab = 0, chunk_tokens = 0;
  float logit_scale = 1.0f;
};

// logprobs [T] and lse [T] (log-sum-exp of each row of logits); entropy [T] (nullable) =
// -sum_v p log p of each row, from the same pass (logprobs and lse are the same bits either way).
void logprob_forward_cpu(float* logprobs, float* lse, const float* hidden, const float* weight, const int32_t* targets,
                         LogprobShape shape, float* scratch, float* entropy = nullptr);

// d logit_tv = g_t ([v == target_t] - p_tv) + h_t (-p_tv (log p_tv + H_t)), g = dlogprobs [T],
// h = dentropy [T] (nullable; then entropy may be null too; H = the forward's entropy): the same
// dlogits as logprob_backward_cuda. dhidden [T, C] += dlogits @ weight; dweight [V, C] +=
// dlogits^T @ hidden. Rows with g and h both zero contribute nothing and are skipped (masked
// prompt tokens cost no vocab work).
void logprob_backward_cpu(float* dhidden, float* dweight, const float* dlogprobs, const float* hidden,
                          const float* weight, const int32_t* targets, const float* lse, LogprobShape shape,
                          float* scratch, const float* dentropy = nullptr, const float* entropy = nullptr);

// CUDA (kernels/cuda/logprob.cu), device pointers: hidden [T, C] bf16, weight [V, C] bf16 (bf16 =
// uint16_t bits), targets [T]. Logits are made one [chunk_tokens x chunk_vocab] f32 tile at a time
// by cuBLASLt (runtime/gemm.h) into the caller's workspace; the forward folds each tile into a
// running (max, sum, entropy) state per token, so no [T x V] buffer exists.
struct LogprobCudaShape {
  int64_t tokens = 0, hidden = 0, vocab = 0, chunk_tokens = 1024, chunk_vocab = 16384;  // ~100 MB of tiles
  float logit_scale = 1.0f;  // as LogprobShape's: the GEMM's alpha
};
// Device bytes for either direction (tiles, compacted rows, per-token state).
size_t logprob_cuda_workspace_bytes(const LogprobCudaShape& shape);

// logprobs [T] = log softmax(logits)[target], lse [T] = log-sum-exp of each row, entropy [T] =
// -sum p log p (may be null), all f32.
void logprob_forward_cuda(float* logprobs, float* lse, float* entropy, const uint16_t* hidden, const uint16_t* weight,
                          const int32_t* targets, const LogprobCudaShape& shape, void* workspace,
                          size_t workspace_bytes, const CudaStream& stream);

// d logit_tv = g_t ([v == target_t] - p_tv) + h_t (-p_tv (log p_tv + H_t)), g = dlogprobs,
// h = dentropy (may be null; then entropy may be null too). Only tokens with g or h non-zero are
// gathered (compacted in token order, one device-to-host copy of their count, which synchronises
// the stream); for them each tile's logits are recomputed, turned into bf16 dlogits, and two
// GEMMs accumulate dweight [V, C] f32 += dlogits^T hidden and a compact f32 dhidden, added to
// dhidden [T, C] bf16 at the end (both may be null). Masked tokens cost nothing and their dhidden
// rows are not touched.
void logprob_backward_cuda(uint16_t* dhidden, float* dweight, const float* dlogprobs, const float* dentropy,
                           const uint16_t* hidden, const uint16_t* weight, const int32_t* targets, const float* lse,
                           const float* entropy, const LogprobCudaShape& shape, void* workspace,
                           size_t workspace_bytes, const CudaStream& stream);

}  // namespace sqlrl
