#include "kernels/advantage.h"

#include <cmath>

#include "runtime/error.h"

namespace sqlrl {

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

void broadcast_spans_cpu(float* token_values, const float* seq_values, const int32_t* offsets, int64_t num_seqs) {
  check(num_seqs >= 0 && (num_seqs == 0 || offsets[0] == 0), "advantage: span offsets must start at 0");
  for (int64_t s = 0; s < num_seqs; ++s) {
    check(offsets[s + 1] >= offsets[s], "advantage: span offsets decrease at sequence ", s, " (", offsets[s],
          " -> ", offsets[s + 1], ")");
    for (int32_t t = offsets[s]; t < offsets[s + 1]; ++t) token_values[t] = seq_values[s];
  }
}

}  // namespace sqlrl
