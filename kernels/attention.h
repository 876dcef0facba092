// Causal grouped-query attention, softmax(q k^T / sqrt(D)) v, in two forms:
//
//  * varlen (training): sequences packed back to back, sequence s owning tokens
//    [cu_seqlens[s], cu_seqlens[s+1]); token i attends to tokens j <= i of its own sequence.
//    q [T, H, D], k/v [T, KVH, D], out [T, H, D]; query head h reads kv head h / (H / KVH).
//    Forward saves the log-sum-exp of each (token, head) row, lse [T, H], so the backward
//    recomputes probabilities instead of storing [T, T] (as flash attention does).
//
//  * paged (inference): keys and values live in a paged cache [num_blocks, block_size, KVH, D];
//    each query token names its sequence's block table and its own position, and attends to
//    cache positions 0..position of that sequence.
#pragma once
#include <cstdint>

namespace sqlrl {

struct AttentionShape {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
};

void attention_forward_cpu(float* out, float* lse, const float* q, const float* k, const float* v,
                           const int32_t* cu_seqlens, int64_t num_seqs, AttentionShape shape);

// Overwrites dq [T, H, D], dk and dv [T, KVH, D].
void attention_backward_cpu(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                            const float* q, const float* k, const float* v, const int32_t* cu_seqlens,
                            int64_t num_seqs, AttentionShape shape);

struct PagedQueries {
  int64_t num_queries = 0;
  const int32_t* block_table = nullptr;  // [num_queries, max_blocks]: the table of each query's sequence
  int64_t max_blocks = 0;                // row stride of block_table
  const int32_t* positions = nullptr;    // [num_queries]
  int64_t block_size = 0;
};

// out [num_queries, H, D] from q [num_queries, H, D] and the cache of one layer.
void paged_attention_cpu(float* out, const float* q, const float* k_cache, const float* v_cache,
                         const PagedQueries& queries, AttentionShape shape);

}  // namespace sqlrl
