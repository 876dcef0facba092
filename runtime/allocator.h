// Device memory. CPU: 64-byte aligned heap blocks. CUDA: a caching allocator over plain
// cudaMalloc: freed blocks go to size-class bins and are reused; empty_cache() gives them back.
// Blocks are assumed to be used on one stream per device (freeing while another stream still
// reads a block is the caller's bug, as with any stream-unaware cache).
#pragma once
#include <cstddef>
#include <memory>

#include "runtime/device.h"

namespace sqlrl {

struct Storage;

struct AllocatorStats {
  size_t in_use = 0;       // bytes handed out (rounded to the size class)
  size_t peak_in_use = 0;  // maximum of in_use since start or reset_peak
  size_t cached = 0;       // bytes held in bins, free for reuse
  size_t device_allocs = 0;  // cudaMalloc calls made
  size_t cache_hits = 0;
};

std::shared_ptr<Storage> allocate_storage(size_t bytes, Device device);

// Size class of a request: 512-byte granules below 1 MiB, 2 MiB granules above.
size_t cuda_size_class(size_t bytes);
AllocatorStats cuda_allocator_stats(int device_index);
void cuda_empty_cache(int device_index);

}  // namespace sqlrl
