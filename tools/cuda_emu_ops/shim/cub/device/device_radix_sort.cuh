// CUB's stable radix sort of (key, value) pairs, emulated by std::stable_sort on the host.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace cub {
struct DeviceRadixSort {
  template <class K, class V>
  static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* keys_in, K* keys_out, const V* values_in,
                               V* values_out, int n, int begin_bit, int end_bit, cudaStream_t = nullptr) {
    if (!temp) {
      temp_bytes = 1;
      return 0;
    }
    const K mask = end_bit >= 32 ? ~K{0} : static_cast<K>((K{1} << end_bit) - 1) & ~static_cast<K>((K{1} << begin_bit) - 1);
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return (keys_in[a] & mask) < (keys_in[b] & mask); });
    for (int i = 0; i < n; ++i) keys_out[i] = keys_in[order[i]], values_out[i] = values_in[order[i]];
    return 0;
  }
};
}  // namespace cub
