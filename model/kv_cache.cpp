#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "runtime/error.h"

namespace sqlrl {

const KVSequence& PagedKVCache::sequence(int64_t handle) const {
  check(handle >= 0 && handle < static_cast<int64_t>(sequences.size()) && sequences[handle].live, "kv cache: sequence ",
        handle, " is not live (", sequences.size(), " handles issued)");
  return sequences[handle];
}

KVSequence& PagedKVCache::sequence(int64_t handle) {
  return const_cast<KVSequence&>(static_cast<const PagedKVCache&>(*this).sequence(handle));
}

PagedKVCache make_kv_cache(const QwenConfig& config, int64_t num_blocks, int64_t block_size) {
  check(num_blocks > 0 && block_size > 0, "kv cache: num_blocks (", num_blocks, ") and block_size (", block_size,
        ") must be positive");
  PagedKVCache c;
  c.layers = config.num_hidden_layers;
  c.kv_heads = config.num_key_value_heads;
  c.head_dim = config.head_dim;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  size_t floats = static_cast<size_t>(c.layers * num_blocks * c.block_floats());
  c.k.assign(floats, 0.0f);
  c.v.assign(floats, 0.0f);
  c.refcount.assign(static_cast<size_t>(num_blocks), 0);
  for (int64_t b = num_blocks - 1; b >= 0; --b) c.free_blocks.push_back(static_cast<int32_t>(b));
  return c;
}

int64_t kv_new_sequence(PagedKVCache& cache) {
  for (size_t i = 0; i < cache.sequences.size(); ++i)
    if (!cache.sequences[i].live) {
      cache.sequences[i] = KVSequence{{}, 0, true};
      return static_cast<int64_t>(i);
    }
  cache.sequences.push_back(KVSequence{{}, 0, true});
  return static_cast<int64_t>(cache.sequences.size()) - 1;
}

int64_t kv_fork(PagedKVCache& cache, int64_t source) {
  std::vector<int32_t> blocks = cache.sequence(source).blocks;
  int64_t length = cache.sequence(source).length;
  int64_t handle = kv_new_sequence(cache);
  for (int32_t b : blocks) ++cache.refcount[b];
  cache.sequences[handle].blocks = std::move(blocks);
  cache.sequences[handle].length = length;
  return handle;
}

void kv_free(PagedKVCache& cache, int64_t handle) {
  KVSequence& s = cache.sequence(handle);
  for (int32_t b : s.blocks)
    if (--cache.refcount[b] == 0) cache.free_blocks.push_back(b);
  s = KVSequence{};
}

namespace {
int32_t take_block(PagedKVCache& cache, int64_t handle, int64_t needed) {
  check(!cache.free_blocks.empty(), "kv cache: out of blocks (", cache.num_blocks, " blocks of ", cache.block_size,
        " tokens) while sequence ", handle, " needs ", needed, " more");
  int32_t b = cache.free_blocks.back();
  cache.free_blocks.pop_back();
  cache.refcount[b] = 1;
  return b;
}
}  // namespace

void kv_reserve(PagedKVCache& cache, int64_t handle, int64_t n) {
  KVSequence& s = cache.sequence(handle);
  if (n <= 0) return;
  // Copy on write: the block the next token lands in is shared and already holds tokens.
  if (s.length % cache.block_size != 0) {
    int32_t& last = s.blocks[s.length / cache.block_size];
    if (cache.refcount[last] > 1) {
      int32_t fresh = take_block(cache, handle, n);
      for (int64_t l = 0; l < cache.layers; ++l) {
        std::memcpy(cache.k_block(l, fresh), cache.k_block(l, last), sizeof(float) * cache.block_floats());
        std::memcpy(cache.v_block(l, fresh), cache.v_block(l, last), sizeof(float) * cache.block_floats());
      }
      --cache.refcount[last];
      last = fresh;
    }
  }
  int64_t needed_blocks = (s.length + n + cache.block_size - 1) / cache.block_size;
  while (static_cast<int64_t>(s.blocks.size()) < needed_blocks)
    s.blocks.push_back(take_block(cache, handle, needed_blocks - static_cast<int64_t>(s.blocks.size())));
}

int64_t kv_free_block_count(const PagedKVCache& cache) { return static_cast<int64_t>(cache.free_blocks.size()); }

int64_t kv_blocks_needed(const PagedKVCache& cache, const std::vector<std::pair<int64_t, int64_t>>& appends) {
  int64_t fresh = 0;
  std::vector<std::pair<int32_t, int32_t>> writers;  // (shared partly filled block, holders writing into it)
  for (const auto& [handle, n] : appends) {
    const KVSequence& s = cache.sequence(handle);
    if (n <= 0) continue;
    fresh += std::max<int64_t>(0, (s.length + n + cache.block_size - 1) / cache.block_size -
                                      static_cast<int64_t>(s.blocks.size()));
    if (s.length % cache.block_size == 0) continue;
    const int32_t last = s.blocks[s.length / cache.block_size];
    if (cache.refcount[last] <= 1) continue;
    auto it = std::find_if(writers.begin(), writers.end(), [&](const auto& w) { return w.first == last; });
    if (it == writers.end()) writers.emplace_back(last, 1);
    else ++it->second;
  }
  int64_t copies = 0;
  for (const auto& [block, count] : writers) copies += std::min<int64_t>(count, cache.refcount[block] - 1);
  return fresh + copies;
}

}  // namespace sqlrl
