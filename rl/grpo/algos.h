// The GRPO algorithm variants, each a registered row {name, one-line help, function}, in the
// manner of verl's trainer/ppo/core_algos.py (its policy-loss, advantage-estimator and KL-penalty
// registries). The trainer (rl/grpo/grpo.cpp) holds row pointers, chosen once from the config by
// name (find_*); --help, validation and parsing are generated from the rows, so a new variant is
// one function and one row in algos.cpp. Loss aggregations are rows too (rl/grpo/loss_agg.h).
//
// The policy loss over a packed micro-batch, forward and backward in one pass:
//
//   ratio_t = exp(logp_t - old_t)                      (log-ratio clamped to [-20, 20], as verl)
//   pg_t    = the policy loss row's token term, times v_t
//   kl_t    = the KL estimator row's value, d = ref_t - logp_t, only when kl_coef > 0 (Schulman,
//             "Approximating KL divergence", 2020; verl's kl_penalty)
//   loss    = sum_t w_t (v_t pg_t + kl_coef kl_t),  dlogp_t = d loss / d logp_t
//
// v_t is the rollout importance weight (rl/grpo/rollout_is.h: pi_trainer / pi_sampler, truncated
// or masked; a constant, not differentiated), on the policy term only as verl applies it; null
// is_weights means v_t = 1.
//
// The weights w_t carry the aggregation (token-mean, sequence mean, ...) and the mask: w_t = 0
// means t is not trained (dlogp_t = 0, not counted in the stats). The trainer computes them for a
// whole mini-batch (rl/grpo/loss_agg.h), so that gradient accumulation over micro-batches sums to
// the mini-batch loss and a new aggregation mode never touches the loss.
//
// Stats are sums over masked tokens (the caller divides by `tokens` across micro-batches):
// clipped = tokens where the row's clip is active (verl's pg_clipfrac), approx_kl = old - logp
// (verl's ppo_kl), ratio, ref_kl = the estimator's kl_t. Reductions are float64 in a fixed order
// (fixed tiles), so results are bitwise repeatable and independent of thread count.
//
// CPU only: the trainer's log-probs reach the host anyway (the step's statistics and the next
// epoch's old log-probs), and this pass is O(tokens) beside a forward of O(tokens * params).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sqlrl::rl {

// ---- advantage estimators: one group's rewards -> its samples' advantages
struct AdvantageOptions {
  float eps = 1e-6f;        // verl's default epsilon
  bool divide_std = true;   // grpo: false = Dr. GRPO's A = r - mean
};
struct AdvantageEstimator {
  const char* name;
  const char* help;
  // advantages and rewards are [n] (one group); they may alias. Sums in float64, fixed order.
  void (*fn)(float* advantages, const float* rewards, int64_t n, const AdvantageOptions& options);
};

// ---- KL estimators of KL(pi || ref) per token, d = ref - logp
struct KlTerm {
  float kl = 0;        // the estimate
  float dkl = 0;       // d kl / d logp
  bool grad = false;   // false where a clamp is active: no gradient (dkl is not added)
};
struct KlEstimator {
  const char* name;
  const char* help;
  KlTerm (*fn)(float logp, float ref);
};

// ---- policy losses: one token's policy term
struct PolicyLossConfig {
  float clip_low = 0.2f, clip_high = 0.2f;  // ratio clipped to [1 - clip_low, 1 + clip_high]
  float dual_clip = 0.0f;                   // c > 1: dual-clip for negative advantages; 0: off
};
struct PolicyTerm {
  float loss = 0, dloss = 0;  // v_t pg_t and its derivative in logp_t
  float ratio = 0;
  bool clipped = false;       // the row's clip is active (counted in clip_fraction)
};
struct PolicyLoss {
  const char* name;
  const char* help;
  // log_ratio is logp - old clamped to [-20, 20]; inside is false where the clamp acted (no
  // gradient flows through a clamped ratio).
  PolicyTerm (*token)(float logp, float log_ratio, bool inside, float adv, float is_weight, const PolicyLossConfig& c);
  // Null, or a rewrite of the old log-probs per sequence before the token terms (GSPO's
  // sequence ratio): out[t] from logp, old and the mask over the sequences of cu_seqlens.
  void (*sequence_old)(const float* logp, const float* old, const uint8_t* mask, const std::vector<int32_t>& cu_seqlens,
                       float* out);
};

// The tables, in --help order, and lookups by name (an unknown name is a one-line error naming
// the key and the accepted values).
const std::vector<AdvantageEstimator>& advantage_estimators();
const std::vector<KlEstimator>& kl_estimators();
const std::vector<PolicyLoss>& policy_losses();
const AdvantageEstimator& find_advantage_estimator(const std::string& name);
const KlEstimator& find_kl_estimator(const std::string& name, const char* key = "kl-estimator");
const PolicyLoss& find_policy_loss(const std::string& name);
// "name (help) | name (help)": an option's help line, built once from the rows.
const char* advantage_estimator_help();
const char* kl_estimator_help();
const char* policy_loss_help();

// ---- the loss over a micro-batch
struct GrpoLossConfig {
  const PolicyLoss* policy = &policy_losses().front();
  PolicyLossConfig clip;
  float kl_coef = 0.0f;                     // > 0 needs ref_logp
  const KlEstimator* kl = &find_kl_estimator("k3");
};

struct GrpoLossStats {
  double loss = 0;      // sum_t w_t loss_t (this micro-batch's share of the mini-batch loss)
  double tokens = 0, clipped = 0, ratio = 0, approx_kl = 0, ref_kl = 0;
  void add(const GrpoLossStats& o) {
    loss += o.loss, tokens += o.tokens, clipped += o.clipped, ratio += o.ratio, approx_kl += o.approx_kl,
        ref_kl += o.ref_kl;
  }
};

// One token's loss term (unweighted by w_t) and its derivative.
struct GrpoToken {
  float loss = 0, dloss = 0, ratio = 0, approx_kl = 0, ref_kl = 0;
  bool clipped = false;
};
GrpoToken grpo_token(float logp, float old_logp, float adv, float is_weight, const float* ref_logp_t,
                     const GrpoLossConfig& c);

// Token arrays are [num_tokens]; ref_logp may be null when kl_coef == 0; dlogp may be null
// (forward only). `old_logp` is after the row's sequence_old rewrite, if it has one.
GrpoLossStats grpo_loss_cpu(float* dlogp, const float* logp, const float* old_logp, const float* ref_logp,
                            const float* advantages, const float* weights, const float* is_weights,
                            int64_t num_tokens, const GrpoLossConfig& config);

}  // namespace sqlrl::rl
