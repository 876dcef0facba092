// rl/grpo/loss_agg.h: the per-token weights of each aggregation mode over a mini-batch packed
// into several micro-batches, against the definitions (tests/kernels/ref.h), with the
// denominator policy's extra units; mode names round-trip and a bad one is refused by name.
#include "rl/grpo/loss_agg.h"

#include "rl/grpo/grpo.h"
#include "runtime/error.h"
#include "tests/kernels/ref.h"
#include "tests/rl_grpo/grpo_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::testing {
namespace {

using rl::LossAgg;

TEST(LossAgg, WeightsMatchTheDefinitionsAcrossMicroBatches) {
  std::vector<rl::Trajectory> batch;
  batch.push_back(make_trajectory(0, 0, {1, 2, 3}, {{4, 5, 6}, {7, 8}, {9, 10}}, 1.0));
  batch.push_back(make_trajectory(0, 1, {1, 2, 3}, {{11, 12}}, 0.0));
  batch.push_back(make_trajectory(0, 2, {1, 2}, {{}, {13, 14}}, 0.5));  // no trained token
  batch.push_back(make_trajectory(1, 0, {20, 21}, {{4, 4, 4, 4, 4}}, -1.0));
  batch.push_back(make_trajectory(1, 1, {20, 21}, {{22}, {23, 19}, {2, 3}}, 0.0));
  std::vector<int64_t> all = {0, 1, 2, 3, 4};
  std::vector<float> adv(batch.size(), 1.0f);
  std::vector<rl::MicroBatch> mini = rl::pack_micro_batches(batch, all, adv, 9);
  ASSERT_GE(mini.size(), 3u) << "the case must span several micro-batches";
  // The same positions as one list: sequences in packing order.
  std::vector<uint8_t> mask;
  std::vector<int32_t> cu = {0};
  for (const rl::MicroBatch& mb : mini)
    for (int64_t s = 0; s < mb.batch.num_seqs(); ++s) {
      for (int32_t t = mb.batch.cu_seqlens[s]; t < mb.batch.cu_seqlens[s + 1]; ++t) mask.push_back(mb.mask[t]);
      cu.push_back(static_cast<int32_t>(mask.size()));
    }
  double tokens = 0, seqs = 0;
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    int n = 0;
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t) n += mask[t];
    tokens += n, seqs += n > 0;
  }
  ASSERT_EQ(seqs, 4);  // trajectory 2 trains on nothing
  const double L = 40;  // seq-mean-token-sum-norm's constant
  for (LossAgg agg : {LossAgg::TokenMean, LossAgg::SeqMeanTokenMean, LossAgg::SeqMeanTokenSum,
                      LossAgg::SeqMeanTokenSumNorm}) {
    for (double extra : {0.0, 2.5}) {
      rl::LossWeights w = rl::loss_weights(mini, agg, extra, L);
      const bool token_mean = agg == LossAgg::TokenMean;
      EXPECT_EQ(w.own_units, token_mean ? tokens : seqs);
      std::vector<double> want = ref_loss_weights(mask, cu, token_mean, (token_mean ? tokens : seqs) + extra);
      // The token-sum modes: every trained token of a sequence weighs 1 / D (/ L for -norm).
      if (agg == LossAgg::SeqMeanTokenSum || agg == LossAgg::SeqMeanTokenSumNorm)
        for (size_t t = 0; t < want.size(); ++t)
          want[t] = mask[t] ? 1.0 / ((seqs + extra) * (agg == LossAgg::SeqMeanTokenSumNorm ? L : 1.0)) : 0.0;
      std::vector<float> got;
      ASSERT_EQ(w.per_micro.size(), mini.size());
      for (size_t m = 0; m < mini.size(); ++m) {
        ASSERT_EQ(w.per_micro[m].size(), mini[m].mask.size());
        got.insert(got.end(), w.per_micro[m].begin(), w.per_micro[m].end());
      }
      // Each weight is one float rounding of its float64 value.
      ASSERT_EQ(got.size(), want.size());
      for (size_t t = 0; t < got.size(); ++t) EXPECT_EQ(got[t], static_cast<float>(want[t])) << rl::loss_agg_name(agg) << " t=" << t;
      // The mean modes: weights sum to own / (own + extra); the token sums to tokens / (seqs + extra)
      // (/ L).
      double sum = 0;
      for (double x : want) sum += x;
      const double mean_sum = agg == LossAgg::SeqMeanTokenSum       ? tokens / (seqs + extra)
                              : agg == LossAgg::SeqMeanTokenSumNorm ? tokens / ((seqs + extra) * L)
                                                                    : w.own_units / (w.own_units + extra);
      EXPECT_NEAR(sum, mean_sum, 1e-12);
    }
  }
}

TEST(LossAgg, NothingTrainedGivesNoWeights) {
  std::vector<rl::Trajectory> batch = {make_trajectory(0, 0, {1, 2, 3}, {{}, {4, 5}}, 1.0)};
  std::vector<rl::MicroBatch> mini = rl::pack_micro_batches(batch, {0}, {1.0f}, 16);
  rl::LossWeights w = rl::loss_weights(mini, LossAgg::TokenMean, 3.0);
  EXPECT_EQ(w.own_units, 0);
  EXPECT_TRUE(w.per_micro.empty());
}

TEST(LossAgg, NamesRoundTripAndABadOneIsRefusedByName) {
  for (LossAgg a : {LossAgg::TokenMean, LossAgg::SeqMeanTokenMean, LossAgg::SeqMeanTokenSum,
                    LossAgg::SeqMeanTokenSumNorm})
    EXPECT_EQ(rl::parse_loss_agg(rl::loss_agg_name(a)), a);
  try {
    rl::parse_loss_agg("seq-mean");
    FAIL() << "accepted an unknown mode";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'seq-mean' is not one of token-mean | seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace sqlrl::testing
