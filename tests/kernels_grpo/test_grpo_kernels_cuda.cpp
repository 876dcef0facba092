// CUDA GRPO kernels against the CPU path (itself held to float64 in the CPU tests), outputs
// poisoned with NaN first so that an unwritten element fails. Skips without a device.
#include <cstring>
#include <random>

#include "kernels/adamw.h"
#include "kernels/advantage.h"
#include "kernels/grpo_loss.h"
#include "runtime/random.h"
#include "runtime/tensor.h"
#include "tests/kernels_grpo/grpo_case.h"
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

Tensor poisoned(int64_t n) {
  Tensor t = empty({std::max<int64_t>(n, 1)}, DType::F32, cuda_device(0));
  fill(t, NAN);
  return t;
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

TEST(GrpoKernelsCuda, AdvantageAndBroadcastMatchCpu) {
  SQLRL_REQUIRE_CUDA();
  std::mt19937 rng(std::random_device{}());
  for (int64_t G : {1, 5, 17, 40}) {
    for (int64_t groups : {1, 17, 1000}) {
      std::vector<float> r = random_rewards(rng, groups, G), want(r.size());
      group_advantage_cpu(want.data(), r.data(), groups, G, AdvantageOptions{});
      Tensor dr = upload(r, DType::F32), da = poisoned(groups * G);
      group_advantage_cuda(da.data_as<float>(), dr.data_as<float>(), groups, G, AdvantageOptions{}, CudaStream{});
      std::vector<float> got = download<float>(da, r.size());
      // Same float64 sums in another order, then one rounding to f32: within 2 ulp.
      EXPECT_LE(error_budget_ratio(got, std::vector<double>(want.begin(), want.end()), 1e-7, 3e-7), 1.0);
    }
  }
  std::vector<int32_t> offsets = {0, 0, 1, 18, 18, 1018};
  std::vector<float> values = {1, 2, 3, 4, 5}, want(1018);
  broadcast_spans_cpu(want.data(), values.data(), offsets.data(), 5);
  Tensor doff = upload(offsets, DType::I32), dv = upload(values, DType::F32), dout = poisoned(1018);
  broadcast_spans_cuda(dout.data_as<float>(), dv.data_as<float>(), doff.data_as<int32_t>(), 5, 1018, CudaStream{});
  EXPECT_EQ(download<float>(dout, 1018), want);
}

TEST(GrpoKernelsCuda, LossMatchesCpuAndRepeats) {
  SQLRL_REQUIRE_CUDA();
  std::mt19937 rng(std::random_device{}());
  for (int64_t T : {1, 17, 1000, 5000}) {
    for (bool token_mean : {true, false}) {
      LossCase c = random_loss_case(rng, T);
      GrpoLossConfig cfg{0.2f, 0.28f, 0.05f, token_mean ? LossAgg::TokenMean : LossAgg::SeqMeanTokenMean,
                         c.denominator(token_mean)};
      std::vector<float> want(T);
      GrpoLossStats ws = grpo_loss_cpu(want.data(), c.logp.data(), c.old.data(), c.ref.data(), c.adv.data(),
                                       c.mask.data(), c.cu.data(), c.num_seqs(), cfg);
      Tensor lp = upload(c.logp, DType::F32), old = upload(c.old, DType::F32), ref = upload(c.ref, DType::F32);
      Tensor adv = upload(c.adv, DType::F32), mask = upload(c.mask, DType::U8), cu = upload(c.cu, DType::I32);
      Tensor ws_dev = empty({static_cast<int64_t>(grpo_loss_workspace_bytes(T, c.num_seqs()))}, DType::U8, cuda_device(0));
      std::vector<float> first;
      std::vector<uint8_t> first_stats;
      for (int rep = 0; rep < 2; ++rep) {
        Tensor d = poisoned(T), stats = poisoned_bytes(sizeof(GrpoLossStats));
        grpo_loss_cuda(d.data_as<float>(), static_cast<GrpoLossStats*>(stats.data()), lp.data_as<float>(),
                       old.data_as<float>(), ref.data_as<float>(), adv.data_as<float>(), mask.data_as<uint8_t>(),
                       cu.data_as<int32_t>(), c.num_seqs(), T, cfg, ws_dev.data(), CudaStream{});
        std::vector<float> got = download<float>(d, T);
        std::vector<uint8_t> sb = download<uint8_t>(stats, sizeof(GrpoLossStats));
        GrpoLossStats gs;
        std::memcpy(&gs, sb.data(), sizeof gs);
        // expf on the device is within 2 ulp of glibc's: a few fp32 roundings apart.
        EXPECT_LE(error_budget_ratio(got, std::vector<double>(want.begin(), want.end()), 1e-7 / cfg.denominator, 1e-5), 1.0);
        EXPECT_NEAR(gs.loss, ws.loss, 1e-5 * (1 + std::fabs(ws.loss)));
        EXPECT_EQ(gs.tokens, ws.tokens);
        EXPECT_NEAR(gs.clipped, ws.clipped, 1.0);  // a ratio on the clip edge may round either way
        EXPECT_NEAR(gs.ratio, ws.ratio, 1e-5 * ws.tokens);
        EXPECT_NEAR(gs.approx_kl, ws.approx_kl, 1e-5 * ws.tokens);
        EXPECT_NEAR(gs.ref_kl, ws.ref_kl, 1e-5 * ws.tokens);
        if (rep == 0) first = got, first_stats = sb;
        else EXPECT_TRUE(first == got && first_stats == sb) << "two runs differ in their bits";
      }
    }
  }
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
