// Helpers for CUDA benchmarks: time a callable with events (warm-up, then the median of N
// runs) and print a markdown row that scripts/gpu_check.sh copies into its report.
#pragma once
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "runtime/stream.h"

namespace sqlrl::bench {

inline float median_ms(const std::function<void()>& run, int warmup = 3, int reps = 20, CudaStream stream = {}) {
  CudaEvent start = cuda_event_create(stream.device), end = cuda_event_create(stream.device);
  for (int i = 0; i < warmup; ++i) run();
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    cuda_event_record(start, stream);
    run();
    cuda_event_record(end, stream);
    cuda_event_synchronize(end);
    times.push_back(cuda_event_elapsed_ms(start, end));
  }
  cuda_event_destroy(start);
  cuda_event_destroy(end);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// | benchmark | ours | unit | baseline | baseline value | ratio |
inline void print_header() {
  std::printf("| benchmark | ours | unit | baseline | baseline value | ours / baseline |\n");
  std::printf("|---|---|---|---|---|---|\n");
}
inline void print_row(const std::string& name, double ours, const char* unit, const std::string& baseline,
                      double baseline_value) {
  std::printf("| %s | %.3f | %s | %s | %.3f | %.3f |\n", name.c_str(), ours, unit, baseline.c_str(), baseline_value,
              baseline_value > 0 ? ours / baseline_value : 0.0);
  std::fflush(stdout);
}

}  // namespace sqlrl::bench
