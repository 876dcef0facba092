#include "rl/grpo/rollout_is.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"

namespace sqlrl::rl {

RolloutIsMode parse_rollout_is_mode(const std::string& name) {
  if (name == "off") return RolloutIsMode::Off;
  if (name == "truncate") return RolloutIsMode::Truncate;
  if (name == "mask") return RolloutIsMode::Mask;
  fail("rollout-is: '", name, "' is not off, truncate or mask");
}

RolloutIsLevel parse_rollout_is_level(const std::string& name) {
  if (name == "token") return RolloutIsLevel::Token;
  if (name == "sequence") return RolloutIsLevel::Sequence;
  if (name == "geometric") return RolloutIsLevel::Geometric;
  fail("rollout-is-level: '", name, "' is not token, sequence or geometric");
}

const char* rollout_is_mode_name(RolloutIsMode m) {
  return m == RolloutIsMode::Off ? "off" : m == RolloutIsMode::Truncate ? "truncate" : "mask";
}

void validate_rollout_is(const RolloutIsConfig& c) {
  check(std::isfinite(c.upper) && c.upper > 1.0f, "rollout-is-upper must be a finite number above 1, got ", c.upper);
  check(c.lower >= 0.0f && c.lower < 1.0f, "rollout-is-lower must be in [0, 1) (0: 1 / upper), got ", c.lower);
}

void MismatchSums::add(const MismatchSums& o) {
  tokens += o.tokens, log_ratio += o.log_ratio, abs_log_ratio += o.abs_log_ratio, k3 += o.k3, weight += o.weight;
  truncated += o.truncated, masked += o.masked, sequences += o.sequences, masked_sequences += o.masked_sequences;
}

std::vector<double*> MismatchSums::fields() {
  return {&tokens, &log_ratio, &abs_log_ratio, &k3, &weight, &truncated, &masked, &sequences, &masked_sequences};
}

MismatchSums rollout_importance_weights(const float* old_logp, const float* sampler_logp, uint8_t* mask,
                                        const int32_t* cu_seqlens, int64_t num_seqs, const RolloutIsConfig& c,
                                        float* is_weights) {
  MismatchSums sums;
  const double upper = c.upper, lower = c.lower_bound();
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t t0 = cu_seqlens[s], t1 = cu_seqlens[s + 1];
    // Log-space, clamped as the loss clamps its ratio: one absurd token cannot overflow.
    double seq_log = 0;
    int64_t n = 0;
    for (int32_t t = t0; t < t1; ++t) {
      is_weights[t] = 1.0f;
      if (!mask[t]) continue;
      const double lr = std::clamp(static_cast<double>(old_logp[t]) - sampler_logp[t], -20.0, 20.0);
      sums.tokens += 1, sums.log_ratio += lr, sums.abs_log_ratio += std::fabs(lr);
      sums.k3 += std::exp(lr) - 1 - lr;
      seq_log += lr, ++n;
    }
    if (n == 0) continue;
    sums.sequences += 1;
    const double seq_weight = c.level == RolloutIsLevel::Sequence ? std::exp(std::clamp(seq_log, -20.0, 20.0))
                                                                   : std::exp(seq_log / static_cast<double>(n));
    bool any_rejected = false;
    const bool reject_sequence =
        c.mode == RolloutIsMode::Mask && c.level != RolloutIsLevel::Token && (seq_weight < lower || seq_weight > upper);
    for (int32_t t = t0; t < t1; ++t) {
      if (!mask[t]) continue;
      double v = c.level == RolloutIsLevel::Token
                     ? std::exp(std::clamp(static_cast<double>(old_logp[t]) - sampler_logp[t], -20.0, 20.0))
                     : seq_weight;
      sums.weight += v;
      if (c.mode == RolloutIsMode::Off) continue;
      if (c.mode == RolloutIsMode::Truncate) {
        if (v > upper) v = upper, sums.truncated += 1;
      } else if (reject_sequence || (c.level == RolloutIsLevel::Token && (v < lower || v > upper))) {
        mask[t] = 0, sums.masked += 1, any_rejected = true;
        continue;
      }
      is_weights[t] = static_cast<float>(v);
    }
    sums.masked_sequences += any_rejected;
  }
  return sums;
}

}  // namespace sqlrl::rl
