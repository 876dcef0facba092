// Rollout importance sampling: correcting for the sampler not being the trainer. The rollout
// records each sampled token's log-prob under the sampler (on CUDA: bf16 weights, the decode
// kernels); the trainer's forward gives the log-prob of the same token under the same weights in
// its own arithmetic (fp32 master on the CPU, the training kernels on CUDA). Their ratio
//   rho_t = pi_trainer(y_t) / pi_sampler(y_t) = exp(old_t - sampler_t)
// is 1 only where both compute the same distribution; the policy gradient assumes samples from the
// trainer's policy, so the gap biases it, and growing gaps are the usual cause of collapse in long
// runs (Liu, Li et al. 2025, "When Speed Kills Stability: Demystifying RL Collapse from the
// Training-Inference Mismatch"; verl's `docs/advance/rollout_is.md`, whose knobs these follow):
//   level  token:     v_t = rho_t
//          sequence:  v_t = prod over the sequence's trained tokens of rho (one weight per sequence)
//          geometric: v_t = the geometric mean of the sequence's rho
//   mode   off:       v_t = 1 (the metrics are still measured)
//          truncate:  v_t = min(v_t, upper)                  (TIS)
//          mask:      tokens (token level) or whole sequences (the others) whose v lies outside
//                     [lower, upper] are rejected: their mask is cleared, so they leave the loss
//                     and its denominator; the rest keep v_t as it is (MIS)
// v_t multiplies the policy term of the loss (rl/grpo/algos.h), never the KL term.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sqlrl::rl {

enum class RolloutIsMode : uint8_t { Off, Truncate, Mask };
enum class RolloutIsLevel : uint8_t { Token, Sequence, Geometric };

struct RolloutIsConfig {
  RolloutIsMode mode = RolloutIsMode::Off;
  RolloutIsLevel level = RolloutIsLevel::Token;
  float upper = 2.0f;
  float lower = 0.0f;  // 0: 1 / upper
  float lower_bound() const { return lower > 0 ? lower : 1.0f / upper; }
};

// "off" | "truncate" | "mask"; "token" | "sequence" | "geometric"; errors name the choices.
RolloutIsMode parse_rollout_is_mode(const std::string& name);
RolloutIsLevel parse_rollout_is_level(const std::string& name);
const char* rollout_is_mode_name(RolloutIsMode mode);
// Fails naming the key: upper > 1, lower in [0, 1).
void validate_rollout_is(const RolloutIsConfig& config);

// Sums over the trained tokens (mask 1 before any rejection) and over the sequences with one.
struct MismatchSums {
  double tokens = 0;
  double log_ratio = 0;      // old - sampler: the k1 estimate of KL(sampler || trainer), negated
  double abs_log_ratio = 0;
  double k3 = 0;             // rho - 1 - log rho: the k3 estimate of KL(sampler || trainer), >= 0
  double weight = 0;         // v before truncation
  double truncated = 0;      // tokens whose v was capped (truncate)
  double masked = 0;         // tokens rejected (mask)
  double sequences = 0, masked_sequences = 0;
  void add(const MismatchSums& o);
  std::vector<double*> fields();  // every field once: sums over data-parallel shards (rl/grpo/grpo_step.cpp)
};

// One packed micro-batch: `cu_seqlens` [num_seqs + 1] split the T target positions into
// sequences; old and sampler log-probs [T]. Writes v into is_weights [T] (1 where the mask is 0),
// clears the mask of rejected tokens (mode mask), and returns the sums, which are measured
// whatever the mode.
MismatchSums rollout_importance_weights(const float* old_logp, const float* sampler_logp, uint8_t* mask,
                                        const int32_t* cu_seqlens, int64_t num_seqs, const RolloutIsConfig& config,
                                        float* is_weights);

}  // namespace sqlrl::rl
