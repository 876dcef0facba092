// Paged KV cache (vLLM style) for CPU inference: keys and values of every layer live in pools
// of fixed-size blocks, [layers][num_blocks][block_size][kv_heads][head_dim]; a sequence owns a
// block table. Blocks are ref-counted so the G samples of one prompt share the prompt's blocks:
// fork() copies a table and bumps the counts, and the first write into a shared, partly filled
// last block copies it first (copy on write). free() returns blocks whose count drops to zero.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "weights/config.h"

namespace sqlrl {

struct KVSequence {
  std::vector<int32_t> blocks;
  int64_t length = 0;  // tokens whose K/V are written
  bool live = false;
};

struct PagedKVCache {
  int64_t layers = 0, kv_heads = 0, head_dim = 0, block_size = 0, num_blocks = 0;
  std::vector<float> k, v;
  std::vector<int32_t> refcount;     // per block
  std::vector<int32_t> free_blocks;  // stack
  std::vector<KVSequence> sequences;  // indexed by sequence handle

  int64_t block_floats() const { return block_size * kv_heads * head_dim; }
  float* k_block(int64_t layer, int32_t block) { return k.data() + (layer * num_blocks + block) * block_floats(); }
  float* v_block(int64_t layer, int32_t block) { return v.data() + (layer * num_blocks + block) * block_floats(); }
  const KVSequence& sequence(int64_t handle) const;
  KVSequence& sequence(int64_t handle);
};

PagedKVCache make_kv_cache(const QwenConfig& config, int64_t num_blocks, int64_t block_size);
int64_t kv_new_sequence(PagedKVCache& cache);
int64_t kv_fork(PagedKVCache& cache, int64_t source);  // shares every block of source
void kv_free(PagedKVCache& cache, int64_t handle);
// Makes sure positions [length, length + n) have blocks this sequence may write (fails naming
// the numbers when the pool is exhausted). Does not change length.
void kv_reserve(PagedKVCache& cache, int64_t handle, int64_t n);
int64_t kv_free_block_count(const PagedKVCache& cache);
// The blocks kv_reserve would take for these appends, (handle, n tokens) each, made in this order
// (as forward_cached makes them): fresh blocks past each sequence's table, plus the copies of
// shared, partly filled last blocks (of k holders of such a block that write, min(k, refcount - 1)
// copy it: the last holder writes in place). Changes nothing; a scheduler asks it before a step.
int64_t kv_blocks_needed(const PagedKVCache& cache, const std::vector<std::pair<int64_t, int64_t>>& appends);

}  // namespace sqlrl
