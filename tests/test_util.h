// Shared test helpers: CUDA skipping, fixture paths, tolerance checks.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/device.h"

namespace sqlrl::testing {

inline std::string fixture_path(const std::string& relative) { return std::string(SQLRL_FIXTURES_DIR) + "/" + relative; }

// scripts/gpu_check.sh sets SQLRL_REQUIRE_GPU=1: there a missing device is a failure, not a skip.
inline bool gpu_required() {
  const char* env = std::getenv("SQLRL_REQUIRE_GPU");
  return env && std::string(env) == "1";
}

// Max |a-b| / (atol + rtol*|b|) over all elements: <= 1 passes. Printing the ratio shows how
// close to its budget a comparison runs.
inline double error_budget_ratio(const std::vector<float>& got, const std::vector<double>& want, double atol,
                                 double rtol) {
  double worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    double budget = atol + rtol * std::fabs(want[i]);
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    worst = std::max(worst, diff / budget);
  }
  return worst;
}

}  // namespace sqlrl::testing

// Skips the calling test when no CUDA device is present (a failure under SQLRL_REQUIRE_GPU=1).
// A macro because GTEST_SKIP must return from the test body itself.
#define SQLRL_REQUIRE_CUDA()                                                                   \
  do {                                                                                         \
    if (::sqlrl::cuda_device_count() == 0) {                                                   \
      if (::sqlrl::testing::gpu_required()) FAIL() << ::sqlrl::cuda_unavailable_reason();      \
      GTEST_SKIP() << ::sqlrl::cuda_unavailable_reason();                                      \
    }                                                                                          \
  } while (0)
