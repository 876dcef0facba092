#include "runtime/allocator.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "runtime/device_memory.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

namespace sqlrl {
namespace {

constexpr size_t kSmallGranule = 512;
constexpr size_t kLargeThreshold = size_t{1} << 20;
constexpr size_t kLargeGranule = size_t{2} << 20;
constexpr int kMaxCudaDevices = 64;

size_t round_up(size_t n, size_t granule) { return (n + granule - 1) / granule * granule; }

struct CudaCache {
  std::mutex mutex;
  std::map<size_t, std::vector<void*>> bins;  // size class -> free blocks
  AllocatorStats stats;
};

CudaCache& cache_for(int device_index) {
  static CudaCache caches[kMaxCudaDevices];
  check(device_index >= 0 && device_index < kMaxCudaDevices, "cuda:", device_index, " is out of range");
  return caches[device_index];
}

void* cuda_cached_alloc(size_t size_class, int device_index) {
  CudaCache& cache = cache_for(device_index);
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto bin = cache.bins.find(size_class);
    if (bin != cache.bins.end() && !bin->second.empty()) {
      void* ptr = bin->second.back();
      bin->second.pop_back();
      cache.stats.cached -= size_class;
      cache.stats.in_use += size_class;
      cache.stats.peak_in_use = std::max(cache.stats.peak_in_use, cache.stats.in_use);
      ++cache.stats.cache_hits;
      return ptr;
    }
  }
  void* ptr = nullptr;
  try {
    ptr = cuda_malloc_raw(size_class, device_index);
  } catch (const Error&) {
    // Out of memory with blocks parked in the cache: give them back and try once more.
    cuda_empty_cache(device_index);
    ptr = cuda_malloc_raw(size_class, device_index);
  }
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.stats.in_use += size_class;
  cache.stats.peak_in_use = std::max(cache.stats.peak_in_use, cache.stats.in_use);
  ++cache.stats.device_allocs;
  return ptr;
}

void cuda_cached_free(void* ptr, size_t size_class, int device_index) {
  CudaCache& cache = cache_for(device_index);
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.bins[size_class].push_back(ptr);
  cache.stats.in_use -= size_class;
  cache.stats.cached += size_class;
}

}  // namespace

size_t cuda_size_class(size_t bytes) {
  if (bytes == 0) return kSmallGranule;
  return bytes < kLargeThreshold ? round_up(bytes, kSmallGranule) : round_up(bytes, kLargeGranule);
}

std::shared_ptr<Storage> allocate_storage(size_t bytes, Device device) {
  auto storage = std::make_shared<Storage>();
  storage->bytes = bytes;
  storage->device = device;
  if (device.is_cpu()) {
    size_t rounded = round_up(bytes == 0 ? 64 : bytes, 64);
    storage->data = std::aligned_alloc(64, rounded);
    check(storage->data != nullptr, "out of host memory allocating ", bytes, " bytes");
    storage->release = [](void* p) { std::free(p); };
    return storage;
  }
  check(device.index < cuda_device_count(), "cannot allocate on ", device_name(device), ": ",
        cuda_device_count() == 0 ? cuda_unavailable_reason() : str_cat(cuda_device_count(), " CUDA devices"));
  size_t size_class = cuda_size_class(bytes);
  int index = device.index;
  storage->data = cuda_cached_alloc(size_class, index);
  storage->release = [size_class, index](void* p) { cuda_cached_free(p, size_class, index); };
  return storage;
}

AllocatorStats cuda_allocator_stats(int device_index) {
  CudaCache& cache = cache_for(device_index);
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.stats;
}

void cuda_empty_cache(int device_index) {
  CudaCache& cache = cache_for(device_index);
  std::map<size_t, std::vector<void*>> bins;
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    bins.swap(cache.bins);
    cache.stats.cached = 0;
  }
  for (auto& [size_class, blocks] : bins)
    for (void* p : blocks) cuda_free_raw(p, device_index);
}

}  // namespace sqlrl
