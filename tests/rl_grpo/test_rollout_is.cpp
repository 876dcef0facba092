// rollout_importance_weights (rl/grpo/rollout_is.h) on hand-made micro-batches, each figure from
// the definitions (verl docs/advance/rollout_is.md): per-token and per-sequence weights, the
// sequence product, truncation at the cap, rejection by bounds (1 / upper by default), masked
// tokens and sequences without a trained token left alone, and the metric sums.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "rl/grpo/rollout_is.h"
#include "runtime/error.h"

namespace sqlrl::rl {
namespace {

// Three sequences: [0, 3) with a masked-out middle token, [3, 3) empty, [3, 5) with no trained
// token, [5, 7) two trained tokens. log rho = old - sampler per token below.
struct Batch {
  std::vector<float> old = {-1.0f, -2.0f, -1.5f, -0.5f, -0.5f, -3.0f, -2.0f};
  std::vector<float> sampler = {-1.5f, -9.0f, -1.0f, -0.5f, -0.5f, -3.2f, -2.1f};
  std::vector<uint8_t> mask = {1, 0, 1, 0, 0, 1, 1};
  std::vector<int32_t> cu = {0, 3, 3, 5, 7};
  std::vector<float> w = std::vector<float>(7, -1.0f);  // poisoned: every entry must be written
  MismatchSums run(RolloutIsMode mode, RolloutIsLevel level, float upper, float lower = 0.0f) {
    return rollout_importance_weights(old.data(), sampler.data(), mask.data(), cu.data(), 4, {mode, level, upper, lower},
                                      w.data());
  }
};

TEST(RolloutIs, TokenTruncateCapsEachRatio) {
  Batch b;
  const MismatchSums s = b.run(RolloutIsMode::Truncate, RolloutIsLevel::Token, 1.5f);
  EXPECT_FLOAT_EQ(b.w[0], 1.5f);                            // e^0.5 = 1.65 capped
  EXPECT_EQ(b.w[1], 1.0f);                                  // not trained: 1, whatever its ratio
  EXPECT_FLOAT_EQ(b.w[2], static_cast<float>(std::exp(-0.5)));
  EXPECT_EQ(b.w[3], 1.0f);
  EXPECT_FLOAT_EQ(b.w[5], static_cast<float>(std::exp(0.2)));
  EXPECT_NEAR(b.w[6], std::exp(0.1), 1e-6);
  EXPECT_EQ(s.tokens, 4);
  EXPECT_EQ(s.sequences, 2);  // the empty one and the one without a trained token do not count
  EXPECT_EQ(s.truncated, 1);
  EXPECT_EQ(s.masked, 0);
  EXPECT_NEAR(s.log_ratio, 0.5 - 0.5 + 0.2 + 0.1, 1e-6);
  EXPECT_NEAR(s.abs_log_ratio, 0.5 + 0.5 + 0.2 + 0.1, 1e-6);
  const double k3 = (std::exp(0.5) - 1.5) + (std::exp(-0.5) - 0.5) + (std::exp(0.2) - 1.2) + (std::exp(0.1) - 1.1);
  EXPECT_NEAR(s.k3, k3, 1e-6);
  EXPECT_NEAR(s.weight, std::exp(0.5) + std::exp(-0.5) + std::exp(0.2) + std::exp(0.1), 1e-5);  // before the cap
  EXPECT_EQ(b.mask, (std::vector<uint8_t>{1, 0, 1, 0, 0, 1, 1}));  // truncation never masks
}

TEST(RolloutIs, TokenMaskRejectsOutsideTheBoundsDefaultLowerIsTheReciprocal) {
  Batch b;
  // upper 1.5, lower 1/1.5 = 0.667: e^0.5 = 1.65 out, e^-0.5 = 0.61 out, e^0.2, e^0.1 in.
  const MismatchSums s = b.run(RolloutIsMode::Mask, RolloutIsLevel::Token, 1.5f);
  EXPECT_EQ(b.mask, (std::vector<uint8_t>{0, 0, 0, 0, 0, 1, 1}));
  EXPECT_FLOAT_EQ(b.w[5], static_cast<float>(std::exp(0.2)));  // kept tokens keep their ratio
  EXPECT_EQ(s.masked, 2);
  EXPECT_EQ(s.masked_sequences, 1);
  EXPECT_EQ(s.tokens, 4);  // measured before rejection
}

TEST(RolloutIs, SequenceAndGeometricLevelsWeighWholeSequences) {
  {
    Batch b;  // product: sequence 0 e^(0.5 - 0.5) = 1, sequence 3 e^0.3
    const MismatchSums s = b.run(RolloutIsMode::Truncate, RolloutIsLevel::Sequence, 1.2f);
    EXPECT_NEAR(b.w[0], 1.0, 1e-6);
    EXPECT_NEAR(b.w[2], 1.0, 1e-6);
    EXPECT_FLOAT_EQ(b.w[5], 1.2f);  // e^0.3 = 1.35 capped
    EXPECT_FLOAT_EQ(b.w[6], 1.2f);
    EXPECT_EQ(s.truncated, 2);
  }
  {
    Batch b;  // geometric: sequence 3 e^0.15 = 1.16 outside [1/1.1, 1.1]: both its tokens go
    const MismatchSums s = b.run(RolloutIsMode::Mask, RolloutIsLevel::Geometric, 1.1f);
    EXPECT_EQ(b.mask, (std::vector<uint8_t>{1, 0, 1, 0, 0, 0, 0}));
    EXPECT_NEAR(b.w[0], 1.0, 1e-6);
    EXPECT_EQ(s.masked, 2);
    EXPECT_EQ(s.masked_sequences, 1);
  }
}

TEST(RolloutIs, OffMeasuresAndChangesNothing) {
  Batch b;
  const MismatchSums s = b.run(RolloutIsMode::Off, RolloutIsLevel::Token, 1.5f);
  EXPECT_EQ(b.w, std::vector<float>(7, 1.0f));
  EXPECT_EQ(b.mask, (std::vector<uint8_t>{1, 0, 1, 0, 0, 1, 1}));
  EXPECT_EQ(s.tokens, 4);
  EXPECT_GT(s.k3, 0);
  // The data-parallel reduction sums fields(): it must list every field, once.
  MismatchSums t;
  const std::vector<double*> f = t.fields();
  EXPECT_EQ(f.size() * sizeof(double), sizeof(MismatchSums));
  for (size_t i = 0; i < f.size(); ++i) *f[i] = static_cast<double>(i + 1);
  double sum = 0;
  for (size_t i = 0; i < f.size(); ++i) sum += *f[i];
  EXPECT_EQ(sum, static_cast<double>(f.size() * (f.size() + 1) / 2)) << "a field listed twice";
}

TEST(RolloutIs, BadSettingsAreRefusedByName) {
  EXPECT_THROW(parse_rollout_is_mode("clip"), Error);
  EXPECT_THROW(parse_rollout_is_level("batch"), Error);
  EXPECT_THROW(validate_rollout_is({RolloutIsMode::Truncate, RolloutIsLevel::Token, 1.0f, 0.0f}), Error);
  EXPECT_THROW(validate_rollout_is({RolloutIsMode::Mask, RolloutIsLevel::Token, 2.0f, 1.5f}), Error);
  EXPECT_NO_THROW(validate_rollout_is({RolloutIsMode::Mask, RolloutIsLevel::Token, 2.0f, 0.5f}));
}

}  // namespace
}  // namespace sqlrl::rl
