#include "kernels/matmul.h"

#include "runtime/gemm.h"
#include "runtime/thread_pool.h"

namespace sqlrl {

namespace {

void sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool trans_a, const float* b, int64_t ldb,
           bool trans_b, float* c, int64_t ldc, float beta) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = a;
  p.b = b;
  p.c = c;
  p.lda = lda;
  p.ldb = ldb;
  p.ldc = ldc;
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.beta = beta;
  if (m == 0 || n == 0) return;
  gemm_cpu(p);
}

}  // namespace

void matmul_forward_cpu(float* out, const float* inp, const float* weight, const float* bias, int64_t tokens,
                        int64_t in_features, int64_t out_features) {
  float beta = 0.0f;
  if (bias) {
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t o = 0; o < out_features; ++o) out[t * out_features + o] = bias[o];
    beta = 1.0f;
  }
  sgemm(tokens, out_features, in_features, inp, in_features, false, weight, in_features, true, out, out_features, beta);
}

void matmul_backward_cpu(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, int64_t tokens, int64_t in_features, int64_t out_features) {
  if (dinp)
    sgemm(tokens, in_features, out_features, dout, out_features, false, weight, in_features, false, dinp, in_features,
          1.0f);
  if (dweight)
    sgemm(out_features, in_features, tokens, dout, out_features, true, inp, in_features, false, dweight, in_features,
          1.0f);
  if (dbias) {
    // Columns in parallel, tokens in order: the sum is the same whatever the thread count.
    default_thread_pool().parallel_for(static_cast<size_t>(out_features), 64, [&](size_t begin, size_t end) {
      for (size_t o = begin; o < end; ++o) {
        float sum = 0.0f;
        for (int64_t t = 0; t < tokens; ++t) sum += dout[t * out_features + static_cast<int64_t>(o)];
        dbias[o] += sum;
      }
    });
  }
}

}  // namespace sqlrl
