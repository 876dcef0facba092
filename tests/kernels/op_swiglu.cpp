// swiglu (kernels/swiglu.h): out = silu(gate) up and its backward (overwrites dgate, dup), on
// the CPU and on CUDA.
//
// Shapes: n = 1, 17, 40, 1000 and 8 Ki + 5 (the CUDA kernel's 16-byte body and scalar tail),
// each also at an offset of 3 elements (unaligned pointers: the scalar path); the registry's
// n = 40 case is also checked by finite differences. Gates span [-8, 8) (both saturated ends).
//
// Tolerances.
//  CPU (f32): elementwise (K = 1): exp, a divide, two or three products, f32_tol with factor 16:
//    dgate's 1 - sigmoid(g) keeps sigmoid's absolute rounding error, which g (|g| < 8) scales.
//  CUDA: bf16 outputs, one rounding of an f32 result: rtol 1.01 u_bf16 (u_bf16 = 2^-8, plus
//    expf / FMA differences of ~1e-7 before the rounding); atol 1e-6 for values near zero
//    (silu(g) u with g or u ~ 0).
#include "kernels/swiglu.h"
#include "tests/kernels/cases.h"

namespace sqlrl::testing {
namespace {

struct SwigluShape {
  int64_t n, offset;
  bool finite_differences = false;
};

const std::vector<SwigluShape> kShapes = {
    {40, 0, true}, {1, 0}, {1, 3}, {17, 0}, {17, 3}, {1000, 0}, {1000, 3}, {8 * 1024 + 5, 0}, {8 * 1024 + 5, 3}};

struct SwigluInputs {
  std::vector<float> gate, up, dout;  // n + offset elements; the kernels see the last n
};

SwigluInputs make_inputs(Rng& rng, const SwigluShape& s, Precision p) {
  const size_t total = static_cast<size_t>(s.n + s.offset);
  return {rng.uniform(total, -8.0, 8.0, p), rng.uniform(total, -2.0, 2.0, p), rng.uniform(total, -1.0, 1.0, p)};
}

std::vector<double> tail(const std::vector<float>& v, int64_t offset) {
  return std::vector<double>(v.begin() + offset, v.end());
}

std::string describe(const SwigluShape& s, const Rng& rng) {
  return "n " + std::to_string(s.n) + " offset " + std::to_string(s.offset) + " seed " + std::to_string(rng.seed());
}

// (1 - s) carries s's absolute rounding error (u_f32), multiplied by g (|g| < 8) in dgate: up to
// 8 u_f32 beyond the usual few roundings.
constexpr double kSwigluFactor = 16.0;

void run_cpu() {
  for (const SwigluShape& s : kShapes) {
    Rng rng(42);
    SCOPED_TRACE(describe(s, rng));
    const SwigluInputs in = make_inputs(rng, s, Precision::F32);
    const int64_t o = s.offset;
    const std::vector<double> g = tail(in.gate, o), u = tail(in.up, o), d = tail(in.dout, o);
    std::vector<double> dg, du;
    ref_swiglu_backward(d, g, u, dg, du);

    std::vector<float> out(s.n, NAN), got_dg(s.n, NAN), got_du(s.n, NAN);
    swiglu_forward_cpu(out.data(), in.gate.data() + o, in.up.data() + o, s.n);
    swiglu_backward_cpu(got_dg.data(), got_du.data(), in.dout.data() + o, in.gate.data() + o, in.up.data() + o, s.n);
    expect_close_f32(out, ref_swiglu(g, u), 1, "out", kSwigluFactor);
    expect_close_f32(got_dg, dg, 1, "dgate", kSwigluFactor);
    expect_close_f32(got_du, du, 1, "dup", kSwigluFactor);

    if (s.finite_differences) {
      expect_matches_finite_differences(
          dg, finite_differences(g, [&](const std::vector<double>& v) { return dot(ref_swiglu(v, u), d); }),
          "float64 dgate");
      expect_matches_finite_differences(
          du, finite_differences(u, [&](const std::vector<double>& v) { return dot(ref_swiglu(g, v), d); }),
          "float64 dup");
    }
  }
}

constexpr Tol kBf16Tol{1e-6, 1.01 * unit_roundoff(Precision::BF16)};

void run_cuda() {
  uint64_t seed = fresh_seed();
  for (const SwigluShape& s : kShapes) {
    Rng rng(seed++);
    SCOPED_TRACE(describe(s, rng));
    const SwigluInputs in = make_inputs(rng, s, Precision::BF16);
    const int64_t o = s.offset;
    const std::vector<double> g = tail(in.gate, o), u = tail(in.up, o), d = tail(in.dout, o);
    std::vector<double> dg, du;
    ref_swiglu_backward(d, g, u, dg, du);

    Tensor gg = gpu(in.gate, DType::BF16), gu = gpu(in.up, DType::BF16), gd = gpu(in.dout, DType::BF16);
    Tensor out = poisoned(s.n + o, DType::BF16), tdg = poisoned(s.n + o, DType::BF16),
           tdu = poisoned(s.n + o, DType::BF16);
    swiglu_forward_cuda(bf16_ptr(out) + o, bf16_ptr(gg) + o, bf16_ptr(gu) + o, s.n, default_stream());
    swiglu_backward_cuda(bf16_ptr(tdg) + o, bf16_ptr(tdu) + o, bf16_ptr(gd) + o, bf16_ptr(gg) + o, bf16_ptr(gu) + o,
                         s.n, default_stream());
    auto got = [&](const Tensor& t) {
      std::vector<float> v = to_floats(t);
      return std::vector<float>(v.begin() + o, v.end());
    };
    expect_close(got(out), ref_swiglu(g, u), kBf16Tol, "out");
    expect_close(got(tdg), dg, kBf16Tol, "dgate");
    expect_close(got(tdu), du, kBf16Tol, "dup");
  }

  // The backward may overwrite its inputs (dgate = gate, dup = up).
  Rng rng(seed);
  SCOPED_TRACE("in place, seed " + std::to_string(rng.seed()));
  const int64_t n = 1003;
  const std::vector<float> gate = rng.uniform(n, -4.0, 4.0, Precision::BF16),
                           up = rng.uniform(n, -2.0, 2.0, Precision::BF16),
                           dout = rng.uniform(n, -1.0, 1.0, Precision::BF16);
  std::vector<double> dg, du;
  ref_swiglu_backward(widen(dout), widen(gate), widen(up), dg, du);
  Tensor gg = gpu(gate, DType::BF16), gu = gpu(up, DType::BF16), gd = gpu(dout, DType::BF16);
  swiglu_backward_cuda(bf16_ptr(gg), bf16_ptr(gu), bf16_ptr(gd), bf16_ptr(gg), bf16_ptr(gu), n, default_stream());
  expect_close(to_floats(gg), dg, kBf16Tol, "in-place dgate");
  expect_close(to_floats(gu), du, kBf16Tol, "in-place dup");
}

}  // namespace

OpCase swiglu_case() { return {"swiglu", run_cpu, run_cuda}; }

}  // namespace sqlrl::testing
