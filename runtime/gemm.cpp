#include "runtime/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <vector>

#include "runtime/thread_pool.h"

namespace sqlrl {
namespace {

struct MatrixView {
  int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0, batch = 1;
};

MatrixView matrix_view(const char* name, const Tensor& t) {
  check(t.ndim() == 2 || t.ndim() == 3, "gemm: ", name, " must be 2-D or 3-D, got ", t.str());
  int r = t.ndim() - 2;
  MatrixView v;
  v.rows = t.shape[r];
  v.cols = t.shape[r + 1];
  check(t.strides[r + 1] == 1 || v.cols <= 1, "gemm: ", name, " ", t.str(), " must have unit column stride");
  v.ld = std::max<int64_t>(t.strides[r], std::max<int64_t>(v.cols, 1));
  if (t.ndim() == 3) {
    v.batch = t.shape[0];
    v.batch_stride = t.strides[0];
  }
  return v;
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, float alpha, float beta,
          const CudaStream& stream) {
  check_same_device("gemm", a, b);
  check_same_device("gemm", a, c);
  MatrixView va = matrix_view("A", a), vb = matrix_view("B", b), vc = matrix_view("C", c);
  int64_t m = trans_a ? va.cols : va.rows, k = trans_a ? va.rows : va.cols;
  int64_t kb = trans_b ? vb.cols : vb.rows, n = trans_b ? vb.rows : vb.cols;
  auto describe = [&] {
    return str_cat("op(A)=", trans_a ? "A^T" : "A", " with A ", a.str(), ", op(B)=", trans_b ? "B^T" : "B",
                   " with B ", b.str(), ", C ", c.str());
  };
  check(k == kb, "gemm: inner dimensions differ (", k, " vs ", kb, "): ", describe());
  check(vc.rows == m && vc.cols == n, "gemm: C must be [", m, ", ", n, "]: ", describe());
  check(a.ndim() == 2 || va.batch == vc.batch, "gemm: batch of A (", va.batch, ") != batch of C (", vc.batch, "): ", describe());
  check(b.ndim() == 2 || vb.batch == vc.batch, "gemm: batch of B (", vb.batch, ") != batch of C (", vc.batch, "): ", describe());
  check(a.ndim() == 2 || c.ndim() == 3, "gemm: 3-D A needs a 3-D C: ", describe());
  check(b.ndim() == 2 || c.ndim() == 3, "gemm: 3-D B needs a 3-D C: ", describe());
  check(a.dtype == b.dtype, "gemm: A and B must share a dtype: ", describe());

  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.batch = vc.batch;
  p.a = a.data();
  p.b = b.data();
  p.c = c.data();
  p.lda = va.ld;
  p.ldb = vb.ld;
  p.ldc = vc.ld;
  p.stride_a = a.ndim() == 3 ? va.batch_stride : 0;
  p.stride_b = b.ndim() == 3 ? vb.batch_stride : 0;
  p.stride_c = vc.batch_stride;
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.alpha = alpha;
  p.beta = beta;
  p.ab_type = a.dtype;
  p.c_type = c.dtype;
  if (m == 0 || n == 0 || p.batch == 0) return;

  if (c.device().is_cpu()) {
    check(a.dtype == DType::F32 && c.dtype == DType::F32, "gemm on the CPU runs in f32 (convert with to_dtype): ",
          describe());
    gemm_cpu(p);
  } else {
    check(dtype_is_float(a.dtype), "gemm: A/B must be a float type: ", describe());
    check(c.dtype == a.dtype || c.dtype == DType::F32, "gemm: C must be ", dtype_name(a.dtype), " or f32: ", describe());
    gemm_cuda(p, c.device().index, stream);
  }
}

namespace {

std::atomic<bool> g_thread_independent{false};

// C[r0:r0+rows, c0:c0+cols] of one batch entry.
void sgemm_tile(const GemmProblem& p, const float* a, const float* b, float* c, int64_t r0, int64_t rows, int64_t c0,
                int64_t cols) {
  // Rows r0.. of op(A): rows of A, or columns of A when transposed; columns c0.. of op(B):
  // columns of B, or rows of B when transposed.
  const float* a_rows = p.trans_a ? a + r0 : a + r0 * p.lda;
  const float* b_cols = p.trans_b ? b + c0 * p.ldb : b + c0;
  cblas_sgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans, p.trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(p.k), p.alpha, a_rows,
              static_cast<int>(p.lda), b_cols, static_cast<int>(p.ldb), p.beta, c + r0 * p.ldc + c0,
              static_cast<int>(p.ldc));
}

}  // namespace

// The pthread build's thread server (driver/others/blas_server.c in OpenBLAS): exported but not in
// cblas.h, so weak: absent in another build, they are null and quiet_blas_threads does nothing.
extern "C" {
void openblas_read_env() __attribute__((weak));
int blas_thread_init() __attribute__((weak));
int blas_thread_shutdown_() __attribute__((weak));
}

bool quiet_blas_threads() {
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") != nullptr) return false;
  if (!openblas_read_env || !blas_thread_init || !blas_thread_shutdown_) return false;
  if (openblas_get_parallel() != OPENBLAS_THREAD) return false;  // not OPENBLAS_SEQUENTIAL or OPENBLAS_OPENMP
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
  openblas_read_env();      // the library read its environment when it was loaded
  blas_thread_shutdown_();  // and started its threads with the old timeout then
  blas_thread_init();
  return true;
}

void set_gemm_thread_independent(bool on) {
  // Off again restores OpenBLAS's own thread count, so a stretch of thread-independent GEMMs (the
  // trainer's evaluations) leaves the GEMMs after it computing what they computed before it.
  static int threads_before = 0;
  if (on && !g_thread_independent) threads_before = openblas_get_num_threads();
  if (on) openblas_set_num_threads(1);
  if (!on && g_thread_independent && threads_before > 0) openblas_set_num_threads(threads_before);
  g_thread_independent = on;
}

bool gemm_thread_independent() { return g_thread_independent; }

void gemm_cpu(const GemmProblem& p) {
  const float* a = static_cast<const float*>(p.a);
  const float* b = static_cast<const float*>(p.b);
  float* c = static_cast<float*>(p.c);
  for (int64_t i = 0; i < p.batch; ++i) {
    if (p.k == 0) {  // BLAS leaves C untouched when K=0; the definition says C = beta*C
      for (int64_t r = 0; r < p.m; ++r)
        for (int64_t col = 0; col < p.n; ++col) {
          float& out = c[i * p.stride_c + r * p.ldc + col];
          out = p.beta == 0.0f ? 0.0f : p.beta * out;
        }
      continue;
    }
    const float* ai = a + i * p.stride_a;
    const float* bi = b + i * p.stride_b;
    float* ci = c + i * p.stride_c;
    if (!g_thread_independent) {
      sgemm_tile(p, ai, bi, ci, 0, p.m, 0, p.n);
      continue;
    }
    const int64_t row_tiles = (p.m + kGemmTileRows - 1) / kGemmTileRows;
    const int64_t col_tiles = (p.n + kGemmTileCols - 1) / kGemmTileCols;
    default_thread_pool().parallel_for(static_cast<size_t>(row_tiles * col_tiles), 1, [&](size_t begin, size_t end) {
      // Every call has the same shape: op(A)'s rows of the tile copied (zero-padded to
      // kGemmTileRows rows, transposed when op(A) is A^T) into a row-major scratch, C's tile
      // computed into a scratch and its real rows copied back. So a row's result depends on its
      // own values only, never on M or on the other rows (a rollout step of 32 sequences and one
      // of 64 give each sequence the same logits).
      thread_local std::vector<float> sa, sc;
      for (size_t t = begin; t < end; ++t) {
        const int64_t r0 = static_cast<int64_t>(t) / col_tiles * kGemmTileRows;
        const int64_t c0 = static_cast<int64_t>(t) % col_tiles * kGemmTileCols;
        const int64_t rows = std::min(kGemmTileRows, p.m - r0), cols = std::min(kGemmTileCols, p.n - c0);
        sa.assign(static_cast<size_t>(kGemmTileRows * p.k), 0.0f);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t kk = 0; kk < p.k; ++kk)
            sa[static_cast<size_t>(i * p.k + kk)] = p.trans_a ? ai[kk * p.lda + r0 + i] : ai[(r0 + i) * p.lda + kk];
        sc.assign(static_cast<size_t>(kGemmTileRows * cols), 0.0f);
        if (p.beta != 0.0f)
          for (int64_t i = 0; i < rows; ++i)
            std::copy(ci + (r0 + i) * p.ldc + c0, ci + (r0 + i) * p.ldc + c0 + cols, sc.begin() + i * cols);
        const float* b_cols = p.trans_b ? bi + c0 * p.ldb : bi + c0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, p.trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(kGemmTileRows),
                    static_cast<int>(cols), static_cast<int>(p.k), p.alpha, sa.data(), static_cast<int>(p.k), b_cols,
                    static_cast<int>(p.ldb), p.beta, sc.data(), static_cast<int>(cols));
        for (int64_t i = 0; i < rows; ++i)
          std::copy(sc.begin() + i * cols, sc.begin() + (i + 1) * cols, ci + (r0 + i) * p.ldc + c0);
      }
    });
  }
}

}  // namespace sqlrl
