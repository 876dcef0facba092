#include "rl/grpo/algos.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"
#include "runtime/thread_pool.h"

namespace sqlrl::rl {

namespace {

// ============================================================================================
// Advantage estimators
// ============================================================================================

// GRPO's group-normalised advantage: A_i = (r_i - mean) / (std + eps), or r_i - mean without the
// std division. std is the unbiased (n - 1) estimate, as verl's compute_grpo_outcome_advantage
// (torch.std); a group of one sample gets mean 0 and std 1 there (A = r / (1 + eps)), here too.
// A zero-variance group gives A = 0 for every sample (the GRPO-Filter usually drops it first).
void grpo_advantage(float* a, const float* r, int64_t n, const AdvantageOptions& o) {
  // Two passes (mean, then squared deviations): exact zero variance for equal rewards.
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += r[i];
  const double mean_all = sum / static_cast<double>(n);
  double dev = 0;
  for (int64_t i = 0; i < n; ++i) dev += (r[i] - mean_all) * (r[i] - mean_all);
  const double mean = n == 1 ? 0.0 : mean_all;  // verl: mean 0, std 1 for one sample
  const double sd = n == 1 ? 1.0 : std::sqrt(dev / static_cast<double>(n - 1));
  for (int64_t i = 0; i < n; ++i) {
    const double ri = r[i];  // read before a[i] is written: they may alias
    a[i] = o.divide_std ? static_cast<float>((ri - mean) / (sd + static_cast<double>(o.eps)))
                        : static_cast<float>(ri - mean);
  }
}

// ============================================================================================
// KL estimators (verl's kl_penalty: "kl", "mse", "low_var_kl")
// ============================================================================================

KlTerm kl_k1(float logp, float ref) {
  const float d = ref - logp;
  return {-d, 1.0f, true};
}

KlTerm kl_k2(float logp, float ref) {
  const float d = ref - logp;
  return {0.5f * d * d, -d, true};
}

// k3 = exp(d) - d - 1, with verl's clamps (d to [-20, 20], the estimate to [-10, 10]); no
// gradient where either clamp acts. dk/dlogp = -(e^d - 1).
KlTerm kl_k3(float logp, float ref) {
  float d = ref - logp;
  const bool d_inside = d > -20.0f && d < 20.0f;
  d = fminf(fmaxf(d, -20.0f), 20.0f);
  const float e = expf(d), k = e - d - 1.0f;
  const bool k_inside = k > -10.0f && k < 10.0f;
  return {fminf(fmaxf(k, -10.0f), 10.0f), 1.0f - e, d_inside && k_inside};
}

// ============================================================================================
// Policy losses
// ============================================================================================

// PPO's clipped surrogate with clip-higher and dual-clip:
//   pg_t = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)); with dual-clip c > 1 (Ye et al.
//   2020, arXiv 1912.09729; verl's clip_ratio_c), where A < 0, pg_t = min(pg_t, -A c): a token far
//   above the old policy with a negative advantage stops pushing (no gradient once capped).
PolicyTerm clipped_ratio(float /*logp*/, float log_ratio, bool inside, float adv, float is_weight,
                         const PolicyLossConfig& c) {
  PolicyTerm out;
  const float r = expf(log_ratio);
  const float rc = fminf(fmaxf(r, 1.0f - c.clip_low), 1.0f + c.clip_high);
  const float pg1 = -adv * r, pg2 = -adv * rc;
  out.clipped = pg2 > pg1;
  float pg = out.clipped ? pg2 : pg1;
  if (c.dual_clip > 0.0f && adv < 0.0f && pg > -adv * c.dual_clip) pg = -adv * c.dual_clip, out.clipped = true;
  out.loss = is_weight * pg;
  out.dloss = (out.clipped || !inside) ? 0.0f : is_weight * -adv * r;
  out.ratio = r;
  return out;
}

// GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv 2507.18071, eq. 7 and its
// GSPO-token form) through the clipped token term: old'_t = logp_t - mean over t's sequence of
// (logp - old), so that exp(logp_t - old'_t) is the sequence ratio s = exp(mean_t(logp - old)),
// clipping acts on s, and the derivative -A s is GSPO-token's (s stop-gradient times d logp_t).
// Masked-out tokens copy old.
void gspo_sequence_old(const float* logp, const float* old, const uint8_t* mask, const std::vector<int32_t>& cu,
                       float* out) {
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    double sum = 0;
    int64_t n = 0;
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t)
      if (mask[t]) sum += static_cast<double>(logp[t]) - old[t], ++n;
    const double mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t)
      out[t] = mask[t] ? static_cast<float>(static_cast<double>(logp[t]) - mean) : old[t];
  }
}

// CISPO (MiniMax, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention",
// arXiv 2506.13585, §3.1 eq. 4-5): no token is clipped out of the update; the importance weight
// is clipped instead and held constant (stop-gradient):
//   pg_t = -sg(c_t) A logp_t,  c_t = clip(r_t, 1 - eps_low, 1 + eps_high),  d pg_t / d logp_t = -c_t A.
// The paper sets no lower bound (clip-low >= 1) and tunes eps_high. `clipped` counts the tokens
// whose weight the clip changed; dual-clip does not apply (no surrogate to cap).
PolicyTerm cispo(float logp, float log_ratio, bool /*inside*/, float adv, float is_weight, const PolicyLossConfig& c) {
  PolicyTerm out;
  const float r = expf(log_ratio);
  const float weight = fminf(fmaxf(r, 1.0f - c.clip_low), 1.0f + c.clip_high);
  out.clipped = weight != r;
  out.dloss = is_weight * (-adv * weight);
  out.loss = out.dloss * logp;
  out.ratio = r;
  return out;
}

// ============================================================================================
// The tables
// ============================================================================================

// A function-local table: built on first use, so a config made during static initialization
// elsewhere finds it.
const std::vector<AdvantageEstimator>& advantage_rows() {
  static const std::vector<AdvantageEstimator> rows = {
      {"grpo", "(r - group mean) / (group std + adv-eps); r - mean with adv-std false (Dr. GRPO)", grpo_advantage},
  };
  return rows;
}

const std::vector<KlEstimator>& kl_rows() {
  static const std::vector<KlEstimator> rows = {
      {"k1", "logp - ref", kl_k1},
      {"k2", "(logp - ref)^2 / 2", kl_k2},
      {"k3", "exp(ref - logp) - (ref - logp) - 1, clamped: verl's low_var_kl", kl_k3},
  };
  return rows;
}

const std::vector<PolicyLoss>& policy_rows() {
  static const std::vector<PolicyLoss> rows = {
      {"grpo", "PPO's clipped surrogate on token ratios, with clip-higher and dual-clip", clipped_ratio, nullptr},
      {"gspo", "each token takes its sequence's ratio exp(mean log ratio), clipped as a whole (GSPO, arXiv 2507.18071; "
               "its clip ranges are ~3e-4 / 4e-4)", clipped_ratio, gspo_sequence_old},
      {"cispo", "every token trains, under a clipped stop-gradient weight clip(ratio, 1 - clip-low, 1 + clip-high) "
                "(MiniMax-M1's CISPO, arXiv 2506.13585; the paper: clip-low 1 or more, no lower bound)", cispo, nullptr},
  };
  return rows;
}

template <class Row>
std::string row_names(const std::vector<Row>& rows) {
  std::string out;
  for (const Row& r : rows) out += (out.empty() ? "" : " | ") + std::string(r.name);
  return out;
}

template <class Row>
std::string row_help(const std::vector<Row>& rows) {
  std::string out;
  for (const Row& r : rows) out += (out.empty() ? "" : " | ") + std::string(r.name) + " (" + r.help + ")";
  return out;
}

template <class Row>
const Row& find_row(const std::vector<Row>& rows, const std::string& name, const char* key) {
  for (const Row& r : rows)
    if (name == r.name) return r;
  fail(key, " '", name, "' is not one of ", row_names(rows));
}

}  // namespace

const std::vector<AdvantageEstimator>& advantage_estimators() { return advantage_rows(); }
const std::vector<KlEstimator>& kl_estimators() { return kl_rows(); }
const std::vector<PolicyLoss>& policy_losses() { return policy_rows(); }

const AdvantageEstimator& find_advantage_estimator(const std::string& name) {
  return find_row(advantage_rows(), name, "advantage");
}
const KlEstimator& find_kl_estimator(const std::string& name, const char* key) { return find_row(kl_rows(), name, key); }
const PolicyLoss& find_policy_loss(const std::string& name) { return find_row(policy_rows(), name, "policy-loss"); }

const char* advantage_estimator_help() {
  static const std::string help = row_help(advantage_rows());
  return help.c_str();
}
const char* kl_estimator_help() {
  static const std::string help = row_help(kl_rows());
  return help.c_str();
}
const char* policy_loss_help() {
  static const std::string help = row_help(policy_rows());
  return help.c_str();
}

GrpoToken grpo_token(float logp, float old_logp, float adv, float is_weight, const float* ref_logp_t,
                     const GrpoLossConfig& c) {
  GrpoToken out;
  float log_ratio = logp - old_logp;
  const bool inside = log_ratio > -20.0f && log_ratio < 20.0f;
  log_ratio = fminf(fmaxf(log_ratio, -20.0f), 20.0f);
  const PolicyTerm p = c.policy->token(logp, log_ratio, inside, adv, is_weight, c.clip);
  out.loss = p.loss, out.dloss = p.dloss, out.ratio = p.ratio, out.clipped = p.clipped;
  out.approx_kl = old_logp - logp;
  if (c.kl_coef > 0.0f) {
    const KlTerm k = c.kl->fn(logp, *ref_logp_t);
    out.ref_kl = k.kl;
    out.loss += c.kl_coef * k.kl;
    if (k.grad) out.dloss += c.kl_coef * k.dkl;
  }
  return out;
}

namespace {
constexpr int64_t kTile = 4096;  // fixed tiles: the stats' summation order ignores thread count
}

GrpoLossStats grpo_loss_cpu(float* dlogp, const float* logp, const float* old_logp, const float* ref_logp,
                            const float* advantages, const float* weights, const float* is_weights,
                            int64_t num_tokens, const GrpoLossConfig& config) {
  check(config.kl_coef <= 0 || ref_logp != nullptr, "grpo_loss: kl_coef ", config.kl_coef, " needs ref_logp");
  check(num_tokens >= 0, "grpo_loss: num_tokens must be >= 0, got ", num_tokens);
  const int64_t tiles = (num_tokens + kTile - 1) / kTile;
  std::vector<GrpoLossStats> partial(static_cast<size_t>(tiles));
  default_thread_pool().parallel_for(static_cast<size_t>(tiles), 1, [&](size_t begin, size_t end) {
    for (size_t tile = begin; tile < end; ++tile) {
      GrpoLossStats st;
      const int64_t t0 = static_cast<int64_t>(tile) * kTile, t1 = std::min<int64_t>(num_tokens, t0 + kTile);
      for (int64_t t = t0; t < t1; ++t) {
        const float w = weights[t];
        if (w == 0.0f) {
          if (dlogp) dlogp[t] = 0.0f;
          continue;
        }
        GrpoToken k = grpo_token(logp[t], old_logp[t], advantages[t], is_weights ? is_weights[t] : 1.0f,
                                 ref_logp ? ref_logp + t : nullptr, config);
        if (dlogp) dlogp[t] = w * k.dloss;
        st.loss += static_cast<double>(w) * k.loss;
        st.tokens += 1, st.clipped += k.clipped, st.ratio += k.ratio, st.approx_kl += k.approx_kl,
            st.ref_kl += k.ref_kl;
      }
      partial[tile] = st;
    }
  });
  GrpoLossStats total;
  for (const GrpoLossStats& p : partial) total.add(p);
  return total;
}

}  // namespace sqlrl::rl
