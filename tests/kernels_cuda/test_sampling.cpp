// CUDA sampling against the CPU sampler: same token for greedy and for fixed (seed, sequence,
// position) draws, except where the draw or the top-p cut lies within 1e-5 of a boundary (there the
// two paths' float exp and summation order may legitimately disagree); log-probs within float
// rounding; a chi-square test of the truncated distribution; a full Qwen3-width row.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "kernels/sampling.h"
#include "runtime/device_memory.h"
#include "runtime/philox.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace sqlrl {
namespace {

using namespace sqlrl::testing;

// The CPU sampler's decision, recomputed in the test with the distance of its two fragile
// comparisons (the top-p cut and the draw) from their boundaries, as a fraction of the kept mass.
double decision_margin(const float* logits, int64_t vocab, const SamplingParams& p, uint64_t seq, uint64_t pos) {
  if (p.temperature == 0.0f) return 1.0;  // greedy compares floats exactly on both sides: always decisive
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  int64_t keep = p.top_k > 0 && p.top_k < vocab ? p.top_k : vocab;
  double inv_t = 1.0 / p.temperature, m = logits[order[0]] * inv_t, sum = 0;
  std::vector<double> probs(static_cast<size_t>(keep));
  for (int64_t i = 0; i < keep; ++i) sum += probs[i] = static_cast<float>(std::exp(logits[order[i]] * inv_t - m));
  double margin = 1.0;
  if (p.top_p < 1.0f) {
    double cumulative = 0;
    for (int64_t i = 0; i < keep; ++i) {
      double before = cumulative / sum;
      cumulative += probs[i];
      margin = std::min(margin, std::fabs(cumulative / sum - p.top_p));
      if (cumulative / sum >= p.top_p) {
        margin = std::min(margin, std::fabs(p.top_p - before));
        keep = i + 1;
        break;
      }
    }
    sum = 0;
    for (int64_t i = 0; i < keep; ++i) sum += probs[i];
  }
  double target = static_cast<double>(uniform_from_bits(philox_draw(p.seed, seq, pos).v[0])) * sum, cumulative = 0;
  for (int64_t i = 0; i < keep; ++i) {
    margin = std::min(margin, std::fabs(cumulative - target) / sum);
    cumulative += probs[i];
    margin = std::min(margin, std::fabs(cumulative - target) / sum);
    if (target < cumulative) break;
  }
  return margin;
}

std::vector<SampledToken> run_gpu(const std::vector<float>& logits, int64_t rows, int64_t vocab,
                                  const std::vector<SamplingRequest>& requests) {
  Tensor glogits = gpu(logits, DType::F32);
  Tensor greq = empty({static_cast<int64_t>(requests.size() * sizeof(SamplingRequest))}, DType::U8, cuda_device(0));
  memcpy_between(greq.data(), cuda_device(0), requests.data(), cpu_device(), requests.size() * sizeof(SamplingRequest));
  Tensor gout = empty({static_cast<int64_t>(rows * sizeof(SampledToken))}, DType::U8, cuda_device(0));
  std::vector<SampledToken> out(static_cast<size_t>(rows), SampledToken{-1, NAN, NAN});  // poison
  memcpy_between(gout.data(), cuda_device(0), out.data(), cpu_device(), out.size() * sizeof(SampledToken));
  sample_tokens_cuda(reinterpret_cast<SampledToken*>(gout.data()), f32_ptr(glogits), rows, vocab, vocab,
                     reinterpret_cast<const SamplingRequest*>(greq.data()), default_stream());
  memcpy_between(out.data(), cpu_device(), gout.data(), cuda_device(0), out.size() * sizeof(SampledToken));
  return out;
}

// Compares GPU and CPU row by row; returns how many rows were decisive (far from a boundary).
int64_t compare_with_cpu(const std::vector<float>& logits, int64_t rows, int64_t vocab,
                         const std::vector<SamplingRequest>& requests) {
  std::vector<SampledToken> got = run_gpu(logits, rows, vocab, requests);
  SamplingScratch scratch;
  int64_t decisive = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * vocab;
    const SamplingRequest& q = requests[r];
    SampledToken want = sample_token_cpu(row, vocab, q.params, q.sequence_id, q.position, scratch);
    SCOPED_TRACE(::testing::Message() << "row " << r << " T " << q.params.temperature << " top_k " << q.params.top_k
                                      << " top_p " << q.params.top_p);
    if (got[r].token < 0 || got[r].token >= vocab) {
      ADD_FAILURE() << "token " << got[r].token << ": row not written or out of range";
      continue;
    }
    // logprob_t1 is the log-softmax at the returned token: checkable whether or not tokens agree.
    SampledToken at_gpu_token = want;
    if (got[r].token != want.token) {
      double m = *std::max_element(row, row + vocab), s = 0;
      for (int64_t v = 0; v < vocab; ++v) s += std::exp(double{row[v]} - m);
      at_gpu_token.logprob_t1 = static_cast<float>(row[got[r].token] - m - std::log(s));
    }
    // Both are float results of double math on the same floats: 1e-5 covers float exp's ulp.
    EXPECT_NEAR(got[r].logprob_t1, at_gpu_token.logprob_t1, 1e-5);
    if (decision_margin(row, vocab, q.params, q.sequence_id, q.position) < 1e-5) continue;
    ++decisive;
    EXPECT_EQ(got[r].token, want.token);
    EXPECT_NEAR(got[r].logprob, want.logprob, 1e-5);
  }
  return decisive;
}

TEST(CudaSampling, SameTokensAsCpuForFixedSeeds) {
  SQLRL_REQUIRE_CUDA();
  Rng rng(fresh_seed());
  const int64_t vocab = 5003;
  const std::vector<SamplingParams> settings = {
      {0.0f, 0, 1.0f, 1},     {1.0f, 0, 1.0f, 2},    {0.6f, 0, 0.95f, 3}, {0.7f, 20, 1.0f, 4},
      {1.3f, 50, 0.9f, 5},    {0.8f, 1, 1.0f, 6},    {1.0f, 0, 0.5f, 7},  {0.3f, 4000, 0.99f, 8}};
  const int64_t rows = 400;
  std::vector<float> logits = rng.uniform(static_cast<size_t>(rows * vocab), -8.0f, 8.0f);
  std::vector<SamplingRequest> requests(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    requests[r].params = settings[r % settings.size()];
    requests[r].params.seed += rng.gen();
    requests[r].sequence_id = static_cast<uint64_t>(r / 8);
    requests[r].position = rng.gen() % 100000;
    if (r % 3 == 0)  // peaked rows, like a confident model: a few large logits
      for (int k = 0; k < 5; ++k) logits[r * vocab + static_cast<int64_t>(rng.gen() % vocab)] += 12.0f;
  }
  int64_t decisive = compare_with_cpu(logits, rows, vocab, requests);
  EXPECT_GE(decisive, rows * 9 / 10) << "too few rows far from a boundary to mean anything";
}

TEST(CudaSampling, TiesAreBrokenByLowerIdAsOnCpu) {
  SQLRL_REQUIRE_CUDA();
  Rng rng(fresh_seed());
  const int64_t vocab = 300, rows = 64;
  // Logits on a coarse grid: many exact ties, including at the top-k boundary and the maximum.
  std::vector<float> logits(static_cast<size_t>(rows * vocab));
  for (float& l : logits) l = static_cast<float>(static_cast<int>(rng.gen() % 9)) * 0.5f;
  std::vector<SamplingRequest> requests(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    requests[r].params = r % 2 == 0 ? SamplingParams{0.9f, 7, 1.0f, rng.gen()} : SamplingParams{0.0f, 0, 1.0f, 0};
    requests[r].position = static_cast<uint64_t>(r);
  }
  compare_with_cpu(logits, rows, vocab, requests);
}

TEST(CudaSampling, FullQwenWidthRows) {
  SQLRL_REQUIRE_CUDA();
  Rng rng(fresh_seed());
  const int64_t vocab = 151936, rows = 12;
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(rows * vocab));
  for (float& l : logits) l = normal(rng.gen);
  std::vector<SamplingRequest> requests(static_cast<size_t>(rows));
  const std::vector<SamplingParams> settings = {{0.0f, 0, 1.0f, 1}, {1.0f, 0, 1.0f, 2}, {0.6f, 0, 0.95f, 3},
                                                {1.0f, 50, 1.0f, 4}};
  for (int64_t r = 0; r < rows; ++r) {
    requests[r].params = settings[r % settings.size()];
    requests[r].params.seed = rng.gen();
    requests[r].sequence_id = static_cast<uint64_t>(r);
    if (r >= 4)  // a model-like head: a handful of tokens far above the rest
      for (int k = 0; k < 8; ++k) logits[r * vocab + static_cast<int64_t>(rng.gen() % vocab)] += 15.0f + k;
  }
  compare_with_cpu(logits, rows, vocab, requests);
}

TEST(CudaSampling, TokensDoNotDependOnBatchComposition) {
  SQLRL_REQUIRE_CUDA();
  Rng rng(fresh_seed());
  const int64_t vocab = 2000, rows = 32;
  std::vector<float> logits = rng.uniform(static_cast<size_t>(rows * vocab), -5.0f, 5.0f);
  std::vector<SamplingRequest> requests(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    requests[r] = SamplingRequest{SamplingParams{0.8f, r % 2 == 0 ? 40 : 0, 0.9f, 11}, static_cast<uint64_t>(r), 5};
  std::vector<SampledToken> together = run_gpu(logits, rows, vocab, requests);
  // The same requests in reverse order, and row 7 alone: each request gets the same token.
  std::vector<float> reversed_logits;
  std::vector<SamplingRequest> reversed(requests.rbegin(), requests.rend());
  for (int64_t r = rows - 1; r >= 0; --r)
    reversed_logits.insert(reversed_logits.end(), logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
  std::vector<SampledToken> apart = run_gpu(reversed_logits, rows, vocab, reversed);
  for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(together[r].token, apart[rows - 1 - r].token) << "row " << r;
  std::vector<float> row7(logits.begin() + 7 * vocab, logits.begin() + 8 * vocab);
  EXPECT_EQ(run_gpu(row7, 1, vocab, {requests[7]})[0].token, together[7].token);
}

TEST(CudaSampling, TruncatedDistributionPassesChiSquare) {
  SQLRL_REQUIRE_CUDA();
  Rng rng(fresh_seed());
  const std::vector<float> base = {2.0f, 1.5f, 1.4f, 0.3f, -0.5f, 1.0f, -2.0f, 0.9f};
  const int64_t vocab = 8, draws = 20000;
  const SamplingParams params{0.8f, 5, 0.85f, rng.gen()};
  // Expected: tempered softmax over the top-5 ids {0, 1, 2, 5, 7}, then the top-p prefix, renormalised.
  std::vector<int32_t> order = {0, 1, 2, 5, 7};
  std::vector<double> w;
  double sum = 0;
  for (int32_t id : order) sum += w.emplace_back(std::exp((base[id] - base[0]) / 0.8));
  double cumulative = 0;
  size_t keep = order.size();
  for (size_t i = 0; i < order.size(); ++i)
    if ((cumulative += w[i]) / sum >= 0.85) {  // 4 kept: cumulative 0.788, then 0.9005
      keep = i + 1;
      break;
    }
  double kept = std::accumulate(w.begin(), w.begin() + static_cast<int64_t>(keep), 0.0);

  std::vector<float> logits;
  for (int64_t i = 0; i < draws; ++i) logits.insert(logits.end(), base.begin(), base.end());
  std::vector<SamplingRequest> requests(static_cast<size_t>(draws));
  for (int64_t i = 0; i < draws; ++i) requests[i] = SamplingRequest{params, 3, static_cast<uint64_t>(i)};
  std::vector<SampledToken> got = run_gpu(logits, draws, vocab, requests);
  std::vector<int64_t> counts(static_cast<size_t>(vocab), 0);
  for (const SampledToken& t : got) {
    ASSERT_TRUE(t.token >= 0 && t.token < vocab) << "token " << t.token;
    ++counts[t.token];
  }
  double chi2 = 0;
  for (size_t i = 0; i < keep; ++i) {
    double expected = draws * w[i] / kept;
    chi2 += (counts[order[i]] - expected) * (counts[order[i]] - expected) / expected;
  }
  int64_t outside = draws;
  for (size_t i = 0; i < keep; ++i) outside -= counts[order[i]];
  EXPECT_EQ(outside, 0) << "tokens outside the top-k / top-p set were drawn";
  // keep - 1 degrees of freedom (<= 4): chi-square 25 has p < 1e-4 at 4 dof, so a correct
  // sampler fails this about once in 10,000 runs; a wrong distribution of 20,000 draws lands far above.
  EXPECT_LT(chi2, 25.0) << "keep " << keep;
}

}  // namespace
}  // namespace sqlrl
