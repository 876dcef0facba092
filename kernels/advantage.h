// Group-normalised advantage (GRPO): rewards [groups, group_size] (one row per prompt, its G
// samples side by side) -> A_i = (r_i - mean) / (std + eps), or r_i - mean without the std
// division. std is the unbiased (n - 1) estimate, as verl's compute_grpo_outcome_advantage
// (torch.std); a group of one sample gets mean 0 and std 1 there (A = r / (1 + eps)), here too.
// A zero-variance group gives A = 0 for every sample (the GRPO-Filter usually drops it first).
// Then each trajectory's value is broadcast onto its token span of a packed batch.
// Sums run in float64 in a fixed order on both backends, so results do not depend on threads.
#pragma once
#include <cmath>
#include <cstdint>

#include "runtime/hd.h"
#include "runtime/stream.h"

namespace sqlrl {

struct AdvantageOptions {
  float eps = 1e-6f;        // verl's default epsilon
  bool divide_std = true;   // false: Dr. GRPO style, A = r - mean
};

// advantages and rewards are [groups * group_size]; they may alias.
void group_advantage_cpu(float* advantages, const float* rewards, int64_t groups, int64_t group_size,
                         AdvantageOptions options);
// token_values[t] = seq_values[s] for offsets[s] <= t < offsets[s + 1]; offsets [num_seqs + 1]
// start at 0 and are non-decreasing (empty spans allowed); T = offsets[num_seqs].
void broadcast_spans_cpu(float* token_values, const float* seq_values, const int32_t* offsets, int64_t num_seqs);

// Device pointers; one warp per group (G is small: 4..16 in every recipe) and one thread per
// token. Launch status is checked on the host (throws).
void group_advantage_cuda(float* advantages, const float* rewards, int64_t groups, int64_t group_size,
                          AdvantageOptions options, const CudaStream& stream);
void broadcast_spans_cuda(float* token_values, const float* seq_values, const int32_t* offsets, int64_t num_seqs,
                          int64_t num_tokens, const CudaStream& stream);

// The per-group formula both backends apply after their float64 sums.
SQLRL_HD float normalise_advantage(double r, double sum, double sum_sq_dev, int64_t n, AdvantageOptions o) {
  double mean = n == 1 ? 0.0 : sum / static_cast<double>(n);  // verl: mean 0, std 1 for one sample
  if (!o.divide_std) return static_cast<float>(r - mean);
  double sd = n == 1 ? 1.0 : sqrt(sum_sq_dev / static_cast<double>(n - 1));
  return static_cast<float>((r - mean) / (sd + static_cast<double>(o.eps)));
}

}  // namespace sqlrl
