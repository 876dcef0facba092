// runtime/blas_core.h: which OpenBLAS kernels the CPU GEMMs run. The pick is a table (tested
// here on CPUs this machine is not), and the binary applies it before its first GEMM: with
// OPENBLAS_CORETYPE=Prescott (the SSE3 kernels Debian 12's OpenBLAS falls back to on current
// Intel Xeons), `llm_sqlrl info` still runs kernels of the CPU's own vector width.
#include <gtest/gtest.h>

#include <cblas.h>

#include "runtime/blas_core.h"
#include "runtime/error.h"
#include "tests/test_util.h"

namespace sqlrl {
namespace {

CpuFeatures intel_avx512_bf16() { return {false, true, true, true, true}; }
CpuFeatures intel_avx512() { return {false, true, true, true, false}; }
CpuFeatures intel_avx2() { return {false, true, true, false, false}; }
CpuFeatures amd_avx512() { return {true, true, true, true, false}; }
CpuFeatures amd_avx2() { return {true, true, true, false, false}; }
CpuFeatures sse_only() { return {false, false, false, false, false}; }

// Catches: fast keeping an SSE core on an AVX-512 Intel (the 4.4x loss), fast moving an AMD
// machine off OpenBLAS's own Zen kernels (other bits than the README's table for nothing), a
// downgrade of a core already as wide as the CPU, portable not pinning Haswell.
TEST(BlasCore, FastRaisesOnlyACoreBelowTheCpu) {
  EXPECT_EQ(pick_blas_core(CpuKernels::fast, intel_avx512_bf16(), "Prescott"), "Cooperlake");
  EXPECT_EQ(pick_blas_core(CpuKernels::fast, intel_avx512(), "Prescott"), "SkylakeX");
  EXPECT_EQ(pick_blas_core(CpuKernels::fast, intel_avx512(), "Haswell"), "SkylakeX");
  EXPECT_EQ(pick_blas_core(CpuKernels::fast, intel_avx512(), "SKYLAKEX"), "");
  EXPECT_EQ(pick_blas_core(CpuKernels::fast, intel_avx512_bf16(), "SkylakeX"), "") << "same width: OpenBLAS's choice";
  EXPECT_EQ(pick_blas_core(CpuKernels::fast, intel_avx2(), "Nehalem"), "Haswell");
  EXPECT_EQ(pick_blas_core(CpuKernels::fast, intel_avx2(), "Haswell"), "");
  EXPECT_EQ(pick_blas_core(CpuKernels::fast, amd_avx512(), "Zen"), "");
  EXPECT_EQ(pick_blas_core(CpuKernels::fast, amd_avx2(), "Prescott"), "Zen");
  EXPECT_EQ(pick_blas_core(CpuKernels::fast, sse_only(), "Prescott"), "");
  EXPECT_EQ(pick_blas_core(CpuKernels::fast, intel_avx512(), "SomeFutureLake"), "") << "unknown names stand";
}

TEST(BlasCore, PortableIsHaswellEverywhereAndInheritKeepsAnything) {
  for (const CpuFeatures& cpu : {intel_avx512_bf16(), intel_avx2(), amd_avx512(), amd_avx2()}) {
    EXPECT_EQ(pick_blas_core(CpuKernels::portable, cpu, "Zen"), "Haswell");
    EXPECT_EQ(pick_blas_core(CpuKernels::portable, cpu, "haswell"), "");
    EXPECT_EQ(pick_blas_core(CpuKernels::inherit, cpu, "Prescott"), "");
  }
  try {
    pick_blas_core(CpuKernels::portable, sse_only(), "Prescott");
    ADD_FAILURE() << "portable on a CPU without AVX2 should be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AVX2"), std::string::npos) << e.what();
  }
}

TEST(BlasCore, LevelsAndModesAreTables) {
  EXPECT_EQ(blas_core_level("Prescott"), 0);
  EXPECT_EQ(blas_core_level("sandybridge"), 1);
  EXPECT_EQ(blas_core_level("Zen"), 2);
  EXPECT_EQ(blas_core_level("Cooperlake"), 3);
  EXPECT_EQ(blas_core_level("Unknown"), -1);
  EXPECT_GE(blas_core_level(openblas_get_corename()), 0) << "this machine's core is missing from the table: "
                                                         << openblas_get_corename();
  for (const CpuKernelsMode& m : cpu_kernel_modes()) {
    ASSERT_EQ(find_cpu_kernels_mode(m.name), &m);
    EXPECT_NE(cpu_kernels_help().find(std::string(m.name) + ": "), std::string::npos);
  }
  EXPECT_EQ(find_cpu_kernels_mode("fastest"), nullptr);
}

std::string info_line(const std::string& output, const std::string& key) {
  const size_t at = output.find(key);
  if (at == std::string::npos) return "";
  return output.substr(at, output.find('\n', at) - at);
}

// The binary applies the pick before its first GEMM (an exec of itself with OPENBLAS_CORETYPE).
// Catches: an SSE core on a machine with AVX2 (the Intel Xeon, simulated here by forcing
// Prescott), portable not reaching Haswell, inherit not keeping the forced core.
TEST(BlasCore, TheBinaryNeverRunsAnSseCoreOnAnAvx2Machine) {
  const std::string info = std::string("OPENBLAS_CORETYPE=Prescott ") + SQLRL_BINARY;
  const CpuFeatures cpu = cpu_features();
  auto run = testing::run_command(info + " info");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string line = info_line(run.output, "cpu kernels : ");
  ASSERT_FALSE(line.empty()) << run.output;
  if (cpu.avx2_fma) {
    const std::string core = line.substr(line.find("core ") + 5, line.find(' ', line.find("core ") + 5) - line.find("core ") - 5);
    EXPECT_GE(blas_core_level(core), wanted_blas_level(cpu)) << line;
    EXPECT_NE(line.find("(it had picked Prescott)"), std::string::npos) << line;
    run = testing::run_command(info + " --cpu-kernels portable info");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(info_line(run.output, "cpu kernels : ").find("portable: OpenBLAS core Haswell"), std::string::npos)
        << run.output;
  } else {
    EXPECT_NE(line.find("core Prescott"), std::string::npos) << line;
  }
  run = testing::run_command(info + " info --cpu-kernels inherit");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(info_line(run.output, "cpu kernels : ").find("inherit: OpenBLAS core Prescott"), std::string::npos)
      << run.output;
  run = testing::run_command(std::string(SQLRL_BINARY) + " info --cpu-kernels fastest");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("--cpu-kernels"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace sqlrl
