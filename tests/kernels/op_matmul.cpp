// matmul (kernels/matmul.h): out = x w^T + b, its backward (accumulating), and the few-token
// forward of decode steps (whose token rows must not depend on the call: each equals the token's
// product alone, bit for bit). CPU only: there is no CUDA matmul kernel in kernels/ (the GPU model
// calls runtime/gemm.h's cuBLASLt GEMM directly).
//
// Tolerance: f32 results of K-term dot products, K = C for the forward, O for dx, T for dw and
// db (f32_tol). The first shape also checks the float64 backward against finite differences.
#include <cstring>

#include "kernels/matmul.h"
#include "tests/kernels/cases.h"

namespace sqlrl::testing {
namespace {

struct MatmulShape {
  int64_t T, C, O;
  bool bias, finite_differences;
};

const std::vector<MatmulShape> kShapes = {
    {7, 12, 9, true, true},      // the registry's case, checked by finite differences
    {1, 1, 1, true, false},      // one of everything
    {13, 33, 17, false, false},  // odd sizes, no bias
    {4, 64, 100, true, false},   // a decode step's shape (the few-token path's 32-lane body)
    {16, 100, 30, true, false},  // the few-token path's limit; C leaves a tail after the lanes
    {40, 100, 30, true, false},
    {75, 70, 150, true, false},  // the few-token kernel's blocks of tokens and outputs, partial ones last
};

void run_cpu() {
  for (const MatmulShape& s : kShapes) {
    const int64_t T = s.T, C = s.C, O = s.O;
    Rng rng(42);
    SCOPED_TRACE(::testing::Message() << "T " << T << " C " << C << " O " << O << " bias " << s.bias << " seed "
                                      << rng.seed());
    std::vector<float> x = rng.normal(T * C), w = rng.normal(O * C), b = s.bias ? rng.normal(O) : std::vector<float>{};
    std::vector<float> dout = rng.normal(T * O), dx0 = rng.normal(T * C), dw0 = rng.normal(O * C), db0 = rng.normal(O);
    const float* bias = s.bias ? b.data() : nullptr;
    const std::vector<double> want = ref_matmul(widen(x), widen(w), widen(b), T, C, O);

    std::vector<float> out(T * O, NAN);
    matmul_forward_cpu(out.data(), x.data(), w.data(), bias, T, C, O);
    expect_close_f32(out, want, C, "out");
    {  // the decode path (and batch-invariant prefills): another summation order, the same budget
      std::vector<float> rows(T * O, NAN);
      matmul_forward_rows_cpu(rows.data(), x.data(), w.data(), bias, T, C, O);
      expect_close_f32(rows, want, C, "out (few-token path)");
      // ... and a token's outputs are the bits it gets alone (model/infer.h batch_invariant).
      std::vector<float> alone(O, NAN);
      for (int64_t t = 0; t < T; ++t) {
        matmul_forward_rows_cpu(alone.data(), x.data() + t * C, w.data(), bias, 1, C, O);
        ASSERT_EQ(0, std::memcmp(alone.data(), rows.data() + t * O, sizeof(float) * O)) << "token " << t;
      }
    }

    const RefMatmulGrads g = ref_matmul_backward(widen(dout), widen(x), widen(w), T, C, O);
    std::vector<float> dx = dx0, dw = dw0, db = db0;
    matmul_backward_cpu(dx.data(), dw.data(), s.bias ? db.data() : nullptr, dout.data(), x.data(), w.data(), T, C, O);
    expect_close_f32(dx, plus(dx0, g.dx), O, "dx");
    expect_close_f32(dw, plus(dw0, g.dw), T, "dw");
    if (s.bias)
      expect_close_f32(db, plus(db0, g.db), T, "db");
    else
      EXPECT_EQ(db, db0) << "db changed without a bias";

    if (s.finite_differences) {
      const std::vector<double> xd = widen(x), wd = widen(w), bd = widen(b), dd = widen(dout);
      expect_matches_finite_differences(
          g.dx,
          finite_differences(xd, [&](const std::vector<double>& v) { return dot(ref_matmul(v, wd, bd, T, C, O), dd); }),
          "float64 dx");
      expect_matches_finite_differences(
          g.dw,
          finite_differences(wd, [&](const std::vector<double>& v) { return dot(ref_matmul(xd, v, bd, T, C, O), dd); }),
          "float64 dw");
      expect_matches_finite_differences(
          g.db,
          finite_differences(bd, [&](const std::vector<double>& v) { return dot(ref_matmul(xd, wd, v, T, C, O), dd); }),
          "float64 db");
    }
  }
}

}  // namespace

OpCase matmul_case() { return {"matmul", run_cpu, nullptr}; }

}  // namespace sqlrl::testing
