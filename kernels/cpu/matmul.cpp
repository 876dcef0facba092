#include "kernels/matmul.h"

#include <algorithm>

#include "kernels/cpu/vec.h"
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

// Few tokens (decode steps): sgemm would pack the whole weight matrix on every call — as many
// bytes moved as the product itself reads — so stream each weight row once instead and dot it
// with up to kRows token rows held in L1. Each output is one fixed-order sum on one thread:
// the result does not depend on the thread count.
constexpr int64_t kRows = 4, kLanes = 32;

template <bool Fma>
[[gnu::always_inline]] inline void small_tokens_body(float* out, const float* inp, const float* weight,
                                                     const float* bias, int64_t T, int64_t C, int64_t OC, int64_t o0,
                                                     int64_t o1) {
  const int64_t body = C / kLanes * kLanes;
  for (int64_t o = o0; o < o1; ++o) {
    const float* w = weight + o * C;
    for (int64_t t0 = 0; t0 < T; t0 += kRows) {
      const float* x[kRows];
      for (int64_t r = 0; r < kRows; ++r) x[r] = inp + std::min(t0 + r, T - 1) * C;
      float acc[kRows][kLanes] = {};
      for (int64_t c = 0; c < body; c += kLanes) {
#pragma GCC unroll 4
        for (int64_t r = 0; r < kRows; ++r)
          for (int64_t l = 0; l < kLanes; ++l) acc[r][l] = cpu::madd<Fma>(x[r][c + l], w[c + l], acc[r][l]);
      }
      for (int64_t r = 0; r < kRows && t0 + r < T; ++r) {
        for (int64_t width = kLanes / 2; width > 0; width /= 2)
          for (int64_t l = 0; l < width; ++l) acc[r][l] += acc[r][l + width];
        float sum = acc[r][0];
        for (int64_t c = body; c < C; ++c) sum = cpu::madd<Fma>(x[r][c], w[c], sum);
        out[(t0 + r) * OC + o] = bias ? sum + bias[o] : sum;
      }
    }
  }
}

[[gnu::target("avx512f,avx512vl,avx2,fma")]] void small_tokens_avx512(float* out, const float* inp,
                                                                       const float* weight, const float* bias,
                                                                       int64_t T, int64_t C, int64_t OC, int64_t o0,
                                                                       int64_t o1) {
  small_tokens_body<true>(out, inp, weight, bias, T, C, OC, o0, o1);
}

[[gnu::target("avx2,fma")]] void small_tokens_avx2(float* out, const float* inp, const float* weight,
                                                    const float* bias, int64_t T, int64_t C, int64_t OC, int64_t o0,
                                                    int64_t o1) {
  small_tokens_body<true>(out, inp, weight, bias, T, C, OC, o0, o1);
}

void small_tokens_base(float* out, const float* inp, const float* weight, const float* bias, int64_t T, int64_t C,
                       int64_t OC, int64_t o0, int64_t o1) {
  small_tokens_body<false>(out, inp, weight, bias, T, C, OC, o0, o1);
}

}  // namespace

// Many tokens (a batch-invariant prefill, model/infer.h): blocks of kTokenBlock tokens by
// kOutputBlock outputs, so that a block's token rows stay in L1 while its weight rows come from
// L2, instead of every output re-reading all the tokens. Each (token, output) sum is computed by
// small_tokens_body alone, whatever block it falls in, so the blocking changes no bit.
constexpr int64_t kTokenBlock = 32, kOutputBlock = 64;

void matmul_forward_rows_cpu(float* out, const float* inp, const float* weight, const float* bias, int64_t T,
                             int64_t C, int64_t OC) {
  auto* run = cpu::cpu_isa() == cpu::Isa::Avx512 ? small_tokens_avx512
              : cpu::cpu_isa() == cpu::Isa::Avx2 ? small_tokens_avx2
                                                 : small_tokens_base;
  if (T > kTokenBlock) {
    const int64_t token_blocks = (T + kTokenBlock - 1) / kTokenBlock, output_blocks = (OC + kOutputBlock - 1) / kOutputBlock;
    default_thread_pool().parallel_for(static_cast<size_t>(token_blocks * output_blocks), 1, [&](size_t begin, size_t end) {
      for (size_t task = begin; task < end; ++task) {
        const int64_t t0 = static_cast<int64_t>(task) / output_blocks * kTokenBlock;
        const int64_t o0 = static_cast<int64_t>(task) % output_blocks * kOutputBlock;
        run(out + t0 * OC, inp + t0 * C, weight, bias, std::min(kTokenBlock, T - t0), C, OC, o0,
            std::min(OC, o0 + kOutputBlock));
      }
    });
    return;
  }
  // ~64 KFLOP per chunk at least, so a chunk outweighs waking a worker.
  size_t min_chunk = static_cast<size_t>(std::max<int64_t>(1, 32768 / std::max<int64_t>(1, T * C)));
  default_thread_pool().parallel_for(static_cast<size_t>(OC), min_chunk, [&](size_t begin, size_t end) {
    run(out, inp, weight, bias, T, C, OC, static_cast<int64_t>(begin), static_cast<int64_t>(end));
  });
}

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
