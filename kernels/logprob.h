// Fused lm_head + log-softmax + gather: logprob[t] = log softmax(hidden[t] @ weight^T)[target[t]]
// for weight [vocab, C]. The logits are made chunk_tokens rows at a time in `scratch`
// ([chunk_tokens, vocab] floats, the caller's), so [tokens x vocab] never exists at once
// (151,936 columns for Qwen3). The backward recomputes each chunk's logits from the saved
// log-sum-exp instead of keeping them.
#pragma once
#include <cstdint>

namespace sqlrl {

struct LogprobShape {
  int64_t tokens = 0, hidden = 0, vocab = 0, chunk_tokens = 0;
};

// logprobs [T] and lse [T] (log-sum-exp of each row of logits).
void logprob_forward_cpu(float* logprobs, float* lse, const float* hidden, const float* weight, const int32_t* targets,
                         LogprobShape shape, float* scratch);

// d logprob_t / d logit_tv = [v == target_t] - softmax_tv; with dlogprobs [T] given:
// dhidden [T, C] += dlogits @ weight; dweight [V, C] += dlogits^T @ hidden. Rows with a zero
// dlogprob contribute nothing and are skipped (masked prompt tokens cost no vocab work).
void logprob_backward_cpu(float* dhidden, float* dweight, const float* dlogprobs, const float* hidden,
                          const float* weight, const int32_t* targets, const float* lse, LogprobShape shape,
                          float* scratch);

}  // namespace sqlrl
