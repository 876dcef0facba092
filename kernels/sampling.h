// Next-token sampling from one row of logits: greedy (temperature 0), or temperature, then
// top-k, then top-p (nucleus) over the tempered distribution, renormalised. The uniform draw is
// Philox keyed by (seed, sequence id, position) (runtime/philox.h), so a sequence's tokens do
// not depend on which other sequences share its batch.
#pragma once
#include <cstdint>
#include <vector>

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
  std::vector<float> probs;
  std::vector<int32_t> order;
};

SampledToken sample_token_cpu(const float* logits, int64_t vocab, const SamplingParams& params, uint64_t sequence_id,
                              uint64_t position, SamplingScratch& scratch);

}  // namespace sqlrl
