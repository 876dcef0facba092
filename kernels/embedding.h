// Token embedding lookup: out[t] = table[tokens[t]] for table [vocab, dim]. Token ids are
// checked against the vocabulary (bad input is an error, not an out-of-bounds read).
#pragma once
#include <cstdint>

namespace sqlrl {

void embedding_forward_cpu(float* out, const float* table, const int32_t* tokens, int64_t num_tokens, int64_t vocab,
                           int64_t dim);
// dtable[tokens[t]] += dout[t]; columns in parallel, tokens in order (deterministic).
void embedding_backward_cpu(float* dtable, const float* dout, const int32_t* tokens, int64_t num_tokens, int64_t vocab,
                            int64_t dim);

}  // namespace sqlrl
