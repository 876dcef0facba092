// How the GRPO loss of a mini-batch aggregates its tokens: the one place that knows the
// aggregation modes. It turns (mode, mask, sequence bounds, denominator policy) into per-token
// weights w_t that the loss kernel multiplies in (rl/grpo/algos.h: loss = sum_t w_t loss_t),
// so a new mode is a new enum value and its row in loss_agg.cpp (name, help, units, weight).
//
//   token-mean           w_t = 1 / D, D = trained tokens of the mini-batch (verl's default)
//   seq-mean-token-mean  w_t = 1 / (n_s D), n_s = trained tokens of t's sequence, D = sequences
//                        with n_s > 0 in the mini-batch
//   seq-mean-token-sum   w_t = 1 / D, D = sequences: each sequence's token sum, averaged
//   seq-mean-token-sum-norm  w_t = 1 / (L D), L a constant token count (`loss-norm-tokens`, the
//                        trajectory cap by default): Dr. GRPO's length-unbiased mean (Liu et al.
//                        2025, "Understanding R1-Zero-Like Training: A Critical Perspective",
//                        arXiv 2503.20783, §3.1; verl's mode of the same name)
//
// D counts the whole mini-batch, so gradient accumulation over its micro-batches sums to the
// mini-batch loss. The denominator policy adds `extra_units` to D: the trainer's share of the
// trajectories dropped for zero variance (GrpoFilterConfig::zero_variance_in_denominator).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sqlrl::rl {

enum class LossAgg : uint8_t { TokenMean, SeqMeanTokenMean, SeqMeanTokenSum, SeqMeanTokenSumNorm };
struct MicroBatch;  // rl/grpo/grpo.h

// "token-mean", "seq-mean-token-mean"; parse_loss_agg errors name the accepted values.
const char* loss_agg_name(LossAgg agg);
LossAgg parse_loss_agg(const std::string& name);
std::string loss_agg_choices();  // "token-mean | seq-mean-token-mean" (errors)
const char* loss_agg_help();     // "token-mean (help) | ...": the loss-agg option's help, from the rows

// What a sequence with `trained_tokens` trained tokens adds to the denominator D.
double loss_agg_units(LossAgg agg, int64_t trained_tokens);

struct LossWeights {
  double own_units = 0;                       // D before extra_units: 0 means nothing to train on
  std::vector<std::vector<float>> per_micro;  // [micro-batch][token] w_t, 0 where mask_t = 0
};
// norm_tokens: L of seq-mean-token-sum-norm (must be > 0 there; ignored otherwise).
LossWeights loss_weights(const std::vector<MicroBatch>& mini, LossAgg agg, double extra_units = 0,
                         double norm_tokens = 0);
// The mini-batch's own units (D before extra units) alone.
double loss_units(const std::vector<MicroBatch>& mini, LossAgg agg);
// Data parallel (rl/grpo/grpo.h DataParallel): this shard's part of a mini-batch whose
// denominator D = all_units (every shard's units, summed) + extra_units. own_units is still this
// shard's own; per_micro is empty when it is 0.
LossWeights loss_weights_of_total(const std::vector<MicroBatch>& mini, LossAgg agg, double all_units,
                                  double extra_units, double norm_tokens = 0);

}  // namespace sqlrl::rl
