// The kernel harness, in the spirit of ggml's tests/test-backend-ops.cpp: one OpCase per op
// (tests/kernels/op_*.cpp: its shapes, its inputs, its tolerances), run on every backend the
// build has against the float64 references of ref.h. test_kernels.cpp turns each (op, backend)
// pair into one named test, Ops/Kernel.MatchesFloat64/<op>_<backend>; a CUDA instance without a
// device is reported as skipped with the reason (a failure under SQLRL_REQUIRE_GPU=1).
//
// Backends and their dtypes: the CPU kernels read and write f32; the CUDA kernels read bf16
// activations (inputs are rounded to bf16 once, so the reference sees the same numbers), compute
// in f32 and write bf16 activations and f32 statistics, gradients of weights and optimizer state.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/device_memory.h"
#include "runtime/dtype.h"
#include "runtime/stream.h"
#include "runtime/tensor.h"
#include "tests/kernels/ref.h"
#include "tests/test_util.h"

namespace sqlrl::testing {

enum class Backend { Cpu, Cuda };
inline const char* backend_name(Backend b) { return b == Backend::Cpu ? "cpu" : "cuda"; }
inline Precision activation_precision(Backend b) { return b == Backend::Cpu ? Precision::F32 : Precision::BF16; }

// One op: a runner per backend that has a kernel for it (empty: the op has no kernel there, as
// kernels/*.h declares, so there is no test for that pair). A runner loops over the op's shapes
// and asserts with gtest; SCOPED_TRACE names the shape and the seed.
struct OpCase {
  std::string name;
  std::function<void()> cpu, cuda;
};

// One factory per op (tests/kernels/op_*.cpp), listed in test_kernels.cpp.
OpCase matmul_case();
OpCase decode_qkv_case();
OpCase rmsnorm_case();
OpCase rope_case();
OpCase swiglu_case();
OpCase embedding_case();
OpCase logprob_case();
OpCase attention_case();
OpCase attention_prefix_case();
OpCase paged_attention_case();
OpCase sampling_case();
OpCase adamw_case();
OpCase adamw_bf16_moments_case();
OpCase grad_norm_case();

// ---------------------------------------------------------------------------------------------
// Comparisons
// ---------------------------------------------------------------------------------------------
struct Tol {
  double atol = 0, rtol = 0;
};

// The f32 budget of ref.h for a result computed through a K-term reduction: rtol = factor u
// sqrt(K), with the absolute floor rtol x RMS(want). kF32Factor = 8: the reduction plus up to
// ~4 elementwise roundings (each <= u) with a 2x margin; the CPU kernels' worst elements measure
// 0.1-0.4 of their budgets (each test prints its worst ratio).
constexpr double kF32Factor = 8.0;
inline Tol f32_tol(const std::vector<double>& want, int64_t K, double factor = kF32Factor) {
  const double r = reduction_rtol(Precision::F32, K, factor);
  return {r * rms(want), r};
}

// The worst error seen by the running test, as a fraction of its budget (printed at its end).
inline double& worst_budget_ratio() {
  static double worst = 0;
  return worst;
}

// Every element within atol + rtol |want| (NaN anywhere fails: an unwritten, poisoned output).
// Returns the worst ratio error / budget.
inline double expect_close(const std::vector<float>& got, const std::vector<double>& want, Tol tol,
                           const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  double worst = 0, diff2 = 0, ref2 = 0;
  size_t worst_i = 0, nan = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) {
      ++nan;
      continue;
    }
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double ratio = d / (tol.atol + tol.rtol * std::fabs(want[i]));
    if (ratio > worst) worst = ratio, worst_i = i;
    diff2 += d * d, ref2 += want[i] * want[i];
  }
  EXPECT_EQ(nan, 0u) << what << ": " << nan << " NaN (unwritten?) of " << got.size();
  EXPECT_LE(worst, 1.0) << what << ": element " << worst_i << " is " << got[worst_i] << ", want " << want[worst_i]
                        << ": " << worst << "x its budget (atol " << tol.atol << ", rtol " << tol.rtol
                        << "), relative L2 " << std::sqrt(diff2 / (ref2 > 0 ? ref2 : 1));
  worst_budget_ratio() = std::max(worst_budget_ratio(), worst);
  return worst;
}

// One value within an absolute budget (recorded like expect_close's elements).
inline void expect_within(double got, double want, double budget, const std::string& what) {
  EXPECT_NEAR(got, want, budget) << what;
  if (budget > 0) worst_budget_ratio() = std::max(worst_budget_ratio(), std::fabs(got - want) / budget);
}

// f32 results: elementwise within f32_tol, and the relative L2 error within 2 rtol (what the
// elementwise bound implies when the floor is rtol x RMS; with rtol <= 5e-6 it is the NMSE <=
// 1e-10 the op registry asked before).
inline void expect_close_f32(const std::vector<float>& got, const std::vector<double>& want, int64_t K,
                             const std::string& what, double factor = kF32Factor) {
  const Tol tol = f32_tol(want, K, factor);
  expect_close(got, want, tol, what);
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    diff2 += (got[i] - want[i]) * (got[i] - want[i]);
    ref2 += want[i] * want[i];
  }
  EXPECT_LE(std::sqrt(diff2 / std::max(ref2, 1e-300)), 2 * tol.rtol) << what << ": relative L2";
}

// The analytic float64 backward against central differences of the float64 forward (this
// validates the reference itself): the differences are good to ~1e-9 (finite_differences), so
// 1e-7 of the RMS plus 1e-6 relative leaves a 100x margin and still catches a wrong term.
inline void expect_matches_finite_differences(const std::vector<double>& analytic, const std::vector<double>& fd,
                                              const std::string& what) {
  ASSERT_EQ(analytic.size(), fd.size()) << what;
  const double floor = 1e-7 * std::max(rms(fd), 1e-3);
  for (size_t i = 0; i < fd.size(); ++i)
    EXPECT_NEAR(analytic[i], fd[i], floor + 1e-6 * std::fabs(fd[i])) << what << " element " << i;
}

// Elementwise sum of a starting value and a float64 result (accumulating kernels: want = start + grad).
inline std::vector<double> plus(const std::vector<float>& start, const std::vector<double>& x) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<double>(start[i]) + x[i];
  return y;
}

template <typename T>
std::string join(const std::vector<T>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? " " : "") << v[i];
  return s.str();
}

// ---------------------------------------------------------------------------------------------
// CUDA buffers through Tensor (these compile without CUDA; the runners only run with a device)
// ---------------------------------------------------------------------------------------------
inline CudaStream default_stream() { return CudaStream{nullptr, 0}; }
inline Tensor gpu(const std::vector<float>& v, DType dtype) {
  return from_floats(v, {static_cast<int64_t>(v.size())}, dtype, cuda_device(0));
}
inline Tensor gpu_ints(const std::vector<int32_t>& v) {
  return from_ints(v, {static_cast<int64_t>(v.size())}, cuda_device(0));
}
// Outputs start as NaN, so that an element the kernel does not write fails.
inline Tensor poisoned(int64_t n, DType dtype) {
  Tensor t = empty({n}, dtype, cuda_device(0));
  fill(t, NAN);
  return t;
}
inline Tensor gpu_bytes(size_t bytes) {
  return empty({static_cast<int64_t>(bytes > 0 ? bytes : 1)}, DType::U8, cuda_device(0));
}
inline uint16_t* bf16_ptr(const Tensor& t) { return t.data_as<uint16_t>(); }
inline float* f32_ptr(const Tensor& t) { return t.data_as<float>(); }

// Raw host <-> device copies of plain arrays (doubles, structs).
template <typename T>
Tensor upload(const std::vector<T>& host) {
  Tensor t = gpu_bytes(host.size() * sizeof(T));
  if (!host.empty()) memcpy_between(t.data(), cuda_device(0), host.data(), cpu_device(), host.size() * sizeof(T));
  return t;
}
template <typename T>
std::vector<T> download(const Tensor& t, size_t n) {
  std::vector<T> out(n);
  if (n > 0) memcpy_between(out.data(), cpu_device(), t.data(), cuda_device(0), n * sizeof(T));
  return out;
}

}  // namespace sqlrl::testing
