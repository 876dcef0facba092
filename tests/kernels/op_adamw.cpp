// The optimizer's kernels: AdamW and the gradient norm (kernels/adamw.h) on the CPU and on
// CUDA. (The group advantage and the policy loss are RL algorithm code on the host:
// rl/grpo/algos.h, tested in tests/rl_grpo/test_algos.cpp.) Inputs are fresh per run
// (Rng::fresh, the seed in the trace): odd sizes.
//
// Tolerances.
//  adamw: five fp32 steps of size ~lr: errors ~1e-7 relative per step on parameters of size ~1:
//    params 1e-6 + 1e-5 relative, m 1e-7 + 1e-5, v 1e-9 + 1e-5 (kept: a per-element derivation
//    from the moments' magnitudes was not tighter everywhere). CUDA runs adamw_element, the same
//    inline code, and must agree with the CPU to 1e-6 relative every step (FMA contraction is
//    the only difference), and with float64 within the CPU's budget plus that 1e-6.
//  grad_norm: a float64 sum of n exact f32 squares: 16 u_f64 sqrt(n) relative (< 1e-12 for every
//    n here); the clip coefficient (<= 1) is then one f32 rounding (<= u_f32 of it): 1.5 u_f32
//    (< 1e-7, the earlier absolute budget).
#include "kernels/adamw.h"
#include "tests/kernels/cases.h"

namespace sqlrl::testing {
namespace {

// --- adamw ---------------------------------------------------------------------------------
const AdamWConfig kAdam{0.9f, 0.95f, 1e-8f, 0.1f};
constexpr float kLr = 1e-2f;
const std::vector<int64_t> kAdamSizes = {1, 17, 1000, 70001, 300001};
constexpr Tol kParamTol{1e-6, 1e-5}, kMTol{1e-7, 1e-5}, kVTol{1e-9, 1e-5};
constexpr Tol kCudaVsCpu{1e-6, 1e-6};
constexpr Tol plus_cuda(Tol t) { return {t.atol + kCudaVsCpu.atol, t.rtol + kCudaVsCpu.rtol}; }

void run_adamw_cpu() {
  Rng rng = Rng::fresh();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  for (int64_t n : kAdamSizes) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<float> p = rng.normal(n), m(n, 0.0f), v(n, 0.0f);
    RefAdam ref{widen(p), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
    for (int64_t step = 1; step <= 5; ++step) {
      const std::vector<float> g = rng.normal(n, 3.0);
      const double sq = ref_grad_sq_sum(g);
      const float scale = clip_coefficient(sq, 1.0f);
      adamw_cpu(p.data(), m.data(), v.data(), g.data(), n, kAdam, step, kLr, scale);
      ref_adamw_step(ref, g, scale, kLr, kAdam.beta1, kAdam.beta2, kAdam.eps, kAdam.weight_decay, step);
    }
    expect_close(p, ref.p, kParamTol, "params");
    expect_close(m, ref.m, kMTol, "m");
    expect_close(v, ref.v, kVTol, "v");
  }
}

void run_adamw_cuda() {
  Rng rng = Rng::fresh();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  for (int64_t n : kAdamSizes) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<float> p = rng.normal(n), m(n, 0.0f), v(n, 0.0f);
    RefAdam ref{widen(p), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
    Tensor dp = gpu(p, DType::F32), dm = gpu(m, DType::F32), dv = gpu(v, DType::F32);
    Tensor ws = gpu_bytes(grad_sq_sum_workspace_bytes());
    for (int64_t step = 1; step <= 3; ++step) {
      const std::vector<float> g = rng.normal(n);
      // The clip coefficient is read on the device from grad_sq_sum_cuda's double.
      Tensor dg = gpu(g, DType::F32), sq = upload(std::vector<double>{NAN});
      grad_sq_sum_cuda(static_cast<double*>(sq.data()), f32_ptr(dg), n, ws.data(), default_stream());
      Tensor bf = poisoned(n, DType::BF16);
      adamw_cuda(f32_ptr(dp), f32_ptr(dm), f32_ptr(dv), f32_ptr(dg), bf16_ptr(bf), n, kAdam, step, kLr,
                 static_cast<double*>(sq.data()), 0.5f, default_stream());
      const float scale = clip_coefficient(ref_grad_sq_sum(g), 0.5f);
      adamw_cpu(p.data(), m.data(), v.data(), g.data(), n, kAdam, step, kLr, scale);
      ref_adamw_step(ref, g, scale, kLr, kAdam.beta1, kAdam.beta2, kAdam.eps, kAdam.weight_decay, step);
      const std::vector<float> got = to_floats(dp);
      expect_close(got, widen(p), kCudaVsCpu, "params vs the CPU");
      // The bf16 copy is the updated parameters rounded to nearest even.
      const std::vector<float> wide = to_floats(bf);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(wide[i], round_bf16(got[i])) << i;
    }
    const std::vector<float> got_p = to_floats(dp), got_m = to_floats(dm), got_v = to_floats(dv);
    expect_close(got_m, widen(m), {1e-7, 1e-6}, "m vs the CPU");
    expect_close(got_v, widen(v), {1e-9, 1e-6}, "v vs the CPU");
    expect_close(got_p, ref.p, plus_cuda(kParamTol), "params");
    expect_close(got_m, ref.m, plus_cuda(kMTol), "m");
    expect_close(got_v, ref.v, plus_cuda(kVTol), "v");
  }
}

// --- grad_norm -----------------------------------------------------------------------------
double grad_norm_rtol(int64_t n) { return reduction_rtol(Precision::F64, n, 16.0); }

void run_grad_norm_cpu() {
  Rng rng = Rng::fresh();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  for (int64_t n : kAdamSizes) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> g = rng.normal(n, 3.0);
    const double sq = grad_sq_sum_cpu(g.data(), n), want = ref_grad_sq_sum(g);
    expect_within(sq, want, grad_norm_rtol(n) * want, "squared norm");
    const double coefficient = ref_clip_coefficient(want, 1.0);
    expect_within(clip_coefficient(sq, 1.0f), coefficient, 1.5 * unit_roundoff(Precision::F32) * coefficient,
                  "clip coefficient");
  }
  EXPECT_EQ(clip_coefficient(4.0, 0.0f), 1.0f);   // disabled
  EXPECT_EQ(clip_coefficient(0.25, 1.0f), 1.0f);  // norm 0.5 under the limit
}

void run_grad_norm_cuda() {
  Rng rng = Rng::fresh();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  Tensor ws = gpu_bytes(grad_sq_sum_workspace_bytes());
  for (int64_t n : kAdamSizes) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> g = rng.normal(n);
    Tensor dg = gpu(g, DType::F32), sq = upload(std::vector<double>{NAN});  // poisoned
    grad_sq_sum_cuda(static_cast<double*>(sq.data()), f32_ptr(dg), n, ws.data(), default_stream());
    const double got = download<double>(sq, 1)[0], want = ref_grad_sq_sum(g);
    expect_within(got, want, grad_norm_rtol(n) * want, "squared norm");
    EXPECT_NEAR(got, grad_sq_sum_cpu(g.data(), n), 1e-12 * want);  // float64 sums in two orders
  }
}

}  // namespace

OpCase adamw_case() { return {"adamw", run_adamw_cpu, run_adamw_cuda}; }
OpCase grad_norm_case() { return {"grad_norm", run_grad_norm_cpu, run_grad_norm_cuda}; }

}  // namespace sqlrl::testing
