#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"
#include "runtime/philox.h"

namespace sqlrl {

namespace {

// log softmax(logits)[token] in double, for both reported log-probs.
float log_softmax_at(const float* logits, int64_t vocab, int32_t token, float inv_temperature) {
  double m = -INFINITY;
  for (int64_t v = 0; v < vocab; ++v) m = std::max(m, static_cast<double>(logits[v]) * inv_temperature);
  double sum = 0.0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) * inv_temperature - m);
  return static_cast<float>(static_cast<double>(logits[token]) * inv_temperature - m - std::log(sum));
}

}  // namespace

SampledToken sample_token_cpu(const float* logits, int64_t vocab, const SamplingParams& params, uint64_t sequence_id,
                              uint64_t position, SamplingScratch& scratch) {
  check(vocab > 0, "sampling: empty vocabulary");
  check(params.temperature >= 0.0f && std::isfinite(params.temperature), "sampling: temperature must be >= 0, got ",
        params.temperature);
  check(params.top_p > 0.0f && params.top_p <= 1.0f, "sampling: top_p must be in (0, 1], got ", params.top_p);
  check(params.top_k >= 0, "sampling: top_k must be >= 0, got ", params.top_k);
  SampledToken result;
  if (params.temperature == 0.0f) {
    result.token = static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);  // first maximum
    result.logprob = 0.0f;
    result.logprob_t1 = log_softmax_at(logits, vocab, result.token, 1.0f);
    return result;
  }
  const double inv_t = 1.0 / params.temperature;
  // Candidates in descending logit order, ties by token id: the order (and so the token a given
  // uniform draw picks) is a pure function of the logits.
  auto& order = scratch.order;
  order.resize(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) order[v] = static_cast<int32_t>(v);
  auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int64_t keep = vocab;
  if (params.top_k > 0 && params.top_k < vocab) {
    keep = params.top_k;
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  auto& probs = scratch.probs;
  probs.resize(static_cast<size_t>(keep));
  double m = static_cast<double>(logits[order[0]]) * inv_t, sum = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    probs[i] = static_cast<float>(std::exp(static_cast<double>(logits[order[i]]) * inv_t - m));
    sum += probs[i];
  }
  if (params.top_p < 1.0f) {
    // Smallest prefix whose probability reaches top_p (at least one token).
    double cumulative = 0.0;
    int64_t cut = keep;
    for (int64_t i = 0; i < keep; ++i) {
      cumulative += probs[i] / sum;
      if (cumulative >= params.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    sum = 0.0;
    for (int64_t i = 0; i < keep; ++i) sum += probs[i];
  }
  Philox4 draw = philox_draw(params.seed, sequence_id, position);
  double target = static_cast<double>(uniform_from_bits(draw.v[0])) * sum;
  int64_t chosen = keep - 1;
  double cumulative = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    cumulative += probs[i];
    if (target < cumulative) {
      chosen = i;
      break;
    }
  }
  result.token = order[chosen];
  result.logprob = static_cast<float>(std::log(probs[chosen] / sum));
  result.logprob_t1 = log_softmax_at(logits, vocab, result.token, 1.0f);
  return result;
}

}  // namespace sqlrl
