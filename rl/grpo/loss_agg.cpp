#include "rl/grpo/loss_agg.h"

#include "rl/grpo/grpo.h"

#include "runtime/error.h"

namespace sqlrl::rl {

namespace {

// Each mode: the denominator units a sequence of n trained tokens adds, and one sequence's
// weight w_t before the float rounding, given D and L.
struct LossAggRow {
  LossAgg id;
  const char* name;
  const char* help;
  double (*units)(int64_t n);
  double (*weight)(int64_t n, double D, double L);
};

double token_units(int64_t n) { return static_cast<double>(n); }
double sequence_units(int64_t n) { return n > 0 ? 1.0 : 0.0; }
double over_d(int64_t, double D, double) { return 1.0 / D; }
double over_n_d(int64_t n, double D, double) { return 1.0 / (static_cast<double>(n) * D); }
double over_l_d(int64_t, double D, double L) { return 1.0 / (L * D); }

const LossAggRow kRows[] = {
    {LossAgg::TokenMean, "token-mean", "every trained token weighs the same (verl's default)", token_units, over_d},
    {LossAgg::SeqMeanTokenMean, "seq-mean-token-mean", "each sequence's token mean, averaged over sequences",
     sequence_units, over_n_d},
    {LossAgg::SeqMeanTokenSum, "seq-mean-token-sum", "each sequence's token sum, averaged over sequences",
     sequence_units, over_d},
    {LossAgg::SeqMeanTokenSumNorm, "seq-mean-token-sum-norm",
     "token sums over a constant length loss-norm-tokens, averaged over sequences (Dr. GRPO)", sequence_units,
     over_l_d},
};

const LossAggRow& row(LossAgg agg) {
  for (const LossAggRow& r : kRows)
    if (r.id == agg) return r;
  fail("loss-agg: no row for mode ", static_cast<int>(agg));
}

}  // namespace

const char* loss_agg_name(LossAgg agg) { return row(agg).name; }

std::string loss_agg_choices() {
  std::string out;
  for (const LossAggRow& r : kRows) out += (out.empty() ? "" : " | ") + std::string(r.name);
  return out;
}

const char* loss_agg_help() {
  static const std::string help = [] {
    std::string out;
    for (const LossAggRow& r : kRows) out += (out.empty() ? "" : " | ") + std::string(r.name) + " (" + r.help + ")";
    return out;
  }();
  return help.c_str();
}

LossAgg parse_loss_agg(const std::string& name) {
  for (const LossAggRow& r : kRows)
    if (name == r.name) return r.id;
  fail("loss-agg '", name, "' is not one of ", loss_agg_choices());
}

double loss_agg_units(LossAgg agg, int64_t trained_tokens) { return row(agg).units(trained_tokens); }

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
      const float ws = static_cast<float>(row(agg).weight(n, D, L));
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
