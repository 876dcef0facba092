// matmul (kernels/matmul.h): out = x w^T + b, its backward (accumulating), and the few-token
// forward of decode steps on the CPU (whose token rows must not depend on the call: each equals
// the token's product alone, bit for bit); on CUDA the few-row product of decode steps
// (matmul_rows_cuda: both variants, every epilogue, one to three weight parts, split K, M up to
// 128). Prefill and training GEMMs on CUDA are runtime/gemm.h's cuBLASLt.
//
// Tolerance, CPU: f32 results of K-term dot products, K = C for the forward, O for dx, T for dw
// and db (f32_tol). The first shape also checks the float64 backward against finite differences.
// Tolerance, CUDA (bf16 operands exact in both, products exact in f32, sums in f32): an f32 sum of
// K terms in any order is within K u_f32 sum|terms| of the exact sum; the tensor cores' order is
// not the CPU's, so the budget per element is 1.01 u_bf16 |want| (the output's one rounding; none
// for store_f32) + K u_f32 sum|terms| (+ bias and the old value: both exact in f32). swiglu adds
// the propagation of both sums' errors through silu(g) u: |silu'(g) u| dg + |silu(g)| du with
// silu' <= 1.1, and expf's few-ulp error (4 u_f32 |out|).
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

// ---- CUDA: matmul_rows_cuda -------------------------------------------------------------------
struct RowsShape {
  int64_t M, K;
  std::vector<int64_t> parts;  // rows of each weight part (swiglu: gate, up)
  bool bias;
  MatmulRowsEpilogue epilogue;
  const char* what;
};

// Splits happen where K leaves room (K >= 256 per split) and the tiles are few next to 4 blocks
// per SM; the tails: parts whose rows are not multiples of a warp's 16, swiglu outputs not a
// multiple of a block's 32, M not a multiple of 8.
const std::vector<RowsShape> kRowsShapes = {
    {1, 64, {48}, true, MatmulRowsEpilogue::store, "M 1, one part, bias"},
    {3, 4096, {40}, false, MatmulRowsEpilogue::store, "one tile, K split many ways"},
    {9, 1024, {64, 16, 16}, true, MatmulRowsEpilogue::store, "q/k/v parts with biases"},
    {17, 2560, {80}, false, MatmulRowsEpilogue::accumulate, "residual add, split K"},
    {33, 512, {72, 72}, false, MatmulRowsEpilogue::swiglu, "swiglu, partial tile"},
    {64, 256, {1000}, false, MatmulRowsEpilogue::store_f32, "lm_head-like, f32 out"},
    {100, 2048, {136, 136}, false, MatmulRowsEpilogue::swiglu, "swiglu, M 100, split K"},
    {128, 1024, {24, 40}, true, MatmulRowsEpilogue::accumulate, "M 128, two parts, bias, residual"},
};

struct RowsWant {
  std::vector<double> out, budget;
};

// The float64 product and each element's budget (see the top of the file).
RowsWant rows_reference(const RowsShape& s, const std::vector<float>& x, const std::vector<std::vector<float>>& w,
                        const std::vector<std::vector<float>>& b, const std::vector<float>& old) {
  const int64_t M = s.M, K = s.K;
  const double u32 = unit_roundoff(Precision::F32), u16 = unit_roundoff(Precision::BF16);
  int64_t total = 0;
  for (int64_t r : s.parts) total += r;
  std::vector<double> dot(static_cast<size_t>(M * total)), mag(dot.size());
  int64_t col = 0;
  for (size_t p = 0; p < s.parts.size(); ++p)
    for (int64_t r = 0; r < s.parts[p]; ++r, ++col)
      for (int64_t m = 0; m < M; ++m) {
        double d = 0, a = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double t = static_cast<double>(x[m * K + k]) * w[p][r * K + k];
          d += t, a += std::fabs(t);
        }
        dot[m * total + col] = d + (b[p].empty() ? 0.0 : b[p][r]);
        mag[m * total + col] = static_cast<double>(K) * u32 * a;
      }
  RowsWant want;
  if (s.epilogue == MatmulRowsEpilogue::swiglu) {
    const int64_t I = s.parts[0];
    for (int64_t m = 0; m < M; ++m)
      for (int64_t i = 0; i < I; ++i) {
        const double g = dot[m * total + i], u = dot[m * total + I + i];
        const double sig = 1.0 / (1.0 + std::exp(-g)), out = g * sig * u;
        want.out.push_back(out);
        want.budget.push_back(1.01 * u16 * std::fabs(out) + 4 * u32 * std::fabs(out) +
                              1.1 * std::fabs(u) * mag[m * total + i] + std::fabs(g * sig) * mag[m * total + I + i]);
      }
    return want;
  }
  const bool rounds = s.epilogue != MatmulRowsEpilogue::store_f32;
  for (size_t i = 0; i < dot.size(); ++i) {
    const double v = dot[i] + (s.epilogue == MatmulRowsEpilogue::accumulate ? old[i] : 0.0);
    want.out.push_back(v);
    want.budget.push_back((rounds ? 1.01 * u16 * std::fabs(v) : 0.0) + mag[i] + 1e-30);
  }
  return want;
}

// Every element within its own budget (NaN fails); returns the worst ratio.
void expect_within_budgets(const std::vector<float>& got, const RowsWant& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.out.size()) << what;
  double worst = 0;
  size_t worst_i = 0, nan = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) {
      ++nan;
      continue;
    }
    const double r = std::fabs(got[i] - want.out[i]) / want.budget[i];
    if (r > worst) worst = r, worst_i = i;
  }
  EXPECT_EQ(nan, 0u) << what << ": " << nan << " NaN (unwritten?) of " << got.size();
  EXPECT_LE(worst, 1.0) << what << ": element " << worst_i << " is " << got[worst_i] << ", want " << want.out[worst_i]
                        << ": " << worst << "x its budget " << want.budget[worst_i];
  worst_budget_ratio() = std::max(worst_budget_ratio(), worst);
}

struct RowsRun {
  std::vector<float> out;
  std::vector<uint8_t> tickets;  // the workspace's ticket bytes after the call
};

RowsRun run_rows(const RowsShape& s, MatmulRowsVariant variant, int64_t M, const std::vector<float>& x,
                 const std::vector<Tensor>& w, const std::vector<Tensor>& b, const std::vector<float>& old) {
  const bool swiglu = s.epilogue == MatmulRowsEpilogue::swiglu, f32 = s.epilogue == MatmulRowsEpilogue::store_f32;
  int64_t total = 0;
  for (int64_t r : s.parts) total += r;
  const int64_t cols = swiglu ? s.parts[0] : total;
  MatmulRowsProblem p;
  Tensor gx = gpu(std::vector<float>(x.begin(), x.begin() + M * s.K), DType::BF16);
  Tensor out = s.epilogue == MatmulRowsEpilogue::accumulate
                   ? gpu(std::vector<float>(old.begin(), old.begin() + M * cols), DType::BF16)
                   : poisoned(M * cols, f32 ? DType::F32 : DType::BF16);
  p.out = out.data();
  p.ld_out = cols;
  p.x = bf16_ptr(gx);
  p.ld_x = s.K;
  p.rows = M;
  p.in_features = s.K;
  p.num_parts = static_cast<int>(s.parts.size());
  for (int i = 0; i < p.num_parts; ++i) p.parts[i] = {bf16_ptr(w[i]), s.bias ? bf16_ptr(b[i]) : nullptr, s.parts[i]};
  p.epilogue = s.epilogue;
  p.variant = variant;
  const int sms = cuda_device_info(0).multiprocessors;
  const size_t bytes = matmul_rows_workspace_bytes(total, s.K, swiglu, M, sms);
  Tensor ws = upload(std::vector<uint8_t>(bytes, 0));  // the tickets start at zero
  matmul_rows_cuda(p, ws.data(), bytes, default_stream());
  const MatmulRowsGrid grid = matmul_rows_grid(total, s.K, swiglu, sms);
  return {to_floats(out), download<uint8_t>(ws, matmul_rows_ticket_bytes(grid))};
}

void run_cuda() {
  uint64_t seed = fresh_seed();
  const int sms = cuda_device_info(0).multiprocessors;
  for (const RowsShape& s : kRowsShapes) {
    Rng rng(seed++);
    const bool swiglu = s.epilogue == MatmulRowsEpilogue::swiglu;
    int64_t total = 0;
    for (int64_t r : s.parts) total += r;
    const MatmulRowsGrid grid = matmul_rows_grid(total, s.K, swiglu, sms);
    SCOPED_TRACE(::testing::Message() << s.what << ": M " << s.M << " K " << s.K << " N " << total << ", "
                                      << grid.tiles << " tiles x " << grid.splits << " splits, seed " << rng.seed());
    const int64_t cols = swiglu ? s.parts[0] : total;
    std::vector<float> x = rng.normal(s.M * s.K, 1.0, 0.0, Precision::BF16);
    std::vector<float> old = rng.normal(s.M * cols, 4.0, 0.0, Precision::BF16);
    std::vector<std::vector<float>> w, b;
    std::vector<Tensor> gw, gb;
    for (int64_t r : s.parts) {
      w.push_back(rng.normal(r * s.K, 0.05, 0.0, Precision::BF16));
      b.push_back(s.bias ? rng.normal(r, 0.5, 0.0, Precision::BF16) : std::vector<float>{});
      gw.push_back(gpu(w.back(), DType::BF16));
      gb.push_back(s.bias ? gpu(b.back(), DType::BF16) : Tensor{});
    }
    const RowsWant want = rows_reference(s, x, w, b, old);
    for (MatmulRowsVariant variant : {MatmulRowsVariant::staged, MatmulRowsVariant::direct}) {
      SCOPED_TRACE(variant == MatmulRowsVariant::staged ? "staged" : "direct");
      const RowsRun run = run_rows(s, variant, s.M, x, gw, gb, old);
      expect_within_budgets(run.out, want, "out");
      EXPECT_TRUE(std::all_of(run.tickets.begin(), run.tickets.end(), [](uint8_t v) { return v == 0; }))
          << "the tile tickets must be left at zero for the next launch";

      // Batch invariance: the first row alone gives the same bits as inside the batch.
      const RowsRun alone = run_rows(s, variant, 1, x, gw, gb, old);
      ASSERT_EQ(alone.out.size(), static_cast<size_t>(cols));
      EXPECT_EQ(0, std::memcmp(alone.out.data(), run.out.data(), sizeof(float) * cols))
          << "row 0 differs between M = 1 and M = " << s.M;
    }
  }
}

}  // namespace

OpCase matmul_case() { return {"matmul", run_cpu, run_cuda}; }

}  // namespace sqlrl::testing
