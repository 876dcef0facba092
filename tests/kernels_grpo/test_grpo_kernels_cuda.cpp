// CUDA AdamW and grad norm against the CPU path (itself held to float64 in the CPU tests), outputs
// poisoned with NaN first so that an unwritten element fails. Skips without a device.
#include <cstring>
#include <random>

#include "kernels/adamw.h"
#include "runtime/random.h"
#include "runtime/tensor.h"
#include "tests/test_util.h"

namespace sqlrl::testing {
namespace {

template <typename T>
Tensor upload(const std::vector<T>& host, DType dtype) {
  int64_t n = static_cast<int64_t>(host.size() * sizeof(T) / dtype_size(dtype));
  Tensor cpu = wrap(const_cast<T*>(host.data()), {std::max<int64_t>(n, 1)}, dtype, cpu_device(), nullptr);
  if (n == 0) return empty({1}, dtype, cuda_device(0));
  return to_device(cpu, cuda_device(0));
}

// n raw bytes on the device, every byte 0xFF (a NaN pattern for doubles).
Tensor poisoned_bytes(size_t n) {
  std::vector<uint8_t> ff(std::max<size_t>(n, 1), 0xFF);
  return upload(ff, DType::U8);
}

template <typename T>
std::vector<T> download(const Tensor& t, size_t n) {
  Tensor host = to_device(t, cpu_device());
  std::vector<T> out(n);
  std::memcpy(out.data(), host.data(), n * sizeof(T));
  return out;
}

TEST(GrpoKernelsCuda, AdamWGradNormAndBf16CopyMatchCpu) {
  SQLRL_REQUIRE_CUDA();
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t n : {1, 17, 1000, 300001}) {
    std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
    for (auto& x : p) x = normal(rng);
    Tensor dp = upload(p, DType::F32), dm = upload(m, DType::F32), dv = upload(v, DType::F32);
    Tensor ws = empty({static_cast<int64_t>(grad_sq_sum_workspace_bytes())}, DType::U8, cuda_device(0));
    AdamWConfig cfg{0.9f, 0.95f, 1e-8f, 0.1f};
    for (int64_t step = 1; step <= 3; ++step) {
      for (auto& x : g) x = normal(rng);
      Tensor dg = upload(g, DType::F32), sq = poisoned_bytes(sizeof(double));
      grad_sq_sum_cuda(static_cast<double*>(sq.data()), dg.data_as<float>(), n, ws.data(), CudaStream{});
      double got_sq = download<double>(sq, 1)[0], want_sq = grad_sq_sum_cpu(g.data(), n);
      EXPECT_NEAR(got_sq, want_sq, 1e-12 * want_sq);  // float64 sums in two orders
      Tensor bf = empty({n}, DType::BF16, cuda_device(0));
      fill(bf, NAN);
      adamw_cuda(dp.data_as<float>(), dm.data_as<float>(), dv.data_as<float>(), dg.data_as<float>(),
                 bf.data_as<uint16_t>(), n, cfg, step, 1e-2f, static_cast<double*>(sq.data()), 0.5f, CudaStream{});
      adamw_cpu(p.data(), m.data(), v.data(), g.data(), n, cfg, step, 1e-2f, clip_coefficient(want_sq, 0.5f));
      std::vector<float> got = download<float>(dp, n);
      EXPECT_LE(error_budget_ratio(got, std::vector<double>(p.begin(), p.end()), 1e-6, 1e-6), 1.0);
      std::vector<float> wide = to_floats(bf);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(wide[i], bf16_bits_to_f32(f32_to_bf16_bits(got[i]))) << i;
    }
    EXPECT_LE(error_budget_ratio(download<float>(dm, n), std::vector<double>(m.begin(), m.end()), 1e-7, 1e-6), 1.0);
    EXPECT_LE(error_budget_ratio(download<float>(dv, n), std::vector<double>(v.begin(), v.end()), 1e-9, 1e-6), 1.0);
  }
}

}  // namespace
}  // namespace sqlrl::testing
