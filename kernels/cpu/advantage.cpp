#include "kernels/advantage.h"

#include <cmath>

#include "runtime/error.h"

namespace sqlrl {

namespace {

// The per-group formula, after the float64 sums.
float normalise_advantage(double r, double sum, double sum_sq_dev, int64_t n, AdvantageOptions o) {
  double mean = n == 1 ? 0.0 : sum / static_cast<double>(n);  // verl: mean 0, std 1 for one sample
  if (!o.divide_std) return static_cast<float>(r - mean);
  double sd = n == 1 ? 1.0 : sqrt(sum_sq_dev / static_cast<double>(n - 1));
  return static_cast<float>((r - mean) / (sd + static_cast<double>(o.eps)));
}

}  // namespace

void group_advantage_cpu(float* advantages, const float* rewards, int64_t groups, int64_t group_size,
                         AdvantageOptions options) {
  check(groups >= 0 && group_size > 0, "advantage: groups ", groups, " x group_size ", group_size,
        " (group_size must be positive)");
  for (int64_t g = 0; g < groups; ++g) {
    const float* r = rewards + g * group_size;
    float* a = advantages + g * group_size;
    // Two passes (mean, then squared deviations): exact zero variance for equal rewards.
    double sum = 0;
    for (int64_t i = 0; i < group_size; ++i) sum += r[i];
    double mean = sum / static_cast<double>(group_size), dev = 0;
    for (int64_t i = 0; i < group_size; ++i) dev += (r[i] - mean) * (r[i] - mean);
    for (int64_t i = 0; i < group_size; ++i) a[i] = normalise_advantage(r[i], sum, dev, group_size, options);
  }
}

}  // namespace sqlrl
