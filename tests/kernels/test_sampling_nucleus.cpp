// The nucleus path of sample_token_cpu (top_k 0, top_p < 1) selects candidates instead of sorting
// the vocabulary; it must return exactly what a full sort returns. The reference below is the
// full-sort implementation it replaced, kept here verbatim in its arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/sampling.h"
#include "runtime/philox.h"

namespace sqlrl {
namespace {

SampledToken reference_sample(const float* logits, int64_t vocab, const SamplingParams& params, uint64_t sequence_id,
                              uint64_t position) {
  auto log_softmax_at = [&](int32_t token) {
    double m = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v) m = std::max(m, static_cast<double>(logits[v]));
    double sum = 0.0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - m);
    return static_cast<float>(static_cast<double>(logits[token]) - m - std::log(sum));
  };
  const double inv_t = 1.0 / params.temperature;
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) order[v] = static_cast<int32_t>(v);
  auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int64_t keep = vocab;
  if (params.top_k > 0 && params.top_k < vocab) {
    keep = params.top_k;
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  std::vector<float> probs(static_cast<size_t>(keep));
  double m = static_cast<double>(logits[order[0]]) * inv_t, sum = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    probs[i] = static_cast<float>(std::exp(static_cast<double>(logits[order[i]]) * inv_t - m));
    sum += probs[i];
  }
  if (params.top_p < 1.0f) {
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
  SampledToken result;
  result.token = order[chosen];
  result.logprob = static_cast<float>(std::log(probs[chosen] / sum));
  result.logprob_t1 = log_softmax_at(result.token);
  return result;
}

// Random rows: Gaussian logits at several spreads (nuclei from one token to most of the
// vocabulary), some rounded to a coarse grid so many logits tie, some with a few dominant ids,
// some with a third of the upper half masked to -inf.
std::vector<float> random_row(std::mt19937_64& rng, int64_t vocab, int kind) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float spread[] = {0.3f, 1.0f, 3.0f, 8.0f};
  std::vector<float> row(static_cast<size_t>(vocab));
  for (auto& x : row) x = normal(rng) * spread[kind % 4];
  if (kind % 3 == 1)
    for (auto& x : row) x = std::round(x * 2.0f) / 2.0f;  // ties
  if (kind % 5 == 2)
    for (int i = 0; i < 4; ++i) row[rng() % vocab] = 12.0f;  // a few tied leaders
  if (kind % 4 == 3)
    for (int64_t v = vocab / 2; v < vocab; v += 3) row[v] = -INFINITY;  // masked ids
  return row;
}

void expect_same(const std::vector<float>& row, const SamplingParams& params, uint64_t seq, uint64_t pos,
                 SamplingScratch& scratch) {
  const int64_t vocab = static_cast<int64_t>(row.size());
  SampledToken got = sample_token_cpu(row.data(), vocab, params, seq, pos, scratch);
  SampledToken want = reference_sample(row.data(), vocab, params, seq, pos);
  ASSERT_EQ(got.token, want.token) << "vocab " << vocab << " T " << params.temperature << " k " << params.top_k
                                   << " p " << params.top_p;
  // Bit-identical: the same float operations in the same order.
  EXPECT_EQ(got.logprob, want.logprob);
  EXPECT_EQ(got.logprob_t1, want.logprob_t1);
}

TEST(SamplingNucleus, SelectionMatchesTheFullSortOnRandomRows) {
  std::mt19937_64 rng(20261123);
  const int64_t vocabs[] = {8, 9, 100, 129, 1000, 5000, 32768};
  const float temperatures[] = {0.3f, 0.7f, 1.0f, 1.5f};
  const float top_ps[] = {0.05f, 0.5f, 0.9f, 0.95f, 0.99f, 0.999f, 1.0f};
  const int64_t top_ks[] = {0, 0, 0, 1, 5, 50};
  SamplingScratch scratch;
  int rows = 0;
  for (int64_t vocab : vocabs)
    for (int kind = 0; kind < 12; ++kind) {
      std::vector<float> row = random_row(rng, vocab, kind);
      for (int j = 0; j < 6; ++j) {
        SamplingParams params{temperatures[rng() % 4], top_ks[rng() % 6], top_ps[rng() % 7], rng()};
        expect_same(row, params, rng() % 100, rng() % 1000, scratch);
        ++rows;
      }
    }
  EXPECT_EQ(rows, 7 * 12 * 6);
}

TEST(SamplingNucleus, QwenSizedRowsMatchTheFullSort) {
  std::mt19937_64 rng(151936);
  SamplingScratch scratch;
  const float top_ps[] = {0.1f, 0.8f, 0.95f, 0.999f};
  for (int kind = 0; kind < 8; ++kind) {
    std::vector<float> row = random_row(rng, 151936, kind);
    SamplingParams params{kind % 2 ? 0.7f : 1.0f, 0, top_ps[kind % 4], rng()};
    for (uint64_t pos = 0; pos < 3; ++pos) expect_same(row, params, 7, pos, scratch);
  }
}

// Uniform logits put the running total exactly on top_p (0.5 of 4 equal tokens): the cut is then
// decided by the full sort, and the lower ids win.
TEST(SamplingNucleus, ExactTieOnTheCutKeepsLowerIds) {
  std::vector<float> row(256, 1.0f);
  SamplingScratch scratch;
  for (uint64_t pos = 0; pos < 32; ++pos) {
    SampledToken r = sample_token_cpu(row.data(), 256, {1.0f, 0, 0.5f, 3}, 0, pos, scratch);
    EXPECT_LT(r.token, 128);
    expect_same(row, {1.0f, 0, 0.5f, 3}, 0, pos, scratch);
  }
}

}  // namespace
}  // namespace sqlrl
