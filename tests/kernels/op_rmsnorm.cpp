// rmsnorm (kernels/rmsnorm.h): out = w x / sqrt(mean(x^2) + eps) with the saved rstd, and the
// backward (dx and dweight accumulate), on the CPU and on CUDA.
//
// Shapes: the CUDA kernel's vectorised path (dim % 8 == 0) at every team width, its scalar path
// at odd dims, rows 1 / 17 / 1000, Qwen3's q_norm (rows = tokens x heads, dim = head_dim); the
// first shape also checks the float64 backward by finite differences.
//
// Tolerances.
//  CPU (f32): f32_tol with K = dim (the row's sum of squares, the backward's row dot product),
//    K = rows for dweight (a column sum over rows).
//  CUDA: out and dx are bf16, one rounding of an f32 result: half a bf16 ulp, u_bf16 = 2^-8
//    relative (just above a power of two), plus the f32 differences before it (summation order,
//    FMA: ~1e-6 relative), so rtol 1.01 u_bf16; atol 1e-5 for outputs small after cancellation.
//    rstd is f32 (a tree sum): 2e-5 relative, which also held against the CPU's sequential sum
//    of up to 8192 squares (~sqrt(dim) 2^-24 = 5e-6 relative, halved by the square root).
//    dweight: an f32 sum of n terms in any order is within (n - 1) u_f32 sum|terms| of the exact
//    sum (the recursive summation bound); n = rows + 1 here, plus the products' roundings:
//    (rows + 4) u_f32 (sum|terms| + |start|) + 1e-7.
#include "kernels/rmsnorm.h"
#include "tests/kernels/cases.h"

namespace sqlrl::testing {
namespace {

struct NormShape {
  int64_t rows, dim;
  float eps = 1e-6f;
  bool finite_differences = false;
};

const std::vector<NormShape> kShapes = {
    {6, 10, 1e-5f, true}, {1, 64},    {17, 128},
    {1000, 128},          {17, 2560}, {3, 8192},
    {1000, 1000},         {1, 17},    {17, 100},
    {1000, 33},           {5, 3001},  {37 * 32, 128},  // Qwen3's q_norm: 37 tokens x 32 heads
};

struct NormInputs {
  std::vector<float> x, w, dout, dx0, dw0;
};

NormInputs make_inputs(Rng& rng, const NormShape& s, Precision p) {
  const size_t n = static_cast<size_t>(s.rows * s.dim);
  NormInputs in;
  in.x = rng.uniform(n, -2.0, 2.0, p);
  in.w = rng.uniform(s.dim, 0.5, 1.5, p);
  in.dout = rng.uniform(n, -1.0, 1.0, p);
  in.dx0 = rng.uniform(n, -0.5, 0.5, p);  // dx and dweight accumulate: start from non-zero values
  in.dw0 = rng.uniform(s.dim, -1.0, 1.0);
  return in;
}

std::string describe(const NormShape& s, const Rng& rng) {
  return "rows " + std::to_string(s.rows) + " dim " + std::to_string(s.dim) + " seed " + std::to_string(rng.seed());
}

void expect_dweight_within_summation_bound(const std::vector<float>& got, const std::vector<float>& dw0,
                                           const RefRmsnormGrads& g, int64_t rows) {
  for (size_t i = 0; i < got.size(); ++i)
    expect_within(got[i], dw0[i] + g.dw[i],
                  (rows + 4) * unit_roundoff(Precision::F32) * (g.dw_abs[i] + std::fabs(dw0[i])) + 1e-7,
                  "dweight[" + std::to_string(i) + "]");
}

void run_cpu() {
  for (const NormShape& s : kShapes) {
    Rng rng(42);
    SCOPED_TRACE(describe(s, rng));
    const NormInputs in = make_inputs(rng, s, Precision::F32);
    const RefRmsnorm want = ref_rmsnorm(widen(in.x), widen(in.w), s.rows, s.dim, s.eps);
    std::vector<float> out(in.x.size(), NAN), rstd(s.rows, NAN);
    rmsnorm_forward_cpu(out.data(), rstd.data(), in.x.data(), in.w.data(), s.rows, s.dim, s.eps);
    expect_close_f32(out, want.out, s.dim, "out");
    expect_close_f32(rstd, want.rstd, s.dim, "rstd");

    // The backward is handed the forward's f32 rstd; the reference uses the same numbers.
    const RefRmsnormGrads g =
        ref_rmsnorm_backward(widen(in.dout), widen(in.x), widen(in.w), widen(rstd), s.rows, s.dim);
    std::vector<float> dx = in.dx0, dw = in.dw0;
    rmsnorm_backward_cpu(dx.data(), dw.data(), in.dout.data(), in.x.data(), in.w.data(), rstd.data(), s.rows, s.dim);
    expect_close_f32(dx, plus(in.dx0, g.dx), s.dim, "dx");
    expect_close_f32(dw, plus(in.dw0, g.dw), s.rows, "dweight");
    expect_dweight_within_summation_bound(dw, in.dw0, g, s.rows);

    if (s.finite_differences) {
      const std::vector<double> x = widen(in.x), w = widen(in.w), d = widen(in.dout);
      const RefRmsnormGrads exact = ref_rmsnorm_backward(d, x, w, want.rstd, s.rows, s.dim);
      auto objective = [&](const std::vector<double>& xv, const std::vector<double>& wv) {
        return dot(ref_rmsnorm(xv, wv, s.rows, s.dim, s.eps).out, d);
      };
      expect_matches_finite_differences(
          exact.dx, finite_differences(x, [&](const std::vector<double>& v) { return objective(v, w); }), "float64 dx");
      expect_matches_finite_differences(
          exact.dw, finite_differences(w, [&](const std::vector<double>& v) { return objective(x, v); }),
          "float64 dweight");
    }
  }
}

constexpr double kBf16Rtol = 1.01 * unit_roundoff(Precision::BF16);

void run_cuda() {
  uint64_t seed = fresh_seed();
  for (const NormShape& s : kShapes) {
    Rng rng(seed++);
    SCOPED_TRACE(describe(s, rng));
    const int64_t n = s.rows * s.dim;
    const NormInputs in = make_inputs(rng, s, Precision::BF16);
    const RefRmsnorm want = ref_rmsnorm(widen(in.x), widen(in.w), s.rows, s.dim, s.eps);

    Tensor gx = gpu(in.x, DType::BF16), gw = gpu(in.w, DType::BF16), gdout = gpu(in.dout, DType::BF16);
    Tensor gout = poisoned(n, DType::BF16), grstd = poisoned(s.rows, DType::F32);
    rmsnorm_forward_cuda(bf16_ptr(gout), f32_ptr(grstd), bf16_ptr(gx), bf16_ptr(gw), s.rows, s.dim, s.eps,
                         default_stream());
    expect_close(to_floats(gout), want.out, {1e-5, kBf16Rtol}, "out");
    expect_close(to_floats(grstd), want.rstd, {0.0, 2e-5}, "rstd");
    // rstd is optional (inference): the output must not change without it.
    Tensor gout2 = poisoned(n, DType::BF16);
    rmsnorm_forward_cuda(bf16_ptr(gout2), nullptr, bf16_ptr(gx), bf16_ptr(gw), s.rows, s.dim, s.eps, default_stream());
    EXPECT_EQ(to_floats(gout2), to_floats(gout)) << "forward without rstd differs";

    // The backward is handed the reference's rstd rounded to f32; the reference uses the same.
    const std::vector<float> rstd(want.rstd.begin(), want.rstd.end());
    const RefRmsnormGrads g =
        ref_rmsnorm_backward(widen(in.dout), widen(in.x), widen(in.w), widen(rstd), s.rows, s.dim);
    Tensor grstd_in = gpu(rstd, DType::F32), gdx = gpu(in.dx0, DType::BF16), gdw = gpu(in.dw0, DType::F32);
    const size_t ws_bytes = rmsnorm_backward_workspace_bytes(s.rows, s.dim);
    Tensor ws = gpu_bytes(ws_bytes);
    rmsnorm_backward_cuda(bf16_ptr(gdx), f32_ptr(gdw), bf16_ptr(gdout), bf16_ptr(gx), bf16_ptr(gw), f32_ptr(grstd_in),
                          s.rows, s.dim, ws.data(), ws_bytes, default_stream());
    expect_close(to_floats(gdx), plus(in.dx0, g.dx), {1e-5, kBf16Rtol}, "dx");
    const std::vector<float> dw = to_floats(gdw);
    expect_dweight_within_summation_bound(dw, in.dw0, g, s.rows);

    // Bitwise repeatable weight gradient (fixed reduction order, no atomics).
    Tensor gdw2 = gpu(in.dw0, DType::F32), gdx2 = gpu(in.dx0, DType::BF16);
    rmsnorm_backward_cuda(bf16_ptr(gdx2), f32_ptr(gdw2), bf16_ptr(gdout), bf16_ptr(gx), bf16_ptr(gw), f32_ptr(grstd_in),
                          s.rows, s.dim, ws.data(), ws_bytes, default_stream());
    const std::vector<float> dw_again = to_floats(gdw2);
    EXPECT_EQ(std::memcmp(dw.data(), dw_again.data(), dw.size() * sizeof(float)), 0) << "dweight not repeatable";
  }
}

}  // namespace

OpCase rmsnorm_case() { return {"rmsnorm", run_cpu, run_cuda}; }

}  // namespace sqlrl::testing
