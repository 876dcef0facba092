// Next-token sampling from one row of logits: greedy (temperature 0), or temperature, then
// top-k, then top-p (nucleus) over the tempered distribution, renormalised. The uniform draw is
// Philox keyed by (seed, sequence id, position) (runtime/philox.h), so a sequence's tokens do
// not depend on which other sequences share its batch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/stream.h"

namespace sqlrl {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  int64_t top_k = 0;         // 0 = no top-k
  float top_p = 1.0f;        // 1 = no nucleus cut
  uint64_t seed = 0;
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;     // under the distribution actually sampled from (0 for greedy)
  float logprob_t1 = 0.0f;  // under softmax(logits), temperature 1, no truncation
};

// Reusable per-thread buffers (sized to the vocabulary on first use).
struct SamplingScratch {
  std::vector<float> probs;  // candidates' probabilities, in candidate order
  std::vector<int32_t> order;
  std::vector<float> by_id;  // every token's probability, by token id (nucleus without top-k)
};

SampledToken sample_token_cpu(const float* logits, int64_t vocab, const SamplingParams& params, uint64_t sequence_id,
                              uint64_t position, SamplingScratch& scratch);

// CUDA (kernels/cuda/sampling.cu): rows of logits [rows, ld] f32 (the first `vocab` columns are
// used), requests and out [rows] in device memory; rows <= 65535. No sort: each row is spread over
// several blocks that histogram it into 1024 logit bins (count and tempered weight), combine the
// histograms exactly, and find the thresholds (the k-th token, the top-p cut, the token the uniform
// draw lands on) in the bins, then among the few elements of those bins, ordered by a 64-bit key
// (logit order, ties by lower id: the CPU path's candidate order). Probabilities are the CPU
// path's float exps, summed in 2^-40 fixed point so sums are exact and order-free: results are
// deterministic and do not depend on the batch. The uniform is the CPU path's Philox draw, so the
// same token comes out wherever the two paths' sums are not within ~1e-7 of the kept mass of a
// boundary (kernels/cuda/sampling.cu's header: float exp, fixed-point rounding). Requests must
// satisfy the CPU path's checks (temperature >= 0, 0 < top_p <= 1, top_k >= 0); logits must be
// finite (-inf allowed, never drawn). workspace: sample_tokens_cuda_workspace_bytes(rows, vocab)
// device bytes (~12 KB per block's histogram, < 10 MB for any batch of the Qwen vocabulary), the
// caller's, needing no initialisation; two kernel launches per call, no allocation: CUDA-graph
// capturable.
struct SamplingRequest {
  SamplingParams params;
  uint64_t sequence_id = 0, position = 0;
};
size_t sample_tokens_cuda_workspace_bytes(int64_t rows, int64_t vocab);
void sample_tokens_cuda(SampledToken* out, const float* logits, int64_t rows, int64_t vocab, int64_t ld,
                        const SamplingRequest* requests, void* workspace, size_t workspace_bytes,
                        const CudaStream& stream);

}  // namespace sqlrl
