#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/error.h"
#include "runtime/thread_pool.h"

namespace sqlrl {

namespace {

float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void check_shape(const AttentionShape& s) {
  check(s.heads > 0 && s.kv_heads > 0 && s.head_dim > 0 && s.heads % s.kv_heads == 0, "attention: heads ", s.heads,
        " must be a positive multiple of kv_heads ", s.kv_heads, " (head_dim ", s.head_dim, ")");
}

void check_cu_seqlens(const int32_t* cu, int64_t num_seqs) {
  check(num_seqs >= 0 && (num_seqs == 0 || cu[0] == 0), "attention: cu_seqlens must start at 0");
  for (int64_t s = 0; s < num_seqs; ++s)
    check(cu[s + 1] >= cu[s], "attention: cu_seqlens decreases at sequence ", s, " (", cu[s], " -> ", cu[s + 1], ")");
}

}  // namespace

// One task per (sequence, kv head): the backward accumulates dk/dv over the queries of a group,
// so this split keeps every accumulation on one thread (deterministic, no atomics).
void attention_forward_cpu(float* out, float* lse, const float* q, const float* k, const float* v,
                           const int32_t* cu_seqlens, int64_t num_seqs, AttentionShape shape) {
  check_shape(shape);
  check_cu_seqlens(cu_seqlens, num_seqs);
  const int64_t H = shape.heads, KVH = shape.kv_heads, D = shape.head_dim, group = H / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  default_thread_pool().parallel_for(static_cast<size_t>(num_seqs * H), 1, [&](size_t begin, size_t end) {
    std::vector<float> p;
    for (size_t task = begin; task < end; ++task) {
      int64_t s = static_cast<int64_t>(task) / H, h = static_cast<int64_t>(task) % H, kvh = h / group;
      int64_t start = cu_seqlens[s], len = cu_seqlens[s + 1] - start;
      p.resize(static_cast<size_t>(len));
      for (int64_t i = 0; i < len; ++i) {
        const float* qi = q + ((start + i) * H + h) * D;
        float m = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          p[j] = dot(qi, k + ((start + j) * KVH + kvh) * D, D) * scale;
          m = std::max(m, p[j]);
        }
        float sum = 0.0f;
        for (int64_t j = 0; j <= i; ++j) {
          p[j] = std::exp(p[j] - m);
          sum += p[j];
        }
        float* oi = out + ((start + i) * H + h) * D;
        std::fill(oi, oi + D, 0.0f);
        float inv = 1.0f / sum;
        for (int64_t j = 0; j <= i; ++j) {
          const float* vj = v + ((start + j) * KVH + kvh) * D;
          float w = p[j] * inv;
          for (int64_t d = 0; d < D; ++d) oi[d] += w * vj[d];
        }
        lse[(start + i) * H + h] = m + std::log(sum);
      }
    }
  });
}

void attention_backward_cpu(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                            const float* q, const float* k, const float* v, const int32_t* cu_seqlens,
                            int64_t num_seqs, AttentionShape shape) {
  check_shape(shape);
  check_cu_seqlens(cu_seqlens, num_seqs);
  const int64_t H = shape.heads, KVH = shape.kv_heads, D = shape.head_dim, group = H / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  default_thread_pool().parallel_for(static_cast<size_t>(num_seqs * KVH), 1, [&](size_t begin, size_t end) {
    std::vector<float> p;
    for (size_t task = begin; task < end; ++task) {
      int64_t s = static_cast<int64_t>(task) / KVH, kvh = static_cast<int64_t>(task) % KVH;
      int64_t start = cu_seqlens[s], len = cu_seqlens[s + 1] - start;
      p.resize(static_cast<size_t>(len));
      for (int64_t j = 0; j < len; ++j) {
        std::fill(dk + ((start + j) * KVH + kvh) * D, dk + ((start + j) * KVH + kvh + 1) * D, 0.0f);
        std::fill(dv + ((start + j) * KVH + kvh) * D, dv + ((start + j) * KVH + kvh + 1) * D, 0.0f);
      }
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t i = 0; i < len; ++i) {
          int64_t row = (start + i) * H + h;
          const float* qi = q + row * D;
          const float* doi = dout + row * D;
          float* dqi = dq + row * D;
          // P_ij = exp(s_ij - lse_i); dS_ij = P_ij (dout_i . v_j - dout_i . out_i).
          float delta = dot(doi, out + row * D, D);
          std::fill(dqi, dqi + D, 0.0f);
          for (int64_t j = 0; j <= i; ++j) {
            const float* kj = k + ((start + j) * KVH + kvh) * D;
            const float* vj = v + ((start + j) * KVH + kvh) * D;
            float pij = std::exp(dot(qi, kj, D) * scale - lse[row]);
            float ds = pij * (dot(doi, vj, D) - delta) * scale;
            float* dkj = dk + ((start + j) * KVH + kvh) * D;
            float* dvj = dv + ((start + j) * KVH + kvh) * D;
            for (int64_t d = 0; d < D; ++d) {
              dqi[d] += ds * kj[d];
              dkj[d] += ds * qi[d];
              dvj[d] += pij * doi[d];
            }
          }
        }
      }
    }
  });
}

void paged_attention_cpu(float* out, const float* q, const float* k_cache, const float* v_cache,
                         const PagedQueries& queries, AttentionShape shape) {
  check_shape(shape);
  const int64_t H = shape.heads, KVH = shape.kv_heads, D = shape.head_dim, group = H / KVH;
  const int64_t bs = queries.block_size;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int64_t i = 0; i < queries.num_queries; ++i)
    check(queries.positions[i] >= 0 && queries.positions[i] / bs < queries.max_blocks, "paged attention: query ", i,
          " at position ", queries.positions[i], " lies past its block table (", queries.max_blocks, " blocks of ", bs,
          ")");
  default_thread_pool().parallel_for(static_cast<size_t>(queries.num_queries * H), 1, [&](size_t begin, size_t end) {
    std::vector<float> p;
    for (size_t task = begin; task < end; ++task) {
      int64_t i = static_cast<int64_t>(task) / H, h = static_cast<int64_t>(task) % H, kvh = h / group;
      int64_t len = queries.positions[i] + 1;
      const int32_t* table = queries.block_table + i * queries.max_blocks;
      const float* qi = q + (i * H + h) * D;
      p.resize(static_cast<size_t>(len));
      auto slot = [&](int64_t j) { return ((static_cast<int64_t>(table[j / bs]) * bs + j % bs) * KVH + kvh) * D; };
      float m = -INFINITY;
      for (int64_t j = 0; j < len; ++j) {
        p[j] = dot(qi, k_cache + slot(j), D) * scale;
        m = std::max(m, p[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < len; ++j) {
        p[j] = std::exp(p[j] - m);
        sum += p[j];
      }
      float* oi = out + (i * H + h) * D;
      std::fill(oi, oi + D, 0.0f);
      float inv = 1.0f / sum;
      for (int64_t j = 0; j < len; ++j) {
        const float* vj = v_cache + slot(j);
        float w = p[j] * inv;
        for (int64_t d = 0; d < D; ++d) oi[d] += w * vj[d];
      }
    }
  });
}

}  // namespace sqlrl
