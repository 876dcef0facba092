// GEMM against a float64 loop on random shapes (odd sizes, every transpose combination, batched,
// broadcast, narrowed views). Tolerance: fp32 accumulation of K products has error at most about
// K * 2^-24 * sum_k |a_ik b_kj| (Higham's bound, gamma_K); we allow 2x that plus the output
// rounding of the C type (2^-24 f32, 2^-9 bf16) relative to |ref|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "runtime/gemm.h"
#include "runtime/random.h"
#include "tests/test_util.h"

namespace sqlrl {
namespace {

struct Case {
  int64_t m, n, k, batch;
  bool trans_a, trans_b;
  bool batched_a, batched_b;
  float alpha, beta;
};

// Returns the largest |got - ref| / budget over all elements (<= 1 passes).
double run_case(const Case& c, Device device, DType ab_type, DType c_type, uint64_t seed) {
  Shape shape_a = c.trans_a ? Shape{c.k, c.m} : Shape{c.m, c.k};
  Shape shape_b = c.trans_b ? Shape{c.n, c.k} : Shape{c.k, c.n};
  auto batched = [&](Shape s, bool yes) { return yes ? Shape{c.batch, s[0], s[1]} : s; };
  bool three_d = c.batch > 1 || c.batched_a || c.batched_b;
  Shape sa = batched(shape_a, c.batched_a), sb = batched(shape_b, c.batched_b);
  Shape sc = three_d ? Shape{c.batch, c.m, c.n} : Shape{c.m, c.n};

  Tensor a32 = empty(sa, DType::F32), b32 = empty(sb, DType::F32), c32 = empty(sc, DType::F32);
  fill_uniform(a32, seed, 1, -1.0f, 1.0f);
  fill_uniform(b32, seed, 2, -1.0f, 1.0f);
  fill_uniform(c32, seed, 3, -1.0f, 1.0f);
  // The reference sees exactly the values the backend sees (rounded to the input types).
  Tensor a = to_dtype(a32, ab_type), b = to_dtype(b32, ab_type), cin = to_dtype(c32, c_type);
  std::vector<float> va = to_floats(a), vb = to_floats(b), vc = to_floats(cin);

  Tensor a_dev = to_device(a, device), b_dev = to_device(b, device), c_dev = to_device(cin, device);
  gemm(a_dev, b_dev, c_dev, c.trans_a, c.trans_b, c.alpha, c.beta);
  std::vector<float> got = to_floats(c_dev);

  double out_eps = c_type == DType::F32 ? 0x1p-24 : c_type == DType::BF16 ? 0x1p-9 : 0x1p-11;
  double worst = 0;
  for (int64_t bi = 0; bi < c.batch; ++bi) {
    int64_t off_a = c.batched_a ? bi * c.m * c.k : 0, off_b = c.batched_b ? bi * c.k * c.n : 0;
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0, abs_sum = 0;
        for (int64_t p = 0; p < c.k; ++p) {
          double x = va[off_a + (c.trans_a ? p * c.m + i : i * c.k + p)];
          double y = vb[off_b + (c.trans_b ? j * c.k + p : p * c.n + j)];
          sum += x * y;
          abs_sum += std::fabs(x * y);
        }
        size_t idx = static_cast<size_t>(bi * c.m * c.n + i * c.n + j);
        double ref = c.alpha * sum + (c.beta != 0 ? c.beta * vc[idx] : 0.0);
        double budget = 2.0 * (c.k + 2) * 0x1p-24 * (std::fabs(c.alpha) * abs_sum + std::fabs(c.beta * vc[idx])) +
                        2.0 * out_eps * std::fabs(ref) + 1e-30;
        worst = std::max(worst, std::fabs(got[idx] - ref) / budget);
      }
    }
  }
  return worst;
}

std::vector<Case> random_cases(int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t sizes[] = {1, 2, 3, 7, 16, 17, 31, 64, 65, 100};
  std::vector<Case> cases;
  for (int i = 0; i < count; ++i) {
    Case c{};
    c.m = sizes[rng() % 10];
    c.n = sizes[rng() % 10];
    c.k = sizes[rng() % 10];
    c.trans_a = (i & 1) != 0;
    c.trans_b = (i & 2) != 0;  // every transpose combination appears
    c.batch = (i % 3 == 0) ? 1 + static_cast<int64_t>(rng() % 4) : 1;
    c.batched_a = c.batch > 1 && (rng() % 3 != 0);  // sometimes broadcast A or B over the batch
    c.batched_b = c.batch > 1 && (rng() % 3 != 0);
    c.alpha = (i % 5 == 0) ? -0.5f : 1.0f;
    c.beta = (i % 4 == 0) ? 0.75f : 0.0f;
    cases.push_back(c);
  }
  return cases;
}

std::string describe(const Case& c) {
  return str_cat("m=", c.m, " n=", c.n, " k=", c.k, " batch=", c.batch, " tA=", c.trans_a, " tB=", c.trans_b,
                 " bA=", c.batched_a, " bB=", c.batched_b, " alpha=", c.alpha, " beta=", c.beta);
}

TEST(Gemm, CpuMatchesFloat64OnRandomShapes) {
  uint64_t seed = std::random_device{}();  // fresh inputs each run; printed on failure
  for (const Case& c : random_cases(48, seed)) {
    double ratio = run_case(c, cpu_device(), DType::F32, DType::F32, seed);
    ASSERT_LE(ratio, 1.0) << describe(c) << " seed=" << seed;
  }
}

// The thread-independent mode (runtime/gemm.h) cuts C into fixed tiles: shapes that span several
// tiles both ways, with every transpose and batch layout, must still be the product (a tile
// reading A or B at the wrong offset breaks this), and the mode must not depend on the thread
// pool (its tiles are fixed: checked end to end by the mpirun tests).
TEST(Gemm, ThreadIndependentTilesMatchFloat64) {
  uint64_t seed = std::random_device{}();
  set_gemm_thread_independent(true);
  for (Case c : random_cases(16, seed)) {
    c.m = c.m * 3 + kGemmTileRows + 1;   // 2-6 row tiles, the last one partial
    c.n = c.n * 5 + kGemmTileCols + 7;   // 2-4 column tiles
    double ratio = run_case(c, cpu_device(), DType::F32, DType::F32, seed);
    EXPECT_LE(ratio, 1.0) << describe(c) << " seed=" << seed;
  }
  set_gemm_thread_independent(false);
}

// ... and a row's result does not depend on the other rows: the first rows of a 37-row product
// equal, bit for bit, the product of those rows alone (what makes a rollout of 32 sequences give
// each the logits it gets among 64). OpenBLAS alone does not promise this across M.
TEST(Gemm, ThreadIndependentRowsDoNotDependOnTheOtherRows) {
  set_gemm_thread_independent(true);
  for (bool trans_a : {false, true}) {
    const int64_t K = 300, N = 700;
    Tensor big_a = empty(trans_a ? Shape{K, 37} : Shape{37, K}, DType::F32), b = empty({N, K}, DType::F32);
    fill_uniform(big_a, 11, 1, -1.0f, 1.0f);
    fill_uniform(b, 11, 2, -1.0f, 1.0f);
    Tensor big_c = zeros({37, N}, DType::F32), small_c = zeros({5, N}, DType::F32);
    gemm(big_a, b, big_c, trans_a, true);
    std::vector<float> av = to_floats(big_a), first(static_cast<size_t>(5 * K));
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t k = 0; k < K; ++k) first[static_cast<size_t>(i * K + k)] = trans_a ? av[k * 37 + i] : av[i * K + k];
    gemm(from_floats(first, {5, K}), b, small_c, false, true);
    std::vector<float> want = to_floats(big_c), got = to_floats(small_c);
    for (int64_t i = 0; i < 5 * N; ++i) ASSERT_EQ(got[i], want[i]) << "element " << i << " trans_a " << trans_a;
  }
  set_gemm_thread_independent(false);
}

// quiet_blas_threads restarts OpenBLAS's thread server with a short spin timeout: GEMMs after it
// (threaded ones: 300 x 700 x 300) give the same bits as before it, it takes effect once, and a
// timeout the user set is left alone. A restart that left the server half down would hang or
// crash here; one that changed the partition would change the bits.
extern "C" int openblas_thread_timeout() __attribute__((weak));  // OpenBLAS's cached OPENBLAS_THREAD_TIMEOUT

TEST(Gemm, QuietBlasThreadsKeepsEveryBit) {
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") != nullptr) GTEST_SKIP() << "OPENBLAS_THREAD_TIMEOUT is set here";
  Tensor a = empty({300, 300}, DType::F32), b = empty({700, 300}, DType::F32);
  fill_uniform(a, 12, 1, -1.0f, 1.0f);
  fill_uniform(b, 12, 2, -1.0f, 1.0f);
  Tensor before = zeros({300, 700}, DType::F32), after = zeros({300, 700}, DType::F32);
  gemm(a, b, before, false, true);
  const bool restarted = quiet_blas_threads();
  if (!restarted) GTEST_SKIP() << "this OpenBLAS has no pthread thread server to restart";
  EXPECT_STREQ(std::getenv("OPENBLAS_THREAD_TIMEOUT"), "4");
  if (openblas_thread_timeout) {
    EXPECT_EQ(openblas_thread_timeout(), 4) << "OpenBLAS did not read the new timeout";
  }
  EXPECT_FALSE(quiet_blas_threads()) << "a second call restarts nothing: the timeout is set";
  gemm(a, b, after, false, true);
  const std::vector<float> want = to_floats(before), got = to_floats(after);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
}

TEST(Gemm, NarrowedViewsUseRowStride) {
  // A is the left 3 columns of a 4x5 matrix: lda = 5 while K = 3.
  Tensor big = from_floats({1, 2, 3, 90, 90, 4, 5, 6, 90, 90, 7, 8, 9, 90, 90, 1, 0, 1, 90, 90}, {4, 5});
  Tensor a = narrow(big, 1, 0, 3);
  Tensor b = from_floats({1, 0, 0, 1, 1, 1}, {3, 2});
  Tensor c = zeros({4, 2}, DType::F32);
  gemm(a, b, c, false, false);
  // Hand-computed: row [x, y, z] times b = [x + z, y + z].
  EXPECT_EQ(to_floats(c), (std::vector<float>{4, 5, 10, 11, 16, 17, 2, 1}));
  // Writing into a narrowed C leaves the other columns alone.
  Tensor wide = zeros({4, 3}, DType::F32);
  fill(narrow(wide, 1, 2, 1), 7.0f);
  gemm(a, b, narrow(wide, 1, 0, 2), false, false);
  EXPECT_EQ(to_floats(wide), (std::vector<float>{4, 5, 7, 10, 11, 7, 16, 17, 7, 2, 1, 7}));
}

TEST(Gemm, ZeroKGivesBetaTimesC) {
  Tensor a = empty({3, 0}, DType::F32), b = empty({0, 2}, DType::F32);
  Tensor c = from_floats({1, 2, 3, 4, 5, 6}, {3, 2});
  gemm(a, b, c, false, false, 1.0f, 0.5f);
  EXPECT_EQ(to_floats(c), (std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, 3}));
}

TEST(Gemm, ShapeMismatchNamesBothShapes) {
  Tensor a = zeros({3, 4}, DType::F32), b = zeros({5, 6}, DType::F32), c = zeros({3, 6}, DType::F32);
  try {
    gemm(a, b, c, false, false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("inner dimensions differ (4 vs 5)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("A f32[3, 4] on cpu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("B f32[5, 6] on cpu"), std::string::npos) << msg;
  }
  EXPECT_THROW(gemm(zeros({3, 4}, DType::F32), zeros({4, 6}, DType::F32), zeros({3, 5}, DType::F32), false, false),
               Error);  // wrong C
  EXPECT_THROW(gemm(zeros({3, 4}, DType::BF16), zeros({4, 6}, DType::BF16), zeros({3, 6}, DType::F32), false, false),
               Error);  // bf16 on CPU
  EXPECT_THROW(gemm(zeros({2, 3, 4}, DType::F32), zeros({3, 4, 6}, DType::F32), zeros({2, 3, 6}, DType::F32), false,
                    false),
               Error);  // batch mismatch
}

TEST(Gemm, DeviceMismatchNamesBothDevices) {
  float dummy[24] = {};
  Tensor a_gpu = wrap(dummy, {3, 4}, DType::F32, cuda_device(0), nullptr);
  Tensor b = zeros({4, 2}, DType::F32), c = zeros({3, 2}, DType::F32);
  try {
    gemm(a_gpu, b, c, false, false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("on cuda:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("on cpu"), std::string::npos) << msg;
  }
}

// --- CUDA ----------------------------------------------------------------------------------------

TEST(GemmCuda, F32MatchesFloat64) {
  SQLRL_REQUIRE_CUDA();
  uint64_t seed = std::random_device{}();
  for (const Case& c : random_cases(48, seed)) {
    if (c.k == 0) continue;
    double ratio = run_case(c, cuda_device(0), DType::F32, DType::F32, seed);
    ASSERT_LE(ratio, 1.0) << describe(c) << " seed=" << seed;
  }
}

TEST(GemmCuda, Bf16InputsFp32Accumulation) {
  SQLRL_REQUIRE_CUDA();
  uint64_t seed = std::random_device{}();
  for (const Case& c : random_cases(48, seed)) {
    ASSERT_LE(run_case(c, cuda_device(0), DType::BF16, DType::F32, seed), 1.0) << describe(c) << " seed=" << seed;
    ASSERT_LE(run_case(c, cuda_device(0), DType::BF16, DType::BF16, seed), 1.0) << describe(c) << " seed=" << seed;
  }
}

TEST(GemmCuda, NarrowedAndLargeShapes) {
  SQLRL_REQUIRE_CUDA();
  uint64_t seed = std::random_device{}();
  Case big{513, 257, 1000, 1, false, true, false, false, 1.0f, 0.0f};
  ASSERT_LE(run_case(big, cuda_device(0), DType::BF16, DType::F32, seed), 1.0) << " seed=" << seed;
  Tensor a = to_device(from_floats({1, 2, 3, 90, 4, 5, 6, 90}, {2, 4}), cuda_device(0));
  Tensor b = to_device(from_floats({1, 0, 0, 1, 1, 1}, {3, 2}), cuda_device(0));
  Tensor c = zeros({2, 2}, DType::F32, cuda_device(0));
  gemm(narrow(a, 1, 0, 3), b, c, false, false);
  EXPECT_EQ(to_floats(c), (std::vector<float>{4, 5, 10, 11}));
}

}  // namespace
}  // namespace sqlrl
