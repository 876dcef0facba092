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
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/stream.h"

namespace sqlrl {

struct AttentionShape {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
};

// Shared prefixes: packed sequences that begin with the same tokens (a GRPO group's prompt, SFT
// demonstrations on one database) store those tokens once. Sequence s with
// seq[s] = p >= 0 attends first to the first len[s] tokens of sequence p, then causally to its
// own, exactly as if those tokens were its first; its RoPE positions continue from len[s] (the
// caller's positions). p < s, and p has no prefix itself. The backward adds each sharer's
// gradient into the prefix's dk/dv rows. seq == nullptr: no sharing.
struct SharedPrefixes {
  const int32_t* seq = nullptr;  // [num_seqs], -1 = none
  const int32_t* len = nullptr;  // [num_seqs]
};

void attention_forward_cpu(float* out, float* lse, const float* q, const float* k, const float* v,
                           const int32_t* cu_seqlens, int64_t num_seqs, AttentionShape shape,
                           SharedPrefixes prefixes = {});

// Overwrites dq [T, H, D], dk and dv [T, KVH, D].
void attention_backward_cpu(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                            const float* q, const float* k, const float* v, const int32_t* cu_seqlens,
                            int64_t num_seqs, AttentionShape shape, SharedPrefixes prefixes = {});

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

// --- CUDA (kernels/cuda/attention*.cu; without CUDA these fail with the reason) ---------------
// Every pointer is device memory; bf16 tensors are passed as their raw bits (uint16_t). Index
// arrays (cu_seqlens, block tables, positions) are device arrays; the host passes the bounds it
// needs to size the grid (max_seqlen, max_context), which must hold for every entry; rows of a
// sequence longer than max_seqlen are set to NaN (the rows before them are still right).
// head_dim must be 64 or 128 (cuda_attention_takes_head_dim). The launchers allocate nothing:
// workspace comes from the caller.
inline bool cuda_attention_takes_head_dim(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

// Shared prefixes on CUDA: SharedPrefixes as device arrays, plus each prefix's sharers for the
// backward, which adds their gradients into the prefix's dk/dv rows itself (the key tiles of a
// prefix walk the owner's queries and then every sharer's: no workspace, no second pass).
// seq == nullptr: no sharing. The device does not check the arrays: shared_prefix_sharers does,
// on the host.
struct SharedPrefixesCuda {
  const int32_t* seq = nullptr;             // [num_seqs], -1 = none
  const int32_t* len = nullptr;             // [num_seqs]
  const int32_t* sharer_offsets = nullptr;  // [num_seqs + 1]: the sharers of sequence p are
  const int32_t* sharers = nullptr;         //   sharers[sharer_offsets[p] .. sharer_offsets[p + 1]), ascending
};
// Host side: fails naming the sequence when `prefixes` breaks SharedPrefixes' rules, then writes
// the sharer lists (CSR) that SharedPrefixesCuda carries.
void shared_prefix_sharers(const SharedPrefixes& prefixes, const int32_t* cu_seqlens, int64_t num_seqs,
                           std::vector<int32_t>& sharer_offsets, std::vector<int32_t>& sharers);

// out [T, H, D] bf16, lse [T, H] fp32 (natural log, as attention_forward_cpu).
void attention_forward_cuda(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                            const int32_t* cu_seqlens, int64_t num_seqs, int64_t max_seqlen, AttentionShape shape,
                            const CudaStream& stream = CudaStream{}, const SharedPrefixesCuda& prefixes = {});

// Bytes of workspace attention_backward_cuda needs for `total_tokens` packed tokens.
size_t attention_backward_workspace_bytes(int64_t total_tokens, AttentionShape shape);
// Overwrites dq [T, H, D], dk and dv [T, KVH, D] (bf16) of every token inside a sequence.
// Deterministic: no atomics, dk/dv of a kv head summed over its q heads in a fixed order (a
// shared prefix's rows: the owner's queries, then each sharer's, sharers ascending).
void attention_backward_cuda(uint16_t* dq, uint16_t* dk, uint16_t* dv, const uint16_t* dout, const uint16_t* out,
                             const float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             const int32_t* cu_seqlens, int64_t num_seqs, int64_t total_tokens, int64_t max_seqlen,
                             AttentionShape shape, void* workspace, size_t workspace_bytes,
                             const CudaStream& stream = CudaStream{}, const SharedPrefixesCuda& prefixes = {});

// Decode: one query token per entry of `queries` (its pointers are device arrays).
//  * positions[i] < 0 marks a padding row (CUDA graphs replay fixed batch buckets): its output is
//    zeros and nothing of its block table or of the cache is read. CPU and CUDA alike.
//  * max_context bounds positions[i] + 1 for every query (device data the launcher cannot check):
//    on CUDA a query past it gets NaN outputs instead of attention over a truncated context.
//  * On CUDA a context is cut into splits of paged_split_tokens(context, split_tokens) keys,
//    handled by separate blocks and merged in split order by a second pass. The split depends on
//    the query's own context alone (never on the batch or on max_context), so a query's output
//    bits are the same in any batch: decode results do not depend on batching.
// The split rule: about kPagedTargetSplits splits per context, so that one short query still
// spreads over many blocks (512 keys: 8 splits x the kv heads), each a multiple of
// kPagedTileTokens, at least one tile and at most min(split_tokens, kPagedMaxSplitTokens) keys.
// 8, not 16: with 16 a mid-size batch's blocks were too short to hide their start (H200, 128 x
// 1024 keys: 0.66 of the copy rate against 0.80), and one short query gained nothing.
constexpr int64_t kPagedSplitTokens = 512;
constexpr int64_t kPagedTileTokens = 64, kPagedTargetSplits = 8, kPagedMaxSplitTokens = 1024;
constexpr int64_t paged_split_tokens(int64_t context, int64_t split_tokens) {
  const int64_t cap = split_tokens < kPagedMaxSplitTokens ? split_tokens : kPagedMaxSplitTokens;
  int64_t want = (context + kPagedTargetSplits - 1) / kPagedTargetSplits;
  want = (want + kPagedTileTokens - 1) / kPagedTileTokens * kPagedTileTokens;
  if (want < kPagedTileTokens) want = kPagedTileTokens;
  return want < cap ? want : cap;
}
constexpr int64_t paged_num_splits(int64_t context, int64_t split_tokens) {
  const int64_t size = paged_split_tokens(context, split_tokens);
  return (context + size - 1) / size;
}
// An upper bound of paged_num_splits(c, split_tokens) over 1 <= c <= max_context, non-decreasing in
// max_context (the split count itself is not monotone: 1024 keys make 8 splits of 128, 1025 make
// 6 of 192). A split is at least min(cap, tile) keys, and it is either the cap or >= c / target.
constexpr int64_t paged_max_splits(int64_t max_context, int64_t split_tokens) {
  const int64_t cap = split_tokens < kPagedMaxSplitTokens ? split_tokens : kPagedMaxSplitTokens;
  const int64_t smallest = cap < kPagedTileTokens ? cap : kPagedTileTokens;
  const int64_t by_size = (max_context + smallest - 1) / smallest, by_cap = (max_context + cap - 1) / cap;
  const int64_t by_rule = by_cap > kPagedTargetSplits ? by_cap : kPagedTargetSplits;
  return by_size < by_rule ? by_size : by_rule;
}
// Bytes of workspace for num_queries rows at contexts up to max_context (0 when every context
// fits one split): depends on host arguments only, so a caller can size it once ahead.
size_t paged_attention_workspace_bytes(int64_t num_queries, AttentionShape shape, int64_t max_context,
                                       int64_t split_tokens = kPagedSplitTokens);
// out [num_queries, H, D] bf16 from q [num_queries, H, D] bf16 and bf16 caches.
void paged_attention_cuda(uint16_t* out, const uint16_t* q, const uint16_t* k_cache, const uint16_t* v_cache,
                          const PagedQueries& queries, AttentionShape shape, int64_t max_context, void* workspace,
                          size_t workspace_bytes, int64_t split_tokens = kPagedSplitTokens,
                          const CudaStream& stream = CudaStream{});

}  // namespace sqlrl
