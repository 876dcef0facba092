// Shared test helpers: CUDA skipping, fixture paths, tolerance checks.
#pragma once
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/blas_core.h"
#include "runtime/device.h"

// A test process runs the OpenBLAS kernels the binary runs (runtime/blas_core.h: where
// OpenBLAS picked a core below the CPU's, both start again with the better one), so bits a
// test computes in process and bits the binary writes agree on any CPU. Before main.
inline const bool kTestProcessChoseItsCpuKernels = (sqlrl::choose_cpu_kernels(0, nullptr), true);

// AddressSanitizer keeps freed memory in quarantine and adds shadow memory: RSS budgets do not
// hold under it (the sanitizer build of .ci/run), so tests measuring RSS say so and skip that
// check there. Test sources are compiled without the instrumentation (CMakeLists.txt
// sqlrl_test_code), so the build says so with SQLRL_ASAN_BUILD.
#if defined(__SANITIZE_ADDRESS__) || defined(SQLRL_ASAN_BUILD)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

namespace sqlrl::testing {

// The message of the exception `f` throws, "" when it throws none: for tests that assert what an
// error says.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

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

// Removes `dir` (recursively) when this process exits, so that a test run leaves nothing in the
// temp dir (ctest starts one process per test: hundreds of folders otherwise).
// SQLRL_KEEP_TEST_DIRS=1 keeps them for a post-mortem. Only the process that registered a folder
// removes it: a forked child that exits (a SQL pool worker) must not delete what its parent reads.
inline void remove_at_exit(const std::filesystem::path& dir) {
  struct Folders {
    std::vector<std::pair<pid_t, std::filesystem::path>> dirs;  // registering process, folder
    ~Folders() {
      const char* keep = std::getenv("SQLRL_KEEP_TEST_DIRS");
      if (keep && std::string(keep) == "1") return;
      std::error_code ignored;
      for (const auto& [owner, d] : dirs)
        if (owner == ::getpid()) std::filesystem::remove_all(d, ignored);
    }
  };
  static Folders folders;
  folders.dirs.emplace_back(::getpid(), dir);
}

// A folder path under the system temp dir unique to this process (test suites run at the same
// time — two build trees, CI beside a developer — must not share a run folder), removed when the
// process exits (remove_at_exit).
inline std::filesystem::path process_temp_path(const std::string& name) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  remove_at_exit(dir);
  return dir;
}

struct CommandResult {
  int exit_code = -1;  // the process's exit status (-1 when it did not exit normally)
  std::string output;  // stdout and stderr, interleaved as written
};

// Runs a shell command (tests use it for the built binary, SQLRL_BINARY) and collects its output.
inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) result.output.append(buf, n);
  int status = pclose(pipe);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
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
