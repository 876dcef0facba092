// Varlen causal GQA attention (training) on the CPU; paged decode attention is in
// attention_paged.cpp.
//
// Work is cut into tiles of kRows queries: scores for a tile are a small GEMM against the keys
// gathered transposed (kt [D, ldk], ldk a multiple of kCols, zero padding), accumulated in
// registers over d; the weighted sums (P V, dS K, dS^T Q, P^T dO) take one key row per step and
// update kRows accumulator rows. Every sum runs in a fixed order on one thread (queries
// ascending for dK/dV), so results are run-to-run bitwise identical whatever the thread count.
// head_dim 64 and 128 (the Qwen sizes) and 32 (the embedded demo's model) are compiled with D
// known, so accumulators stay in registers; any other head_dim <= kMaxD runs the same code with D
// read at run time. Both paths do the same fused multiply-adds in the same order, so the
// specialisations change speed, not bits (the demo's SFT trained the same weights with head_dim 32
// generic and specialised: 43% of its time was the generic backward).
#include "kernels/attention.h"

// The vector tiles write a fused multiply-add as c + a * x, which GCC contracts into one FMA only
// when it optimises (-O2 and up; never at -Og or -O0). Unfused, the sanitizer build (-Og) would
// round twice and compute other bits than every other build, and than the run-time head_dim
// path's explicit fmaf (tests/kernels/test_attention_order.cpp). Clang contracts the expression
// at every level (-ffp-contract=on).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/vec.h"
#include "runtime/error.h"
#include "runtime/thread_pool.h"

namespace sqlrl {

namespace {

constexpr int64_t kRows = 4, kCols = 16, kMaxD = 256;

// V16 values live only inside the always-inlined tiles (see kernels/cpu/vec.h): -Wpsabi's
// note about passing them by value without AVX-512 cannot apply. (Not popped: the templates
// are instantiated at the end of the file.)
#pragma GCC diagnostic ignored "-Wpsabi"


int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// xt[d * ld + j] = rows[j][d] for j < n, zero for n <= j < ld.
void gather_transposed(float* xt, const float* rows, int64_t row_stride, int64_t n, int64_t ld, int64_t D) {
  for (int64_t d = 0; d < D; ++d)
    for (int64_t j = n; j < ld; ++j) xt[d * ld + j] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float* r = rows + j * row_stride;
    for (int64_t d = 0; d < D; ++d) xt[d * ld + j] = r[d];
  }
}

// The tiles below take their vector type V (kernels/cpu/vec.h): V16 where it is one register
// (AVX-512) or where speed does not matter (the SSE2 baseline), V8 on AVX2. A tile of kCols
// columns is kCols / lanes vectors; every output element is the same sum in the same order
// whatever V is: the same bits.

// s[r * ld + j] = scale * (a_r . column j of xt) for j < nk (a multiple of kCols).
template <bool Fma, int64_t DT, class V>
[[gnu::always_inline]] inline void tile_scores(float* s, const float* const* a, const float* xt, int64_t ld,
                                               int64_t nk, int64_t Drt, float scale) {
  constexpr int64_t kW = cpu::kLanes<V>, kSub = kCols / kW;
  const int64_t D = DT ? DT : Drt;
  for (int64_t j0 = 0; j0 < nk; j0 += kCols) {
    V acc[kRows][kSub] = {};
    for (int64_t d = 0; d < D; ++d) {
      V x[kSub];
      for (int64_t c = 0; c < kSub; ++c) x[c] = cpu::loadv<V>(xt + d * ld + j0 + c * kW);
#pragma GCC unroll 4
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t c = 0; c < kSub; ++c) acc[r][c] = cpu::maddv(a[r][d], x[c], acc[r][c]);
    }
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < kSub; ++c) cpu::storev(s + r * ld + j0 + c * kW, acc[r][c] * scale);
  }
}

// out_r = sum_{j < n} w[r * ld + j] * rows[j] (row stride `stride`), overwriting out_r.
// Narrow (the AVX2 clone): 16 columns of out at a time, each a pass over the keys, so the
// accumulators are kRows x 16 floats (8 ymm) instead of kRows x DT (16 ymm at head_dim 32, 32 at
// 64), which spilled to the stack on every key: with the demo's head_dim 32 the AVX2 clone ran
// the demo's SFT ~12x slower than AVX-512. Every output element is the same sum over j
// ascending either way: the same bits.
template <bool Fma, int64_t DT, bool Narrow, class V>
[[gnu::always_inline]] inline void tile_weighted(float* const* out, const float* w, int64_t ld, const float* rows,
                                                 int64_t stride, int64_t n, int64_t Drt) {
  constexpr int64_t kW = cpu::kLanes<V>;
  if constexpr (DT != 0 && Narrow) {
    constexpr int64_t kSub = 16 / kW;
    for (int64_t c0 = 0; c0 < DT; c0 += 16) {
      V acc[kRows][kSub] = {};
      for (int64_t j = 0; j < n; ++j) {
        V xv[kSub];
        for (int64_t c = 0; c < kSub; ++c) xv[c] = cpu::loadv<V>(rows + j * stride + c0 + c * kW);
#pragma GCC unroll 4
        for (int64_t r = 0; r < kRows; ++r)
          for (int64_t c = 0; c < kSub; ++c) acc[r][c] = cpu::maddv(w[r * ld + j], xv[c], acc[r][c]);
      }
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t c = 0; c < kSub; ++c) cpu::storev(out[r] + c0 + c * kW, acc[r][c]);
    }
  } else if constexpr (DT != 0) {
    constexpr int64_t kV = DT / kW;
    V acc[kRows][kV] = {};
    for (int64_t j = 0; j < n; ++j) {
      const float* x = rows + j * stride;
      V xv[kV];
      for (int64_t c = 0; c < kV; ++c) xv[c] = cpu::loadv<V>(x + kW * c);
#pragma GCC unroll 4
      for (int64_t r = 0; r < kRows; ++r) {
        float c0 = w[r * ld + j];
        for (int64_t c = 0; c < kV; ++c) acc[r][c] = cpu::maddv(c0, xv[c], acc[r][c]);
      }
    }
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < kV; ++c) cpu::storev(out[r] + kW * c, acc[r][c]);
  } else {
    const int64_t D = Drt;
    float acc[kRows][kMaxD];
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t d = 0; d < D; ++d) acc[r][d] = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float* x = rows + j * stride;
      for (int64_t r = 0; r < kRows; ++r) {
        float c = w[r * ld + j];
        for (int64_t d = 0; d < D; ++d) acc[r][d] = cpu::madd<Fma>(c, x[d], acc[r][d]);
      }
    }
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t d = 0; d < D; ++d) out[r][d] = acc[r][d];
  }
}

// acc[j] += sum_r w[r * ld + j] * a_r for j < n (rows of acc D apart), r ascending.
template <bool Fma, int64_t DT, class V>
[[gnu::always_inline]] inline void tile_outer(float* acc, const float* w, int64_t ld, const float* const* a, int64_t n,
                                              int64_t Drt) {
  if constexpr (DT != 0) {
    constexpr int64_t kW = cpu::kLanes<V>, kV = DT / kW;
    for (int64_t j = 0; j < n; ++j) {
      float* y = acc + j * DT;
      V yv[kV];
      for (int64_t c = 0; c < kV; ++c) yv[c] = cpu::loadv<V>(y + kW * c);
#pragma GCC unroll 4
      for (int64_t r = 0; r < kRows; ++r) {
        float c0 = w[r * ld + j];
        for (int64_t c = 0; c < kV; ++c) yv[c] = cpu::maddv(c0, cpu::loadv<V>(a[r] + kW * c), yv[c]);
      }
      for (int64_t c = 0; c < kV; ++c) cpu::storev(y + kW * c, yv[c]);
    }
  } else {
    const int64_t D = Drt;
    for (int64_t j = 0; j < n; ++j) {
      float* y = acc + j * D;
      for (int64_t r = 0; r < kRows; ++r) {
        float c = w[r * ld + j];
        for (int64_t d = 0; d < D; ++d) y[d] = cpu::madd<Fma>(c, a[r][d], y[d]);
      }
    }
  }
}

struct SeqHead {
  const float *q;                 // first query row of the sequence for this head
  const float *k, *v;             // first key / value row: prefix rows, then the sequence's own
  int64_t q_stride, kv_stride;    // floats between consecutive tokens
  int64_t len, D;
  float scale;
  int64_t prefix = 0;             // keys before the sequence's own (a shared prefix); query i sees keys 0..prefix + i
};

// Forward of one (sequence, head): out rows and lse (strides as q / lse layout).
template <bool Fma, int64_t DT, bool Narrow, class V>
[[gnu::always_inline]] inline void forward_body(const SeqHead& a, float* out, float* lse, int64_t lse_stride,
                                                float* kt, float* p) {
  const int64_t len = a.len, P = a.prefix, D = DT ? DT : a.D, ld = round_up(P + len, kCols);
  gather_transposed(kt, a.k, a.kv_stride, P + len, ld, D);
  for (int64_t i0 = 0; i0 < len; i0 += kRows) {
    const int64_t rows = std::min(kRows, len - i0), n = P + i0 + rows;
    const float* qr[kRows];
    float* outr[kRows];
    float tmp[kRows - 1][DT ? DT : kMaxD];
    for (int64_t r = 0; r < kRows; ++r) {
      qr[r] = a.q + std::min(i0 + r, len - 1) * a.q_stride;
      outr[r] = r < rows ? out + (i0 + r) * a.q_stride : tmp[r - 1];
    }
    tile_scores<Fma, DT, V>(p, qr, kt, ld, round_up(n, kCols), D, a.scale);
    // Softmax of each row over its causal keys 0..P + i. The max and the sum run left to right
    // in each row, as one loop per row did; the rows' chains are interleaved (each step waits on
    // the previous one's add, so four rows cost what one did), and the exponentials, taken apart
    // from the sum, vectorise. Same operations in the same order per row: the same bits.
    int64_t valid[kRows];
    float m[kRows], sum[kRows];
    for (int64_t r = 0; r < kRows; ++r) {
      valid[r] = P + std::min(i0 + r, len - 1) + 1;  // non-decreasing in r
      m[r] = p[r * ld];
      sum[r] = 0.0f;
    }
    for (int64_t j = 1; j < valid[0]; ++j)
      for (int64_t r = 0; r < kRows; ++r) m[r] = p[r * ld + j] > m[r] ? p[r * ld + j] : m[r];
    for (int64_t r = 1; r < kRows; ++r)
      for (int64_t j = valid[0]; j < valid[r]; ++j) m[r] = p[r * ld + j] > m[r] ? p[r * ld + j] : m[r];
    for (int64_t r = 0; r < kRows; ++r) {
      float* pr = p + r * ld;
      for (int64_t j = 0; j < valid[r]; ++j) pr[j] = cpu::exp_fast<Fma>(pr[j] - m[r]);
    }
    for (int64_t j = 0; j < valid[0]; ++j)
      for (int64_t r = 0; r < kRows; ++r) sum[r] += p[r * ld + j];
    for (int64_t r = 1; r < kRows; ++r)
      for (int64_t j = valid[0]; j < valid[r]; ++j) sum[r] += p[r * ld + j];
    for (int64_t r = 0; r < kRows; ++r) {
      float* pr = p + r * ld;
      float inv = 1.0f / sum[r];
      for (int64_t j = 0; j < valid[r]; ++j) pr[j] *= inv;
      for (int64_t j = valid[r]; j < n; ++j) pr[j] = 0.0f;
      if (r < rows) lse[(i0 + r) * lse_stride] = m[r] + std::log(sum[r]);
    }
    tile_weighted<Fma, DT, Narrow, V>(outr, p, ld, a.v, a.kv_stride, n, D);
  }
}

struct SeqHeadGrad {
  const float *dout, *out, *lse;  // for this head; lse stride lse_stride
  int64_t lse_stride;
  float* dq;                      // for this head, stride q_stride
};

// Backward of one (sequence, head) of a kv group: writes dq, adds into dk_acc / dv_acc
// [prefix + len, D] (zeroed by the caller before the group's first head). kt, vt: keys / values
// transposed.
template <bool Fma, int64_t DT, bool Narrow, class V>
[[gnu::always_inline]] inline void backward_body(const SeqHead& a, const SeqHeadGrad& g, const float* kt,
                                                 const float* vt, float* dk_acc, float* dv_acc, float* p, float* dp) {
  const int64_t len = a.len, P = a.prefix, D = DT ? DT : a.D, ld = round_up(P + len, kCols);
  for (int64_t i0 = 0; i0 < len; i0 += kRows) {
    const int64_t rows = std::min(kRows, len - i0), n = P + i0 + rows, nk = round_up(n, kCols);
    const float *qr[kRows], *dor[kRows];
    float* dqr[kRows];
    float tmp[kRows - 1][DT ? DT : kMaxD];
    float delta[kRows];
    for (int64_t r = 0; r < kRows; ++r) {
      int64_t i = std::min(i0 + r, len - 1);
      qr[r] = a.q + i * a.q_stride;
      dor[r] = g.dout + i * a.q_stride;
      dqr[r] = r < rows ? g.dq + i * a.q_stride : tmp[r - 1];
      const float* o = g.out + i * a.q_stride;
      float sum = 0.0f;
      for (int64_t d = 0; d < D; ++d) sum = cpu::madd<Fma>(dor[r][d], o[d], sum);
      delta[r] = sum;
    }
    tile_scores<Fma, DT, V>(p, qr, kt, ld, nk, D, a.scale);
    tile_scores<Fma, DT, V>(dp, dor, vt, ld, nk, D, 1.0f);
    // P = exp(s - lse), dS = P (dP - delta) scale; rows past the tile's end and keys past the
    // causal limit get 0, so they add nothing below.
    for (int64_t r = 0; r < kRows; ++r) {
      float* pr = p + r * ld;
      float* dsr = dp + r * ld;
      const int64_t valid = r < rows ? P + i0 + r + 1 : 0;
      const float l = r < rows ? g.lse[(i0 + r) * g.lse_stride] : 0.0f;
      for (int64_t j = 0; j < valid; ++j) {
        pr[j] = cpu::exp_fast<Fma>(pr[j] - l);
        dsr[j] = pr[j] * (dsr[j] - delta[r]) * a.scale;
      }
      for (int64_t j = valid; j < n; ++j) pr[j] = dsr[j] = 0.0f;
    }
    tile_weighted<Fma, DT, Narrow, V>(dqr, dp, ld, a.k, a.kv_stride, n, D);
    tile_outer<Fma, DT, V>(dk_acc, dp, ld, qr, n, D);
    tile_outer<Fma, DT, V>(dv_acc, p, ld, dor, n, D);
  }
}

template <bool Fma, bool Narrow = false, class V = cpu::V16>
[[gnu::always_inline]] inline void forward_dispatch(const SeqHead& a, float* out, float* lse, int64_t lse_stride,
                                                    float* kt, float* p) {
  if (a.D == 32) {
    forward_body<Fma, 32, Narrow, V>(a, out, lse, lse_stride, kt, p);
  } else if (a.D == 64) {
    forward_body<Fma, 64, Narrow, V>(a, out, lse, lse_stride, kt, p);
  } else if (a.D == 128) {
    forward_body<Fma, 128, Narrow, V>(a, out, lse, lse_stride, kt, p);
  } else {
    forward_body<Fma, 0, Narrow, V>(a, out, lse, lse_stride, kt, p);
  }
}

template <bool Fma, bool Narrow = false, class V = cpu::V16>
[[gnu::always_inline]] inline void backward_dispatch(const SeqHead& a, const SeqHeadGrad& g, const float* kt,
                                                     const float* vt, float* dk_acc, float* dv_acc, float* p,
                                                     float* dp) {
  if (a.D == 32) {
    backward_body<Fma, 32, Narrow, V>(a, g, kt, vt, dk_acc, dv_acc, p, dp);
  } else if (a.D == 64) {
    backward_body<Fma, 64, Narrow, V>(a, g, kt, vt, dk_acc, dv_acc, p, dp);
  } else if (a.D == 128) {
    backward_body<Fma, 128, Narrow, V>(a, g, kt, vt, dk_acc, dv_acc, p, dp);
  } else {
    backward_body<Fma, 0, Narrow, V>(a, g, kt, vt, dk_acc, dv_acc, p, dp);
  }
}

using ForwardFn = void (*)(const SeqHead&, float*, float*, int64_t, float*, float*);
using BackwardFn = void (*)(const SeqHead&, const SeqHeadGrad&, const float*, const float*, float*, float*, float*,
                            float*);

[[gnu::target("avx512f,avx512vl,avx2,fma")]] void forward_avx512(const SeqHead& a, float* out, float* lse,
                                                                  int64_t lse_stride, float* kt, float* p) {
  forward_dispatch<true>(a, out, lse, lse_stride, kt, p);
}
[[gnu::target("avx2,fma")]] void forward_avx2(const SeqHead& a, float* out, float* lse, int64_t lse_stride, float* kt,
                                               float* p) {
  forward_dispatch<true, /*Narrow=*/true, cpu::V8>(a, out, lse, lse_stride, kt, p);
}
void forward_base(const SeqHead& a, float* out, float* lse, int64_t lse_stride, float* kt, float* p) {
  forward_dispatch<false>(a, out, lse, lse_stride, kt, p);
}

[[gnu::target("avx512f,avx512vl,avx2,fma")]] void backward_avx512(const SeqHead& a, const SeqHeadGrad& g,
                                                                   const float* kt, const float* vt, float* dk_acc,
                                                                   float* dv_acc, float* p, float* dp) {
  backward_dispatch<true>(a, g, kt, vt, dk_acc, dv_acc, p, dp);
}
[[gnu::target("avx2,fma")]] void backward_avx2(const SeqHead& a, const SeqHeadGrad& g, const float* kt,
                                                const float* vt, float* dk_acc, float* dv_acc, float* p, float* dp) {
  backward_dispatch<true, /*Narrow=*/true, cpu::V8>(a, g, kt, vt, dk_acc, dv_acc, p, dp);
}
void backward_base(const SeqHead& a, const SeqHeadGrad& g, const float* kt, const float* vt, float* dk_acc,
                   float* dv_acc, float* p, float* dp) {
  backward_dispatch<false>(a, g, kt, vt, dk_acc, dv_acc, p, dp);
}

void check_shape(const AttentionShape& s) {
  check(s.heads > 0 && s.kv_heads > 0 && s.head_dim > 0 && s.heads % s.kv_heads == 0, "attention: heads ", s.heads,
        " must be a positive multiple of kv_heads ", s.kv_heads, " (head_dim ", s.head_dim, ")");
  check(s.head_dim <= kMaxD, "attention: head_dim ", s.head_dim, " exceeds the CPU kernels' limit of ", kMaxD);
}

void check_cu_seqlens(const int32_t* cu, int64_t num_seqs) {
  check(num_seqs >= 0 && (num_seqs == 0 || cu[0] == 0), "attention: cu_seqlens must start at 0");
  for (int64_t s = 0; s < num_seqs; ++s)
    check(cu[s + 1] >= cu[s], "attention: cu_seqlens decreases at sequence ", s, " (", cu[s], " -> ", cu[s + 1], ")");
}

void check_prefixes(const SharedPrefixes& pre, const int32_t* cu, int64_t num_seqs) {
  if (pre.seq == nullptr) return;
  check(pre.len != nullptr, "attention: shared prefixes name sequences but give no lengths");
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t p = pre.seq[s];
    if (p < 0) continue;
    check(p < s, "attention: sequence ", s, " takes its prefix from sequence ", p, ", which does not come before it");
    check(pre.seq[p] < 0, "attention: sequence ", s, " takes its prefix from sequence ", p,
          ", which has a prefix itself (one level only)");
    check(pre.len[s] >= 1 && pre.len[s] <= cu[p + 1] - cu[p], "attention: sequence ", s, " shares ", pre.len[s],
          " tokens of sequence ", p, ", which has ", cu[p + 1] - cu[p]);
  }
}

int64_t prefix_of(const SharedPrefixes& pre, int64_t s) { return pre.seq && pre.seq[s] >= 0 ? pre.len[s] : 0; }

// rows [0, P) = the first P rows of the prefix sequence, rows [P, P + len) = the sequence's
// own (each row D floats; sources are rows of a [T, KVH, D] tensor at kv head kvh).
void gather_rows(float* dst, const float* x, int64_t prefix_start, int64_t P, int64_t start, int64_t len, int64_t KVH,
                 int64_t kvh, int64_t D) {
  for (int64_t j = 0; j < P; ++j) std::copy_n(x + ((prefix_start + j) * KVH + kvh) * D, D, dst + j * D);
  for (int64_t j = 0; j < len; ++j) std::copy_n(x + ((start + j) * KVH + kvh) * D, D, dst + (P + j) * D);
}

}  // namespace

// One task per (sequence, head) in the forward, per (sequence, kv head) in the backward: the
// backward accumulates dk/dv over the queries of a group, so that split keeps every
// accumulation on one thread (deterministic, no atomics).
void attention_forward_cpu(float* out, float* lse, const float* q, const float* k, const float* v,
                           const int32_t* cu_seqlens, int64_t num_seqs, AttentionShape shape, SharedPrefixes prefixes) {
  check_shape(shape);
  check_cu_seqlens(cu_seqlens, num_seqs);
  check_prefixes(prefixes, cu_seqlens, num_seqs);
  const int64_t H = shape.heads, KVH = shape.kv_heads, D = shape.head_dim, group = H / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  ForwardFn run = cpu::cpu_isa() == cpu::Isa::Avx512 ? forward_avx512
                  : cpu::cpu_isa() == cpu::Isa::Avx2 ? forward_avx2
                                                     : forward_base;
  default_thread_pool().parallel_for(static_cast<size_t>(num_seqs * H), 1, [&](size_t begin, size_t end) {
    std::vector<float> p, kt, kbuf, vbuf;
    for (size_t task = begin; task < end; ++task) {
      int64_t s = static_cast<int64_t>(task) / H, h = static_cast<int64_t>(task) % H, kvh = h / group;
      int64_t start = cu_seqlens[s], len = cu_seqlens[s + 1] - start, P = prefix_of(prefixes, s);
      if (len == 0) continue;
      int64_t ld = round_up(P + len, kCols);
      p.resize(static_cast<size_t>(kRows * ld));
      kt.resize(static_cast<size_t>(D * ld));
      SeqHead a{q + (start * H + h) * D, k + (start * KVH + kvh) * D, v + (start * KVH + kvh) * D, H * D, KVH * D,
                len, D, scale};
      if (P > 0) {  // the prefix's keys and values, then the sequence's own, made contiguous
        int64_t pstart = cu_seqlens[prefixes.seq[s]];
        kbuf.resize(static_cast<size_t>((P + len) * D)), vbuf.resize(kbuf.size());
        gather_rows(kbuf.data(), k, pstart, P, start, len, KVH, kvh, D);
        gather_rows(vbuf.data(), v, pstart, P, start, len, KVH, kvh, D);
        a.k = kbuf.data(), a.v = vbuf.data(), a.kv_stride = D, a.prefix = P;
      }
      run(a, out + (start * H + h) * D, lse + start * H + h, H, kt.data(), p.data());
    }
  });
}

// A sequence with a shared prefix also has gradients for the prefix's keys and values: each
// task leaves them in its own slot of `shared`, and a second pass adds the slots into the prefix
// rows in sequence order (still no atomics, still the same bits at any thread count).
void attention_backward_cpu(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                            const float* q, const float* k, const float* v, const int32_t* cu_seqlens,
                            int64_t num_seqs, AttentionShape shape, SharedPrefixes prefixes) {
  check_shape(shape);
  check_cu_seqlens(cu_seqlens, num_seqs);
  check_prefixes(prefixes, cu_seqlens, num_seqs);
  const int64_t H = shape.heads, KVH = shape.kv_heads, D = shape.head_dim, group = H / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  BackwardFn run = cpu::cpu_isa() == cpu::Isa::Avx512 ? backward_avx512
                   : cpu::cpu_isa() == cpu::Isa::Avx2 ? backward_avx2
                                                      : backward_base;
  std::vector<int64_t> slot(static_cast<size_t>(num_seqs) + 1, 0);  // floats of each sequence's prefix gradient
  for (int64_t s = 0; s < num_seqs; ++s) slot[s + 1] = slot[s] + prefix_of(prefixes, s) * KVH * D;
  std::vector<float> shared_dk(static_cast<size_t>(slot[num_seqs])), shared_dv(shared_dk.size());
  default_thread_pool().parallel_for(static_cast<size_t>(num_seqs * KVH), 1, [&](size_t begin, size_t end) {
    std::vector<float> p, dp, kt, vt, dk_acc, dv_acc, kbuf, vbuf;
    for (size_t task = begin; task < end; ++task) {
      int64_t s = static_cast<int64_t>(task) / KVH, kvh = static_cast<int64_t>(task) % KVH;
      int64_t start = cu_seqlens[s], len = cu_seqlens[s + 1] - start, P = prefix_of(prefixes, s);
      if (len == 0) continue;
      int64_t ld = round_up(P + len, kCols);
      p.resize(static_cast<size_t>(kRows * ld));
      dp.resize(static_cast<size_t>(kRows * ld));
      kt.resize(static_cast<size_t>(D * ld));
      vt.resize(static_cast<size_t>(D * ld));
      dk_acc.assign(static_cast<size_t>((P + len) * D), 0.0f);
      dv_acc.assign(static_cast<size_t>((P + len) * D), 0.0f);
      const float* k0 = k + (start * KVH + kvh) * D;
      const float* v0 = v + (start * KVH + kvh) * D;
      int64_t kv_stride = KVH * D;
      if (P > 0) {
        int64_t pstart = cu_seqlens[prefixes.seq[s]];
        kbuf.resize(static_cast<size_t>((P + len) * D)), vbuf.resize(kbuf.size());
        gather_rows(kbuf.data(), k, pstart, P, start, len, KVH, kvh, D);
        gather_rows(vbuf.data(), v, pstart, P, start, len, KVH, kvh, D);
        k0 = kbuf.data(), v0 = vbuf.data(), kv_stride = D;
      }
      gather_transposed(kt.data(), k0, kv_stride, P + len, ld, D);
      gather_transposed(vt.data(), v0, kv_stride, P + len, ld, D);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        int64_t row0 = start * H + h;
        SeqHead a{q + row0 * D, k0, v0, H * D, kv_stride, len, D, scale, P};
        SeqHeadGrad g{dout + row0 * D, out + row0 * D, lse + row0, H, dq + row0 * D};
        run(a, g, kt.data(), vt.data(), dk_acc.data(), dv_acc.data(), p.data(), dp.data());
      }
      for (int64_t j = 0; j < len; ++j) {
        std::copy_n(dk_acc.begin() + (P + j) * D, D, dk + ((start + j) * KVH + kvh) * D);
        std::copy_n(dv_acc.begin() + (P + j) * D, D, dv + ((start + j) * KVH + kvh) * D);
      }
      std::copy_n(dk_acc.begin(), P * D, shared_dk.begin() + slot[s] + kvh * P * D);
      std::copy_n(dv_acc.begin(), P * D, shared_dv.begin() + slot[s] + kvh * P * D);
    }
  });
  if (slot[num_seqs] == 0) return;
  // One task per (prefix sequence, kv head): its rows get every sharer's slot, sharers ascending.
  default_thread_pool().parallel_for(static_cast<size_t>(num_seqs * KVH), 1, [&](size_t begin, size_t end) {
    for (size_t task = begin; task < end; ++task) {
      int64_t r = static_cast<int64_t>(task) / KVH, kvh = static_cast<int64_t>(task) % KVH;
      for (int64_t s = r + 1; s < num_seqs; ++s) {
        if (prefixes.seq[s] != r) continue;
        const int64_t P = prefixes.len[s];
        const float* sk = shared_dk.data() + slot[s] + kvh * P * D;
        const float* sv = shared_dv.data() + slot[s] + kvh * P * D;
        for (int64_t j = 0; j < P; ++j) {
          float* yk = dk + ((cu_seqlens[r] + j) * KVH + kvh) * D;
          float* yv = dv + ((cu_seqlens[r] + j) * KVH + kvh) * D;
          for (int64_t d = 0; d < D; ++d) yk[d] += sk[j * D + d], yv[d] += sv[j * D + d];
        }
      }
    }
  });
}

void shared_prefix_sharers(const SharedPrefixes& prefixes, const int32_t* cu_seqlens, int64_t num_seqs,
                           std::vector<int32_t>& sharer_offsets, std::vector<int32_t>& sharers) {
  check_prefixes(prefixes, cu_seqlens, num_seqs);
  sharer_offsets.assign(static_cast<size_t>(num_seqs) + 1, 0);
  sharers.clear();
  if (prefixes.seq == nullptr) return;
  for (int64_t s = 0; s < num_seqs; ++s)
    if (prefixes.seq[s] >= 0) ++sharer_offsets[prefixes.seq[s] + 1];
  for (int64_t p = 0; p < num_seqs; ++p) sharer_offsets[p + 1] += sharer_offsets[p];
  sharers.resize(static_cast<size_t>(sharer_offsets[num_seqs]));
  std::vector<int32_t> next(sharer_offsets.begin(), sharer_offsets.end() - 1);
  for (int64_t s = 0; s < num_seqs; ++s)  // ascending s: each list comes out sorted
    if (prefixes.seq[s] >= 0) sharers[next[prefixes.seq[s]]++] = static_cast<int32_t>(s);
}

}  // namespace sqlrl
