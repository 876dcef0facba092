// Sampling: greedy, truncations, the reported log-probs (computed by hand here in float64), and
// the Philox keying (same (seed, sequence, position) -> same token).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/sampling.h"

namespace sqlrl {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.5f, -1.0f, 3.0f, 0.5f};

double log_softmax(const std::vector<float>& z, size_t i, double t) {
  double sum = 0;
  for (float v : z) sum += std::exp(v / t);
  return z[i] / t - std::log(sum);
}

TEST(Sampling, GreedyTakesTheFirstMaximum) {
  SamplingScratch s;
  SampledToken r = sample_token_cpu(kLogits.data(), 6, {0.0f, 0, 1.0f, 1}, 0, 0, s);
  EXPECT_EQ(r.token, 1);  // logits 1 and 4 tie at 3.0
  EXPECT_EQ(r.logprob, 0.0f);
  EXPECT_NEAR(r.logprob_t1, log_softmax(kLogits, 1, 1.0), 1e-6);
}

TEST(Sampling, TopKOneIsGreedyWithCertainty) {
  SamplingScratch s;
  for (uint64_t pos = 0; pos < 20; ++pos) {
    SampledToken r = sample_token_cpu(kLogits.data(), 6, {0.7f, 1, 1.0f, 9}, 3, pos, s);
    EXPECT_EQ(r.token, 1);
    EXPECT_NEAR(r.logprob, 0.0f, 1e-7);
  }
}

TEST(Sampling, LogprobsAreUnderTheTruncatedTemperedDistribution) {
  // T = 0.5, top-k 3 keeps tokens {1, 4, 2} (ties by id); top-p 0.9 then: tempered weights
  // e^6, e^6, e^5 -> cumulative 0.4223, 0.8446, 1.0, so all three stay (0.8446 < 0.9).
  SamplingScratch s;
  for (uint64_t pos = 0; pos < 50; ++pos) {
    SampledToken r = sample_token_cpu(kLogits.data(), 6, {0.5f, 3, 0.9f, 5}, 1, pos, s);
    ASSERT_TRUE(r.token == 1 || r.token == 4 || r.token == 2) << r.token;
    double denom = 2 * std::exp(6.0) + std::exp(5.0);
    EXPECT_NEAR(r.logprob, kLogits[r.token] / 0.5 - std::log(denom), 1e-6);
    EXPECT_NEAR(r.logprob_t1, log_softmax(kLogits, static_cast<size_t>(r.token), 1.0), 1e-6);
  }
  // top-p 0.8 stops after the two 3.0 logits (cumulative 0.8446 >= 0.8).
  for (uint64_t pos = 0; pos < 50; ++pos) {
    SampledToken r = sample_token_cpu(kLogits.data(), 6, {0.5f, 0, 0.8f, 5}, 1, pos, s);
    ASSERT_TRUE(r.token == 1 || r.token == 4) << r.token;
    EXPECT_NEAR(r.logprob, std::log(0.5), 1e-6);
  }
}

TEST(Sampling, DrawsAreKeyedBySeedSequenceAndPosition) {
  SamplingScratch s;
  std::vector<int32_t> a, b, c;
  for (uint64_t pos = 0; pos < 64; ++pos) {
    a.push_back(sample_token_cpu(kLogits.data(), 6, {1.0f, 0, 1.0f, 77}, 5, pos, s).token);
    b.push_back(sample_token_cpu(kLogits.data(), 6, {1.0f, 0, 1.0f, 77}, 5, pos, s).token);
    c.push_back(sample_token_cpu(kLogits.data(), 6, {1.0f, 0, 1.0f, 77}, 6, pos, s).token);
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampling, FrequenciesFollowTheDistribution) {
  SamplingScratch s;
  std::vector<int> counts(6, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[sample_token_cpu(kLogits.data(), 6, {1.0f, 0, 1.0f, 123}, 0, i, s).token];
  for (size_t v = 0; v < 6; ++v) {
    double p = std::exp(log_softmax(kLogits, v, 1.0));
    double sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(counts[v], n * p, 5 * sd + 1) << "token " << v;  // 5 standard deviations
  }
}

TEST(Sampling, BadParametersAreErrors) {
  SamplingScratch s;
  EXPECT_THROW(sample_token_cpu(kLogits.data(), 6, {-1.0f, 0, 1.0f, 0}, 0, 0, s), std::exception);
  EXPECT_THROW(sample_token_cpu(kLogits.data(), 6, {1.0f, 0, 0.0f, 0}, 0, 0, s), std::exception);
}

}  // namespace
}  // namespace sqlrl
