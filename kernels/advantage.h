// Group-normalised advantage (GRPO): rewards [groups, group_size] (one row per prompt, its G
// samples side by side) -> A_i = (r_i - mean) / (std + eps), or r_i - mean without the std
// division. std is the unbiased (n - 1) estimate, as verl's compute_grpo_outcome_advantage
// (torch.std); a group of one sample gets mean 0 and std 1 there (A = r / (1 + eps)), here too.
// A zero-variance group gives A = 0 for every sample (the GRPO-Filter usually drops it first).
// Sums run in float64 in a fixed order. CPU only: rewards are scored on the host, one float per
// trajectory.
#pragma once
#include <cmath>
#include <cstdint>

namespace sqlrl {

struct AdvantageOptions {
  float eps = 1e-6f;        // verl's default epsilon
  bool divide_std = true;   // false: Dr. GRPO style, A = r - mean
};

// advantages and rewards are [groups * group_size]; they may alias.
void group_advantage_cpu(float* advantages, const float* rewards, int64_t groups, int64_t group_size,
                         AdvantageOptions options);

}  // namespace sqlrl
