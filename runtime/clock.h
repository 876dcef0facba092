// Wall-clock seconds for the figures the stack reports (metrics.jsonl "time", progress lines,
// deadlines): the steady clock, which no clock adjustment moves.
#pragma once
#include <chrono>

namespace sqlrl {

// Seconds from `start` to now.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace sqlrl
