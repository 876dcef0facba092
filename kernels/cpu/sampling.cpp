#include "kernels/sampling.h"

#include <algorithm>
#include <cfloat>
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

// Candidate order: descending logit, ties by lower token id. The order (and so the token a given
// uniform draw picks) is a pure function of the logits.
struct CandidateBefore {
  const float* logits;
  bool operator()(int32_t a, int32_t b) const { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); }
};

// Nucleus (top_k 0, top_p < 1) without sorting the vocabulary. A histogram of the probability
// mass over 1024 logit buckets (top bucket first) finds the logit bucket where the running mass
// reaches top_p; only the tokens in that bucket and above (a prefix of the candidate order, since
// equal logits share a bucket) are sorted and walked. The full-sort path divides by the
// vocabulary's sum taken in candidate order; here the sum is taken in id order, which can differ
// from it in the last bits (each sum is within vocab * 2^-53 relative of the exact one). So the
// cut is accepted only when every running total stays more than twice that bound from top_p.
// Returns 0 (the caller sorts everything) when it is not, or when the candidates are over half
// the vocabulary (a full sort then costs about as much). Otherwise returns the nucleus size with
// order[0, keep) in candidate order and probs[0, keep) their probabilities: the same numbers the
// full-sort path computes.
int64_t select_nucleus(const float* logits, int64_t vocab, double inv_t, float top_p, SamplingScratch& scratch) {
  constexpr int kBuckets = 1024;
  // The bucket range spans the finite logits: masked (-inf) ids fall in the last bucket.
  double top = -INFINITY, bottom = INFINITY;
  for (int64_t v = 0; v < vocab; ++v) {
    top = std::max(top, static_cast<double>(logits[v]));
    if (logits[v] > -INFINITY) bottom = std::min(bottom, static_cast<double>(logits[v]));
  }
  if (!std::isfinite(top)) return 0;
  const double range = top - bottom, scale = range > 0.0 ? kBuckets / range : 0.0;
  auto bucket_of = [&](float logit) {
    const double t = (top - static_cast<double>(logit)) * scale;
    return t < kBuckets - 1 ? static_cast<int>(t) : kBuckets - 1;  // also catches inf
  };
  auto& by_id = scratch.by_id;
  by_id.resize(static_cast<size_t>(vocab));
  const double m = top * inv_t;
  double total = 0.0, mass[kBuckets] = {};
  int64_t count[kBuckets] = {};
  for (int64_t v = 0; v < vocab; ++v) {
    by_id[v] = static_cast<float>(std::exp(static_cast<double>(logits[v]) * inv_t - m));
    total += by_id[v];
    const int b = bucket_of(logits[v]);
    mass[b] += by_id[v];
    ++count[b];
  }
  const double margin = 8.0 * static_cast<double>(vocab) * DBL_EPSILON;
  int last = 0;
  int64_t candidates = count[0];
  for (double running = mass[0]; last < kBuckets - 1 && running < (top_p + margin) * total;) {
    ++last;
    running += mass[last];
    candidates += count[last];
  }
  if (2 * candidates > vocab) return 0;
  auto& order = scratch.order;
  order.clear();
  for (int64_t v = 0; v < vocab; ++v)
    if (bucket_of(logits[v]) <= last) order.push_back(static_cast<int32_t>(v));
  std::sort(order.begin(), order.end(), CandidateBefore{logits});
  auto& probs = scratch.probs;
  probs.resize(order.size());
  double cumulative = 0.0;
  for (size_t i = 0; i < order.size(); ++i) {
    const double previous = cumulative;
    probs[i] = by_id[order[i]];
    cumulative += probs[i] / total;
    if (cumulative >= top_p) {
      if (cumulative < top_p + margin || previous >= top_p - margin) return 0;
      return static_cast<int64_t>(i) + 1;
    }
  }
  return 0;  // the bucket masses summed differently: let the full sort decide
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
  auto& order = scratch.order;
  auto& probs = scratch.probs;
  const bool top_k_cut = params.top_k > 0 && params.top_k < vocab;
  int64_t keep = top_k_cut || params.top_p == 1.0f ? 0 : select_nucleus(logits, vocab, inv_t, params.top_p, scratch);
  if (keep == 0) {
    order.resize(static_cast<size_t>(vocab));
    for (int64_t v = 0; v < vocab; ++v) order[v] = static_cast<int32_t>(v);
    const CandidateBefore before{logits};
    keep = vocab;
    if (top_k_cut) {
      keep = params.top_k;
      std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
    } else {
      std::sort(order.begin(), order.end(), before);
    }
    probs.resize(static_cast<size_t>(keep));
    double m = static_cast<double>(logits[order[0]]) * inv_t, sum = 0.0;
    for (int64_t i = 0; i < keep; ++i) {
      probs[i] = static_cast<float>(std::exp(static_cast<double>(logits[order[i]]) * inv_t - m));
      sum += probs[i];
    }
    if (params.top_p < 1.0f) {
      // Smallest prefix whose probability reaches top_p (at least one token).
      double cumulative = 0.0;
      for (int64_t i = 0; i < keep; ++i) {
        cumulative += probs[i] / sum;
        if (cumulative >= params.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
  }
  double sum = 0.0;
  for (int64_t i = 0; i < keep; ++i) sum += probs[i];
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
