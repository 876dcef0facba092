// Helpers for the CUDA op tests: fresh random inputs (seed printed on failure), bf16 rounding so
// both paths see the same inputs, device buffers through Tensor, NaN-poisoned outputs, and
// comparisons that report the worst error as a fraction of its budget.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/stream.h"
#include "runtime/tensor.h"
#include "tests/test_util.h"

namespace sqlrl::testing {

inline uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  std::vector<float> uniform(size_t n, float low, float high) {
    std::uniform_real_distribution<float> dist(low, high);
    std::vector<float> v(n);
    for (float& x : v) x = dist(gen);
    return v;
  }
  std::vector<int32_t> ints(size_t n, int32_t low, int32_t high) {  // [low, high]
    std::uniform_int_distribution<int32_t> dist(low, high);
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = dist(gen);
    return v;
  }
};

inline float round_bf16(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }
inline std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = round_bf16(x);
  return v;
}

inline CudaStream default_stream() { return CudaStream{nullptr, 0}; }

inline Tensor gpu(const std::vector<float>& v, DType dtype) {
  return from_floats(v, {static_cast<int64_t>(v.size())}, dtype, cuda_device(0));
}
inline Tensor gpu_ints(const std::vector<int32_t>& v) {
  return from_ints(v, {static_cast<int64_t>(v.size())}, cuda_device(0));
}
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

inline std::vector<double> widen(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// Every element within atol + rtol |want| (NaN anywhere fails), and the relative L2 error.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want, double atol, double rtol,
                         const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double ratio = error_budget_ratio(got, want, atol, rtol);
  size_t nan = 0;
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) ++nan;
    diff2 += (got[i] - want[i]) * (got[i] - want[i]);
    ref2 += want[i] * want[i];
  }
  EXPECT_EQ(nan, 0u) << what << ": " << nan << " NaN (unwritten?) of " << got.size();
  EXPECT_LE(ratio, 1.0) << what << ": worst error is " << ratio << "x its budget (atol " << atol << ", rtol " << rtol
                        << "), relative L2 " << std::sqrt(diff2 / (ref2 > 0 ? ref2 : 1));
}
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol,
                         const char* what) {
  expect_close(got, widen(want), atol, rtol, what);
}

}  // namespace sqlrl::testing
