// Paged attention (decode) on the CPU; the varlen training kernels are in attention.cpp.
#include <cmath>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/vec.h"
#include "runtime/error.h"
#include "runtime/thread_pool.h"

namespace sqlrl {

namespace {

// Scores, softmax and weighted values of the `group` query heads sharing one kv head, for one
// query at cache positions 0..len-1. Keys are read in place from their cache slots: each score is
// a 64-lane dot product (independent lanes, then a fixed tree), so nothing is transposed.
// DT != 0: head_dim known at compile time (32, 64, 128), so the lanes stay in registers; the same
// multiply-adds in the same order as the run-time-D code (DT = 0), so the same bits.
template <bool Fma, int64_t DT>
[[gnu::always_inline]] inline void paged_group_body(float* out, const float* q, const float* k_cache,
                                                    const float* v_cache, const int64_t* slots, int64_t len,
                                                    int64_t group, int64_t Drt, float scale, float* p) {
  const int64_t D = DT ? DT : Drt;
  constexpr int64_t kLanes = 16;
  const int64_t body = D / kLanes * kLanes;
  for (int64_t g = 0; g < group; ++g) {
    const float* qg = q + g * D;
    float* pg = p + g * len;
    for (int64_t j = 0; j < len; ++j) {
      const float* kj = k_cache + slots[j];
      float acc[kLanes] = {};
      for (int64_t d = 0; d < body; d += kLanes)
        for (int64_t l = 0; l < kLanes; ++l) acc[l] = cpu::madd<Fma>(qg[d + l], kj[d + l], acc[l]);
      for (int64_t width = kLanes / 2; width > 0; width /= 2)
        for (int64_t l = 0; l < width; ++l) acc[l] += acc[l + width];
      float sum = acc[0];
      for (int64_t d = body; d < D; ++d) sum = cpu::madd<Fma>(qg[d], kj[d], sum);
      pg[j] = sum * scale;
    }
    float m = pg[0];
    for (int64_t j = 1; j < len; ++j) m = pg[j] > m ? pg[j] : m;
    for (int64_t j = 0; j < len; ++j) pg[j] = cpu::exp_fast<Fma>(pg[j] - m);
    float total = 0.0f;
    for (int64_t j = 0; j < len; ++j) total += pg[j];
    float inv = 1.0f / total;
    float* og = out + g * D;
    for (int64_t d = 0; d < D; ++d) og[d] = 0.0f;
    for (int64_t j = 0; j < len; ++j) {
      const float* vj = v_cache + slots[j];
      float w = pg[j] * inv;
      for (int64_t d = 0; d < D; ++d) og[d] = cpu::madd<Fma>(w, vj[d], og[d]);
    }
  }
}

template <bool Fma>
[[gnu::always_inline]] inline void paged_group_dispatch(float* out, const float* q, const float* kc, const float* vc,
                                                        const int64_t* slots, int64_t len, int64_t group, int64_t D,
                                                        float scale, float* p) {
  if (D == 32) {
    paged_group_body<Fma, 32>(out, q, kc, vc, slots, len, group, D, scale, p);
  } else if (D == 64) {
    paged_group_body<Fma, 64>(out, q, kc, vc, slots, len, group, D, scale, p);
  } else if (D == 128) {
    paged_group_body<Fma, 128>(out, q, kc, vc, slots, len, group, D, scale, p);
  } else {
    paged_group_body<Fma, 0>(out, q, kc, vc, slots, len, group, D, scale, p);
  }
}

[[gnu::target("avx512f,avx512vl,avx2,fma")]] void paged_group_avx512(float* out, const float* q, const float* kc,
                                                                      const float* vc, const int64_t* slots,
                                                                      int64_t len, int64_t group, int64_t D,
                                                                      float scale, float* p) {
  paged_group_dispatch<true>(out, q, kc, vc, slots, len, group, D, scale, p);
}

[[gnu::target("avx2,fma")]] void paged_group_avx2(float* out, const float* q, const float* kc, const float* vc,
                                                   const int64_t* slots, int64_t len, int64_t group, int64_t D,
                                                   float scale, float* p) {
  paged_group_dispatch<true>(out, q, kc, vc, slots, len, group, D, scale, p);
}

void paged_group_base(float* out, const float* q, const float* kc, const float* vc, const int64_t* slots, int64_t len,
                      int64_t group, int64_t D, float scale, float* p) {
  paged_group_dispatch<false>(out, q, kc, vc, slots, len, group, D, scale, p);
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
  for (int64_t i = 0; i < queries.num_queries; ++i)
    check(queries.positions[i] >= 0 && queries.positions[i] / bs < queries.max_blocks, "paged attention: query ", i,
          " at position ", queries.positions[i], " lies past its block table (", queries.max_blocks, " blocks of ", bs,
          ")");
  auto* run = cpu::cpu_isa() == cpu::Isa::Avx512 ? paged_group_avx512
              : cpu::cpu_isa() == cpu::Isa::Avx2 ? paged_group_avx2
                                                 : paged_group_base;
  default_thread_pool().parallel_for(static_cast<size_t>(queries.num_queries * KVH), 1, [&](size_t begin, size_t end) {
    std::vector<float> p;
    std::vector<int64_t> slots;
    for (size_t task = begin; task < end; ++task) {
      int64_t i = static_cast<int64_t>(task) / KVH, kvh = static_cast<int64_t>(task) % KVH;
      int64_t len = queries.positions[i] + 1;
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
