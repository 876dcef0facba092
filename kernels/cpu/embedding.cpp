#include "kernels/embedding.h"

#include <cstring>

#include "runtime/error.h"
#include "runtime/thread_pool.h"

namespace sqlrl {

namespace {
void check_tokens(const int32_t* tokens, int64_t num_tokens, int64_t vocab) {
  for (int64_t t = 0; t < num_tokens; ++t)
    check(tokens[t] >= 0 && tokens[t] < vocab, "embedding: token ", tokens[t], " at index ", t,
          " is outside the vocabulary [0, ", vocab, ")");
}
}  // namespace

void embedding_forward_cpu(float* out, const float* table, const int32_t* tokens, int64_t num_tokens, int64_t vocab,
                           int64_t dim) {
  check_tokens(tokens, num_tokens, vocab);
  for (int64_t t = 0; t < num_tokens; ++t)
    std::memcpy(out + t * dim, table + static_cast<int64_t>(tokens[t]) * dim, sizeof(float) * dim);
}

void embedding_backward_cpu(float* dtable, const float* dout, const int32_t* tokens, int64_t num_tokens, int64_t vocab,
                            int64_t dim) {
  check_tokens(tokens, num_tokens, vocab);
  default_thread_pool().parallel_for(static_cast<size_t>(dim), 16, [&](size_t begin, size_t end) {
    for (int64_t t = 0; t < num_tokens; ++t) {
      float* row = dtable + static_cast<int64_t>(tokens[t]) * dim;
      const float* g = dout + t * dim;
      for (size_t i = begin; i < end; ++i) row[i] += g[i];
    }
  });
}

}  // namespace sqlrl
