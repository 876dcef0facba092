// Paged attention (decode) on the CPU; the varlen training kernels are in attention.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/vec.h"
#include "runtime/error.h"
#include "runtime/thread_pool.h"

namespace sqlrl {

namespace {

// V16 values live only inside the always-inlined bodies (kernels/cpu/vec.h): -Wpsabi's note
// about passing them by value without AVX-512 cannot apply. (Not popped: the templates are
// instantiated at the end of the file.)
#pragma GCC diagnostic ignored "-Wpsabi"

// a * b + c lane by lane with one rounding, as madd<true>, at every optimisation level (GCC
// contracts c + a * b into an FMA only from -O2, and leaves __builtin_fmaf per lane scalar).
[[gnu::always_inline, gnu::target("avx512f")]] inline cpu::V16 fma16(cpu::V16 a, cpu::V16 b, cpu::V16 c) {
  return _mm512_fmadd_ps(a, b, c);
}

// cpu::load16 / store16 for the AVX-512 bodies below: the same memcpy, compiled for the caller's
// target. Clang refuses a V16 passed between functions of different targets (an avx512f caller,
// a generic callee: the vector's ABI differs) even when the callee is always inlined.
[[gnu::always_inline, gnu::target("avx512f")]] inline cpu::V16 load16_512(const float* p) {
  cpu::V16 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

[[gnu::always_inline, gnu::target("avx512f")]] inline void store16_512(float* p, cpu::V16 v) {
  __builtin_memcpy(p, &v, sizeof v);
}

// The vector path's two loops (paged_heads_body, Vec), compiled for AVX-512 only: p[h * len + j]
// = the scaled score of head h for key j; out = the NH heads' weighted values, from p's
// weights times inv[h].
template <int64_t DT, int64_t NH>
[[gnu::target("avx512f,avx512vl,avx2,fma")]] void vec_scores(const float* q, const float* k_cache,
                                                             const int64_t* slots, int64_t len, float scale, float* p) {
  constexpr int64_t kChunks = DT / 16;
  using cpu::V16;
  typedef float V8 __attribute__((vector_size(32)));
  typedef float V4 __attribute__((vector_size(16)));
  V16 qv[NH][kChunks];
  for (int64_t h = 0; h < NH; ++h)
    for (int64_t c = 0; c < kChunks; ++c) qv[h][c] = load16_512(q + h * DT + c * 16);
  for (int64_t j = 0; j < len; ++j) {
    const float* kj = k_cache + slots[j];
    V16 kv[kChunks];
    for (int64_t c = 0; c < kChunks; ++c) kv[c] = load16_512(kj + c * 16);
    for (int64_t h = 0; h < NH; ++h) {
      V16 acc = {};
      for (int64_t c = 0; c < kChunks; ++c) acc = fma16(qv[h][c], kv[c], acc);
      // The tree: lanes l + 8, then l + 4, l + 2, l + 1 added into lane l.
      V8 t8 = __builtin_shufflevector(acc, acc, 0, 1, 2, 3, 4, 5, 6, 7) +
              __builtin_shufflevector(acc, acc, 8, 9, 10, 11, 12, 13, 14, 15);
      V4 t4 = __builtin_shufflevector(t8, t8, 0, 1, 2, 3) + __builtin_shufflevector(t8, t8, 4, 5, 6, 7);
      float t2a = t4[0] + t4[2], t2b = t4[1] + t4[3];
      p[h * len + j] = (t2a + t2b) * scale;
    }
  }
}

template <int64_t DT, int64_t NH>
[[gnu::target("avx512f,avx512vl,avx2,fma")]] void vec_values(float* out, const float* v_cache, const int64_t* slots,
                                                             int64_t len, const float* p, const float* inv) {
  constexpr int64_t kChunks = DT / 16;
  cpu::V16 o[NH][kChunks] = {};
  for (int64_t j = 0; j < len; ++j) {
    const float* vj = v_cache + slots[j];
    for (int64_t c = 0; c < kChunks; ++c) {
      const cpu::V16 x = load16_512(vj + c * 16);
      for (int64_t h = 0; h < NH; ++h) o[h][c] = fma16(cpu::V16{} + p[h * len + j] * inv[h], x, o[h][c]);
    }
  }
  for (int64_t h = 0; h < NH; ++h)
    for (int64_t c = 0; c < kChunks; ++c) store16_512(out + h * DT + c * 16, o[h][c]);
}

// The same two loops for AVX2 on one-ymm vectors (cpu::V8). The AVX-512 loops' registers (each
// head's query, a key row, the output rows) do not fit AVX2's 16, so here the key row is taken 16
// lanes at a time against queries read from memory, and the values in 32-column passes over the
// keys. Each lane, tree and output element is the same sum in the same order: the same bits.
[[gnu::always_inline, gnu::target("avx2,fma")]] inline cpu::V8 fma8(cpu::V8 a, cpu::V8 b, cpu::V8 c) {
  return _mm256_fmadd_ps(a, b, c);
}

[[gnu::always_inline, gnu::target("avx2,fma")]] inline cpu::V8 load8_256(const float* p) {
  cpu::V8 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

template <int64_t DT, int64_t NH>
[[gnu::target("avx2,fma")]] void vec8_scores(const float* q, const float* k_cache, const int64_t* slots, int64_t len,
                                            float scale, float* p) {
  using cpu::V8;
  typedef float V4 __attribute__((vector_size(16)));
  for (int64_t j = 0; j < len; ++j) {
    const float* kj = k_cache + slots[j];
    V8 lo[NH] = {}, hi[NH] = {};  // lanes 0-7 and 8-15 of each head's 16
    for (int64_t d = 0; d < DT; d += 16) {
      const V8 k0 = load8_256(kj + d), k1 = load8_256(kj + d + 8);
      for (int64_t h = 0; h < NH; ++h) {
        lo[h] = fma8(load8_256(q + h * DT + d), k0, lo[h]);
        hi[h] = fma8(load8_256(q + h * DT + d + 8), k1, hi[h]);
      }
    }
    for (int64_t h = 0; h < NH; ++h) {
      // The tree: lanes l + 8, then l + 4, l + 2, l + 1 added into lane l.
      const V8 t8 = lo[h] + hi[h];
      const V4 t4 = __builtin_shufflevector(t8, t8, 0, 1, 2, 3) + __builtin_shufflevector(t8, t8, 4, 5, 6, 7);
      const float t2a = t4[0] + t4[2], t2b = t4[1] + t4[3];
      p[h * len + j] = (t2a + t2b) * scale;
    }
  }
}

template <int64_t DT, int64_t NH>
[[gnu::target("avx2,fma")]] void vec8_values(float* out, const float* v_cache, const int64_t* slots, int64_t len,
                                            const float* p, const float* inv) {
  constexpr int64_t kPass = DT < 32 ? DT : 32, kChunks = kPass / 8;
  for (int64_t d0 = 0; d0 < DT; d0 += kPass) {
    cpu::V8 o[NH][kChunks] = {};
    for (int64_t j = 0; j < len; ++j) {
      const float* vj = v_cache + slots[j] + d0;
      cpu::V8 w[NH];
      for (int64_t h = 0; h < NH; ++h) w[h] = cpu::V8{} + p[h * len + j] * inv[h];
      for (int64_t c = 0; c < kChunks; ++c) {
        const cpu::V8 x = load8_256(vj + c * 8);
        for (int64_t h = 0; h < NH; ++h) o[h][c] = fma8(w[h], x, o[h][c]);
      }
    }
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t c = 0; c < kChunks; ++c) __builtin_memcpy(out + h * DT + d0 + c * 8, &o[h][c], sizeof(cpu::V8));
  }
}

// Scores, softmax and weighted values of NH query heads (1 or 2) sharing one kv head, for one
// query at cache positions 0..len-1. Keys are read in place from their cache slots: each score is
// a 16-lane dot product (independent lanes, then a fixed tree), so nothing is transposed. The NH
// heads take each key and value row in one pass (read once, NH independent chains in flight).
// DT != 0: head_dim known at compile time (32, 64, 128). Vec: the lanes, the tree and the output
// accumulators as vector values, so they stay in registers (as arrays GCC kept them on the stack,
// a store-to-load chain on every key): 1.8x faster on AVX-512 (vec_scores, vec_values: Vec 16);
// AVX2's 16 registers cannot hold the same values, so it takes its own loops on 8-lane vectors
// (vec8_scores, vec8_values: Vec 8). Every variant runs each head's multiply-adds and sums in the
// same order, so all give the same bits.
template <bool Fma, int64_t DT, int64_t NH, int Vec>
[[gnu::always_inline]] inline void paged_heads_body(float* out, const float* q, const float* k_cache,
                                                    const float* v_cache, const int64_t* slots, int64_t len,
                                                    int64_t Drt, float scale, float* p) {
  const int64_t D = DT ? DT : Drt;
  constexpr int64_t kLanes = 16;
  const int64_t body = D / kLanes * kLanes;
  if constexpr (Vec == 16 && DT != 0) {
    vec_scores<DT, NH>(q, k_cache, slots, len, scale, p);
  } else if constexpr (Vec == 8 && DT != 0) {
    vec8_scores<DT, NH>(q, k_cache, slots, len, scale, p);
  } else {
    for (int64_t j = 0; j < len; ++j) {
      const float* kj = k_cache + slots[j];
      for (int64_t h = 0; h < NH; ++h) {
        const float* qh = q + h * D;
        float acc[kLanes] = {};
        for (int64_t d = 0; d < body; d += kLanes)
          for (int64_t l = 0; l < kLanes; ++l) acc[l] = cpu::madd<Fma>(qh[d + l], kj[d + l], acc[l]);
        for (int64_t width = kLanes / 2; width > 0; width /= 2)
          for (int64_t l = 0; l < width; ++l) acc[l] += acc[l + width];
        float sum = acc[0];
        for (int64_t d = body; d < D; ++d) sum = cpu::madd<Fma>(qh[d], kj[d], sum);
        p[h * len + j] = sum * scale;
      }
    }
  }
  float inv[NH];
  for (int64_t h = 0; h < NH; ++h) {
    float* ph = p + h * len;
    float m = ph[0];
    for (int64_t j = 1; j < len; ++j) m = ph[j] > m ? ph[j] : m;
    for (int64_t j = 0; j < len; ++j) ph[j] = cpu::exp_fast<Fma>(ph[j] - m);
    float total = 0.0f;
    for (int64_t j = 0; j < len; ++j) total += ph[j];
    inv[h] = 1.0f / total;
  }
  if constexpr (Vec == 16 && DT != 0) {
    vec_values<DT, NH>(out, v_cache, slots, len, p, inv);
  } else if constexpr (Vec == 8 && DT != 0) {
    vec8_values<DT, NH>(out, v_cache, slots, len, p, inv);
  } else {
    for (int64_t d = 0; d < NH * D; ++d) out[d] = 0.0f;
    for (int64_t j = 0; j < len; ++j) {
      const float* vj = v_cache + slots[j];
      for (int64_t h = 0; h < NH; ++h) {
        float* oh = out + h * D;
        float w = p[h * len + j] * inv[h];
        for (int64_t d = 0; d < D; ++d) oh[d] = cpu::madd<Fma>(w, vj[d], oh[d]);
      }
    }
  }
}

// The group's heads: two at a time on the vector path (an odd one last, alone), else one by one.
template <bool Fma, int64_t DT, int Vec>
[[gnu::always_inline]] inline void paged_group_body(float* out, const float* q, const float* k_cache,
                                                    const float* v_cache, const int64_t* slots, int64_t len,
                                                    int64_t group, int64_t Drt, float scale, float* p) {
  const int64_t D = DT ? DT : Drt;
  int64_t g = 0;
  if constexpr (Vec)
    for (; g + 2 <= group; g += 2)
      paged_heads_body<Fma, DT, 2, Vec>(out + g * D, q + g * D, k_cache, v_cache, slots, len, Drt, scale, p + g * len);
  for (; g < group; ++g)
    paged_heads_body<Fma, DT, 1, Vec>(out + g * D, q + g * D, k_cache, v_cache, slots, len, Drt, scale, p + g * len);
}

template <bool Fma, int Vec>
[[gnu::always_inline]] inline void paged_group_dispatch(float* out, const float* q, const float* kc, const float* vc,
                                                        const int64_t* slots, int64_t len, int64_t group, int64_t D,
                                                        float scale, float* p) {
  if (D == 32) {
    paged_group_body<Fma, 32, Vec>(out, q, kc, vc, slots, len, group, D, scale, p);
  } else if (D == 64) {
    paged_group_body<Fma, 64, Vec>(out, q, kc, vc, slots, len, group, D, scale, p);
  } else if (D == 128) {
    paged_group_body<Fma, 128, Vec>(out, q, kc, vc, slots, len, group, D, scale, p);
  } else {
    paged_group_body<Fma, 0, Vec>(out, q, kc, vc, slots, len, group, D, scale, p);
  }
}

[[gnu::target("avx512f,avx512vl,avx2,fma")]] void paged_group_avx512(float* out, const float* q, const float* kc,
                                                                      const float* vc, const int64_t* slots,
                                                                      int64_t len, int64_t group, int64_t D,
                                                                      float scale, float* p) {
  paged_group_dispatch<true, 16>(out, q, kc, vc, slots, len, group, D, scale, p);
}

[[gnu::target("avx2,fma")]] void paged_group_avx2(float* out, const float* q, const float* kc, const float* vc,
                                                   const int64_t* slots, int64_t len, int64_t group, int64_t D,
                                                   float scale, float* p) {
  paged_group_dispatch<true, 8>(out, q, kc, vc, slots, len, group, D, scale, p);
}

void paged_group_base(float* out, const float* q, const float* kc, const float* vc, const int64_t* slots, int64_t len,
                      int64_t group, int64_t D, float scale, float* p) {
  paged_group_dispatch<false, 0>(out, q, kc, vc, slots, len, group, D, scale, p);
}

}  // namespace

// One task per (query, kv head), serving every query head of the group.
void paged_attention_cpu(float* out, const float* q, const float* k_cache, const float* v_cache,
                         const PagedQueries& queries, AttentionShape shape) {
  check(shape.heads > 0 && shape.kv_heads > 0 && shape.head_dim > 0 && shape.heads % shape.kv_heads == 0,
        "paged attention: heads ", shape.heads, " must be a positive multiple of kv_heads ", shape.kv_heads,
        " (head_dim ", shape.head_dim, ")");
  const int64_t H = shape.heads, KVH = shape.kv_heads, D = shape.head_dim, group = H / KVH;
  const int64_t bs = queries.block_size;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // positions[i] < 0: a padding row (kernels/attention.h), zeros; its block table is not read.
  for (int64_t i = 0; i < queries.num_queries; ++i)
    check(queries.positions[i] / bs < queries.max_blocks, "paged attention: query ", i, " at position ",
          queries.positions[i], " lies past its block table (", queries.max_blocks, " blocks of ", bs, ")");
  auto* run = cpu::cpu_isa() == cpu::Isa::Avx512 ? paged_group_avx512
              : cpu::cpu_isa() == cpu::Isa::Avx2 ? paged_group_avx2
                                                 : paged_group_base;
  default_thread_pool().parallel_for(static_cast<size_t>(queries.num_queries * KVH), 1, [&](size_t begin, size_t end) {
    std::vector<float> p;
    std::vector<int64_t> slots;
    for (size_t task = begin; task < end; ++task) {
      int64_t i = static_cast<int64_t>(task) / KVH, kvh = static_cast<int64_t>(task) % KVH;
      int64_t len = queries.positions[i] + 1;
      if (len <= 0) {
        std::fill(out + (i * H + kvh * group) * D, out + (i * H + kvh * group + group) * D, 0.0f);
        continue;
      }
      const int32_t* table = queries.block_table + i * queries.max_blocks;
      slots.resize(static_cast<size_t>(len));
      for (int64_t j = 0; j < len; ++j) slots[j] = ((static_cast<int64_t>(table[j / bs]) * bs + j % bs) * KVH + kvh) * D;
      p.resize(static_cast<size_t>(len * group));
      int64_t h0 = kvh * group;
      run(out + (i * H + h0) * D, q + (i * H + h0) * D, k_cache, v_cache, slots.data(), len, group, D, scale, p.data());
    }
  });
}

}  // namespace sqlrl
