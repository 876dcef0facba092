#include "rl/grpo/loss_agg.h"

#include "rl/grpo/grpo.h"

#include "runtime/error.h"

namespace sqlrl::rl {

namespace {
constexpr LossAgg kModes[] = {LossAgg::TokenMean, LossAgg::SeqMeanTokenMean, LossAgg::SeqMeanTokenSum,
                              LossAgg::SeqMeanTokenSumNorm};
}

const char* loss_agg_name(LossAgg agg) {
  switch (agg) {
    case LossAgg::TokenMean: return "token-mean";
    case LossAgg::SeqMeanTokenMean: return "seq-mean-token-mean";
    case LossAgg::SeqMeanTokenSum: return "seq-mean-token-sum";
    case LossAgg::SeqMeanTokenSumNorm: return "seq-mean-token-sum-norm";
  }
  return "?";
}

std::string loss_agg_choices() {
  std::string out;
  for (LossAgg a : kModes) out += (out.empty() ? "" : " | ") + std::string(loss_agg_name(a));
  return out;
}

LossAgg parse_loss_agg(const std::string& name) {
  for (LossAgg a : kModes)
    if (name == loss_agg_name(a)) return a;
  fail("loss-agg '", name, "' is not one of ", loss_agg_choices());
}

double loss_agg_units(LossAgg agg, int64_t trained_tokens) {
  return agg == LossAgg::TokenMean ? static_cast<double>(trained_tokens) : (trained_tokens > 0 ? 1.0 : 0.0);
}

namespace {

// n_s of every sequence, in micro-batch order.
std::vector<std::vector<int64_t>> sequence_counts(const std::vector<MicroBatch>& mini) {
  std::vector<std::vector<int64_t>> counts(mini.size());
  for (size_t m = 0; m < mini.size(); ++m) {
    const MicroBatch& mb = mini[m];
    for (int64_t s = 0; s < mb.batch.num_seqs(); ++s) {
      int64_t n = 0;
      for (int32_t t = mb.batch.cu_seqlens[s]; t < mb.batch.cu_seqlens[s + 1]; ++t) n += mb.mask[t];
      counts[m].push_back(n);
    }
  }
  return counts;
}

double units_of(const std::vector<std::vector<int64_t>>& counts, LossAgg agg) {
  double units = 0;
  for (const auto& c : counts)
    for (int64_t n : c) units += loss_agg_units(agg, n);
  return units;
}

// One sequence's weight before the float rounding.
double sequence_weight(LossAgg agg, int64_t n, double D, double L) {
  switch (agg) {
    case LossAgg::TokenMean: return 1.0 / D;
    case LossAgg::SeqMeanTokenMean: return 1.0 / (static_cast<double>(n) * D);
    case LossAgg::SeqMeanTokenSum: return 1.0 / D;
    case LossAgg::SeqMeanTokenSumNorm: return 1.0 / (L * D);
  }
  return 0;
}

LossWeights weights_with(const std::vector<MicroBatch>& mini, LossAgg agg,
                         const std::vector<std::vector<int64_t>>& counts, double own_units, double D, double L) {
  check(agg != LossAgg::SeqMeanTokenSumNorm || L > 0, "loss-agg seq-mean-token-sum-norm needs a positive token "
        "constant (loss-norm-tokens), got ", L);
  LossWeights out;
  out.own_units = own_units;
  if (out.own_units <= 0) return out;
  for (size_t m = 0; m < mini.size(); ++m) {
    const MicroBatch& mb = mini[m];
    std::vector<float> w(mb.mask.size(), 0.0f);
    for (int64_t s = 0; s < mb.batch.num_seqs(); ++s) {
      const int64_t n = counts[m][static_cast<size_t>(s)];
      if (n == 0) continue;
      // The weight is rounded to float once per sequence (the kernel multiplies in float).
      const float ws = static_cast<float>(sequence_weight(agg, n, D, L));
      for (int32_t t = mb.batch.cu_seqlens[s]; t < mb.batch.cu_seqlens[s + 1]; ++t)
        if (mb.mask[t]) w[static_cast<size_t>(t)] = ws;
    }
    out.per_micro.push_back(std::move(w));
  }
  return out;
}

}  // namespace

double loss_units(const std::vector<MicroBatch>& mini, LossAgg agg) { return units_of(sequence_counts(mini), agg); }

LossWeights loss_weights(const std::vector<MicroBatch>& mini, LossAgg agg, double extra_units, double norm_tokens) {
  const auto counts = sequence_counts(mini);
  const double own = units_of(counts, agg);
  return weights_with(mini, agg, counts, own, own + extra_units, norm_tokens);
}

LossWeights loss_weights_of_total(const std::vector<MicroBatch>& mini, LossAgg agg, double all_units,
                                  double extra_units, double norm_tokens) {
  const auto counts = sequence_counts(mini);
  return weights_with(mini, agg, counts, units_of(counts, agg), all_units + extra_units, norm_tokens);
}

}  // namespace sqlrl::rl
