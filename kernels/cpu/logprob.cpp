#include "kernels/logprob.h"

#include <cmath>
#include <vector>

#include "kernels/matmul.h"
#include "runtime/error.h"
#include "runtime/thread_pool.h"

namespace sqlrl {

namespace {

void check_shape(const LogprobShape& s, const int32_t* targets) {
  check(s.chunk_tokens > 0, "logprob: chunk_tokens must be positive, got ", s.chunk_tokens);
  check(s.logit_scale > 0 && std::isfinite(s.logit_scale), "logprob: logit_scale must be positive and finite, got ",
        s.logit_scale);
  for (int64_t t = 0; t < s.tokens; ++t)
    check(targets[t] >= 0 && targets[t] < s.vocab, "logprob: target ", targets[t], " at token ", t,
          " is outside the vocabulary [0, ", s.vocab, ")");
}

// At scale 1 the row is left alone, so unscaled log-probs keep their bits.
void scale_row(float* row, int64_t n, float scale) {
  if (scale != 1.0f)
    for (int64_t v = 0; v < n; ++v) row[v] *= scale;
}

}  // namespace

void logprob_forward_cpu(float* logprobs, float* lse, const float* hidden, const float* weight, const int32_t* targets,
                         LogprobShape shape, float* scratch, float* entropy) {
  check_shape(shape, targets);
  const int64_t V = shape.vocab, C = shape.hidden;
  for (int64_t t0 = 0; t0 < shape.tokens; t0 += shape.chunk_tokens) {
    int64_t n = std::min(shape.chunk_tokens, shape.tokens - t0);
    matmul_forward_cpu(scratch, hidden + t0 * C, weight, nullptr, n, C, V);
    default_thread_pool().parallel_for(static_cast<size_t>(n), 1, [&](size_t begin, size_t end) {
      for (size_t r = begin; r < end; ++r) {
        float* row = scratch + r * V;
        scale_row(row, V, shape.logit_scale);
        float m = -INFINITY;
        for (int64_t v = 0; v < V; ++v) m = std::max(m, row[v]);
        double sum = 0.0;
        if (entropy) {
          // H = log s - q / s with s = sum e^(x - m), q = sum e^(x - m) (x - m): relative to the
          // max, so nothing large cancels; sum adds the same terms in the same order as below.
          double q = 0.0;
          for (int64_t v = 0; v < V; ++v) {
            double e = std::exp(row[v] - m);
            sum += e;
            if (e > 0.0) q += e * (static_cast<double>(row[v]) - m);  // a -inf logit adds 0, not NaN
          }
          entropy[t0 + r] = static_cast<float>(std::log(sum) - q / sum);
        } else {
          for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - m);
        }
        float l = m + static_cast<float>(std::log(sum));
        lse[t0 + r] = l;
        logprobs[t0 + r] = row[targets[t0 + r]] - l;
      }
    });
  }
}

void logprob_backward_cpu(float* dhidden, float* dweight, const float* dlogprobs, const float* hidden,
                          const float* weight, const int32_t* targets, const float* lse, LogprobShape shape,
                          float* scratch, const float* dentropy, const float* entropy) {
  check_shape(shape, targets);
  check(!dentropy || entropy, "logprob backward: dentropy needs the forward's entropy");
  const int64_t V = shape.vocab, C = shape.hidden;
  // Gather the rows that carry gradient into chunks of contiguous hidden copies.
  std::vector<int64_t> rows;
  for (int64_t t = 0; t < shape.tokens; ++t)
    if (dlogprobs[t] != 0.0f || (dentropy && dentropy[t] != 0.0f)) rows.push_back(t);
  std::vector<float> h(static_cast<size_t>(shape.chunk_tokens * C)), dh(static_cast<size_t>(shape.chunk_tokens * C));
  for (size_t r0 = 0; r0 < rows.size(); r0 += static_cast<size_t>(shape.chunk_tokens)) {
    int64_t n = std::min<int64_t>(shape.chunk_tokens, static_cast<int64_t>(rows.size() - r0));
    for (int64_t r = 0; r < n; ++r)
      std::copy(hidden + rows[r0 + r] * C, hidden + (rows[r0 + r] + 1) * C, h.begin() + r * C);
    matmul_forward_cpu(scratch, h.data(), weight, nullptr, n, C, V);
    default_thread_pool().parallel_for(static_cast<size_t>(n), 1, [&](size_t begin, size_t end) {
      for (size_t r = begin; r < end; ++r) {
        int64_t t = rows[r0 + r];
        float* row = scratch + r * V;
        scale_row(row, V, shape.logit_scale);
        // d/d(raw logit) = logit_scale * d/d(scaled logit)
        float g = dlogprobs[t] * shape.logit_scale, h = dentropy ? dentropy[t] * shape.logit_scale : 0.0f,
              l = lse[t];
        if (h == 0.0f) {  // the log-prob term alone keeps its bits
          for (int64_t v = 0; v < V; ++v) row[v] = -g * std::exp(row[v] - l);
        } else {  // dH/dz_v = -p_v (log p_v + H)
          const float H = entropy[t];
          for (int64_t v = 0; v < V; ++v) {
            const float log_p = row[v] - l, p = std::exp(log_p);
            row[v] = -g * p - h * p * (log_p + H);
          }
        }
        row[targets[t]] += g;
      }
    });
    std::fill(dh.begin(), dh.begin() + n * C, 0.0f);
    matmul_backward_cpu(dhidden ? dh.data() : nullptr, dweight, nullptr, scratch, h.data(), weight, n, C, V);
    if (dhidden)
      for (int64_t r = 0; r < n; ++r) {
        float* dst = dhidden + rows[r0 + r] * C;
        for (int64_t c = 0; c < C; ++c) dst[c] += dh[r * C + c];
      }
  }
}

}  // namespace sqlrl
