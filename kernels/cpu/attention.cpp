#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/error.h"
#include "runtime/thread_pool.h"

namespace sqlrl {

namespace {

// The inner loops are written as axpy over contiguous memory (y += a * x), never as a dot
// product: a float dot is a serial chain the compiler may not reorder, while an axpy
// vectorises as written and keeps the summation order fixed (bitwise-deterministic results).
inline void axpy(float* __restrict y, float a, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

inline float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// xt[d * n + j] = rows[j][d]: keys (or values) of one head, transposed so that the scores of
// one query against keys 0..n-1 are D axpys over contiguous rows of xt.
void gather_transposed(float* __restrict xt, const float* rows, int64_t row_stride, int64_t n, int64_t D) {
  for (int64_t j = 0; j < n; ++j) {
    const float* r = rows + j * row_stride;
    for (int64_t d = 0; d < D; ++d) xt[d * n + j] = r[d];
  }
}

// s[j] = scale * (q . key_j) for j < n, keys transposed in kt [D, stride].
void scores(float* __restrict s, const float* q, const float* kt, int64_t stride, int64_t n, int64_t D, float scale) {
  std::fill(s, s + n, 0.0f);
  for (int64_t d = 0; d < D; ++d) axpy(s, q[d], kt + d * stride, n);
  for (int64_t j = 0; j < n; ++j) s[j] *= scale;
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

// One task per (sequence, head) in the forward, per (sequence, kv head) in the backward: the
// backward accumulates dk/dv over the queries of a group, so that split keeps every
// accumulation on one thread (deterministic, no atomics).
void attention_forward_cpu(float* out, float* lse, const float* q, const float* k, const float* v,
                           const int32_t* cu_seqlens, int64_t num_seqs, AttentionShape shape) {
  check_shape(shape);
  check_cu_seqlens(cu_seqlens, num_seqs);
  const int64_t H = shape.heads, KVH = shape.kv_heads, D = shape.head_dim, group = H / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  default_thread_pool().parallel_for(static_cast<size_t>(num_seqs * H), 1, [&](size_t begin, size_t end) {
    std::vector<float> p, kt, acc(static_cast<size_t>(D));
    for (size_t task = begin; task < end; ++task) {
      int64_t s = static_cast<int64_t>(task) / H, h = static_cast<int64_t>(task) % H, kvh = h / group;
      int64_t start = cu_seqlens[s], len = cu_seqlens[s + 1] - start;
      p.resize(static_cast<size_t>(len));
      kt.resize(static_cast<size_t>(len * D));
      gather_transposed(kt.data(), k + (start * KVH + kvh) * D, KVH * D, len, D);
      for (int64_t i = 0; i < len; ++i) {
        scores(p.data(), q + ((start + i) * H + h) * D, kt.data(), len, i + 1, D, scale);
        float m = *std::max_element(p.begin(), p.begin() + i + 1);
        float sum = 0.0f;
        for (int64_t j = 0; j <= i; ++j) {
          p[j] = std::exp(p[j] - m);
          sum += p[j];
        }
        float inv = 1.0f / sum;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j <= i; ++j) axpy(acc.data(), p[j] * inv, v + ((start + j) * KVH + kvh) * D, D);
        std::copy(acc.begin(), acc.end(), out + ((start + i) * H + h) * D);
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
    std::vector<float> p, dp, kt, vt, dk_acc, dv_acc, dq_acc(static_cast<size_t>(D));
    for (size_t task = begin; task < end; ++task) {
      int64_t s = static_cast<int64_t>(task) / KVH, kvh = static_cast<int64_t>(task) % KVH;
      int64_t start = cu_seqlens[s], len = cu_seqlens[s + 1] - start;
      p.resize(static_cast<size_t>(len));
      dp.resize(static_cast<size_t>(len));
      kt.resize(static_cast<size_t>(len * D));
      vt.resize(static_cast<size_t>(len * D));
      dk_acc.assign(static_cast<size_t>(len * D), 0.0f);
      dv_acc.assign(static_cast<size_t>(len * D), 0.0f);
      const float* k0 = k + (start * KVH + kvh) * D;
      const float* v0 = v + (start * KVH + kvh) * D;
      gather_transposed(kt.data(), k0, KVH * D, len, D);
      gather_transposed(vt.data(), v0, KVH * D, len, D);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t i = 0; i < len; ++i) {
          int64_t row = (start + i) * H + h, n = i + 1;
          const float* qi = q + row * D;
          const float* doi = dout + row * D;
          // P_ij = exp(s_ij - lse_i); dS_ij = P_ij (dout_i . v_j - dout_i . out_i).
          float delta = dot(doi, out + row * D, D);
          scores(p.data(), qi, kt.data(), len, n, D, scale);
          for (int64_t j = 0; j < n; ++j) p[j] = std::exp(p[j] - lse[row]);
          scores(dp.data(), doi, vt.data(), len, n, D, 1.0f);
          for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - delta) * scale;  // dS
          std::fill(dq_acc.begin(), dq_acc.end(), 0.0f);
          for (int64_t j = 0; j < n; ++j) {
            axpy(dq_acc.data(), dp[j], k0 + j * KVH * D, D);
            axpy(dk_acc.data() + j * D, dp[j], qi, D);
            axpy(dv_acc.data() + j * D, p[j], doi, D);
          }
          std::copy(dq_acc.begin(), dq_acc.end(), dq + row * D);
        }
      }
      for (int64_t j = 0; j < len; ++j) {
        std::copy(dk_acc.begin() + j * D, dk_acc.begin() + (j + 1) * D, dk + ((start + j) * KVH + kvh) * D);
        std::copy(dv_acc.begin() + j * D, dv_acc.begin() + (j + 1) * D, dv + ((start + j) * KVH + kvh) * D);
      }
    }
  });
}

// One task per (query, kv head): the query's keys and values are gathered from their blocks once
// and serve every query head of the group.
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
  default_thread_pool().parallel_for(static_cast<size_t>(queries.num_queries * KVH), 1, [&](size_t begin, size_t end) {
    std::vector<float> p, kt, acc(static_cast<size_t>(D));
    for (size_t task = begin; task < end; ++task) {
      int64_t i = static_cast<int64_t>(task) / KVH, kvh = static_cast<int64_t>(task) % KVH;
      int64_t len = queries.positions[i] + 1;
      const int32_t* table = queries.block_table + i * queries.max_blocks;
      auto slot = [&](int64_t j) { return ((static_cast<int64_t>(table[j / bs]) * bs + j % bs) * KVH + kvh) * D; };
      p.resize(static_cast<size_t>(len));
      kt.resize(static_cast<size_t>(len * D));
      for (int64_t j = 0; j < len; ++j) {
        const float* kj = k_cache + slot(j);
        for (int64_t d = 0; d < D; ++d) kt[d * len + j] = kj[d];
      }
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        scores(p.data(), q + (i * H + h) * D, kt.data(), len, len, D, scale);
        float m = *std::max_element(p.begin(), p.end());
        float sum = 0.0f;
        for (int64_t j = 0; j < len; ++j) {
          p[j] = std::exp(p[j] - m);
          sum += p[j];
        }
        float inv = 1.0f / sum;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < len; ++j) axpy(acc.data(), p[j] * inv, v_cache + slot(j), D);
        std::copy(acc.begin(), acc.end(), out + (i * H + h) * D);
      }
    }
  });
}

}  // namespace sqlrl
