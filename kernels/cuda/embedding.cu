// Embedding gather (bf16 rows) and its deterministic scatter-add backward. The backward sorts
// (token, t) pairs with CUB's radix sort, which is stable, so equal tokens keep t ascending; the
// first position of each run of a token owns that token's row and sums the run's gradient rows
// in t order before one read-modify-write of dtable: no atomics, bitwise repeatable.
#include <cub/device/device_radix_sort.cuh>

#include <bit>

#include "kernels/cuda/ops_common.cuh"
#include "kernels/embedding.h"
#include "runtime/device.h"

namespace sqlrl {
namespace {

constexpr int kThreads = 256;

template <int kV>
__global__ void embedding_forward_kernel(uint16_t* out, const uint16_t* table, const int32_t* tokens,
                                         int64_t num_tokens, int64_t vocab, int64_t dim) {
  const int64_t per_row = dim / kV, total = num_tokens * per_row;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = idx / per_row, col = (idx % per_row) * kV;
    const int32_t token = tokens[t];
    float v[kV];
    if (token >= 0 && token < vocab) {
      load_bf16v<kV>(table + token * dim + col, v);
    } else {
#pragma unroll
      for (int e = 0; e < kV; ++e) v[e] = __uint_as_float(0x7fc00000u);  // NaN: bad token id
    }
    store_bf16v<kV>(out + t * dim + col, v);
  }
}

// Sort keys: the token, or vocab for an out-of-range token (sorted last and skipped).
__global__ void embedding_keys_kernel(uint32_t* keys, uint32_t* values, const int32_t* tokens, int64_t num_tokens,
                                      int64_t vocab) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < num_tokens;
       t += int64_t{gridDim.x} * blockDim.x) {
    int32_t token = tokens[t];
    keys[t] = (token >= 0 && token < vocab) ? static_cast<uint32_t>(token) : static_cast<uint32_t>(vocab);
    values[t] = static_cast<uint32_t>(t);
  }
}

// One block per sorted position; only the first position of a run works.
__global__ void embedding_accumulate_kernel(float* dtable, const uint16_t* dout, const uint32_t* keys,
                                            const uint32_t* order, int64_t num_tokens, int64_t vocab, int64_t dim) {
  const int64_t i = blockIdx.x;
  const uint32_t key = keys[i];
  if (key >= vocab || (i > 0 && keys[i - 1] == key)) return;
  int64_t end = i + 1;
  while (end < num_tokens && keys[end] == key) ++end;
  float* row = dtable + static_cast<int64_t>(key) * dim;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    float sum = 0.0f;
    for (int64_t j = i; j < end; ++j) sum += bf16_to_f32(dout[static_cast<int64_t>(order[j]) * dim + c]);
    row[c] += sum;
  }
}

struct BackwardLayout {
  size_t keys_in = 0, keys_out = 0, values_in = 0, values_out = 0, cub = 0, cub_bytes = 0, total = 0;
};

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

int key_bits(int64_t vocab) { return std::bit_width(static_cast<uint64_t>(vocab)); }  // keys are <= vocab

BackwardLayout backward_layout(int64_t num_tokens, int64_t vocab) {
  BackwardLayout l;
  size_t array = align256(static_cast<size_t>(num_tokens) * sizeof(uint32_t));
  l.keys_in = 0;
  l.keys_out = array;
  l.values_in = 2 * array;
  l.values_out = 3 * array;
  l.cub = 4 * array;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, l.cub_bytes, static_cast<const uint32_t*>(nullptr),
                                             static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                             static_cast<uint32_t*>(nullptr), static_cast<int>(num_tokens), 0,
                                             key_bits(vocab)));
  l.total = l.cub + align256(l.cub_bytes);
  return l;
}

}  // namespace

void embedding_forward_cuda(uint16_t* out, const uint16_t* table, const int32_t* tokens, int64_t num_tokens,
                            int64_t vocab, int64_t dim, const CudaStream& stream) {
  check(dim > 0 && vocab > 0, "embedding: vocab ", vocab, " and dim ", dim, " must be positive");
  if (num_tokens == 0) return;
  if (dim % 8 == 0 && aligned16(out) && aligned16(table))
    embedding_forward_kernel<8><<<grid_for(num_tokens * dim / 8, kThreads), kThreads, 0, cuda_stream_of(stream)>>>(
        out, table, tokens, num_tokens, vocab, dim);
  else
    embedding_forward_kernel<1><<<grid_for(num_tokens * dim, kThreads), kThreads, 0, cuda_stream_of(stream)>>>(
        out, table, tokens, num_tokens, vocab, dim);
  CUDA_CHECK_LAUNCH();
}

size_t embedding_backward_workspace_bytes(int64_t num_tokens, int64_t vocab) {
  if (num_tokens == 0) return 0;
  // cub sizes its temp storage for the device it runs on; with no device present (the memory
  // planner on a build machine) a bound stands in: the four arrays again plus 1 MiB covers the
  // radix sort's per-pass histograms and tiles at these sizes. The trainer always asks cub.
  if (cuda_device_count() == 0) return 8 * align256(static_cast<size_t>(num_tokens) * sizeof(uint32_t)) + (1u << 20);
  return backward_layout(num_tokens, vocab).total;
}

void embedding_backward_cuda(float* dtable, const uint16_t* dout, const int32_t* tokens, int64_t num_tokens,
                             int64_t vocab, int64_t dim, void* workspace, size_t workspace_bytes,
                             const CudaStream& stream) {
  check(dim > 0 && vocab > 0, "embedding: vocab ", vocab, " and dim ", dim, " must be positive");
  check(num_tokens <= INT32_MAX && vocab < INT32_MAX, "embedding backward: ", num_tokens, " tokens / vocab ", vocab,
        " exceed 32-bit sort keys");
  if (num_tokens == 0) return;
  BackwardLayout l = backward_layout(num_tokens, vocab);
  check(workspace && workspace_bytes >= l.total, "embedding backward: workspace of ", workspace_bytes,
        " bytes, need ", l.total, " for ", num_tokens, " tokens");
  char* base = static_cast<char*>(workspace);
  auto* keys_in = reinterpret_cast<uint32_t*>(base + l.keys_in);
  auto* keys_out = reinterpret_cast<uint32_t*>(base + l.keys_out);
  auto* values_in = reinterpret_cast<uint32_t*>(base + l.values_in);
  auto* values_out = reinterpret_cast<uint32_t*>(base + l.values_out);
  cudaStream_t s = cuda_stream_of(stream);
  embedding_keys_kernel<<<grid_for(num_tokens, kThreads), kThreads, 0, s>>>(keys_in, values_in, tokens, num_tokens,
                                                                             vocab);
  CUDA_CHECK_LAUNCH();
  size_t cub_bytes = l.cub_bytes;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + l.cub, cub_bytes, keys_in, keys_out, values_in, values_out,
                                             static_cast<int>(num_tokens), 0, key_bits(vocab), s));
  embedding_accumulate_kernel<<<static_cast<unsigned>(num_tokens), 128, 0, s>>>(dtable, dout, keys_out, values_out,
                                                                                 num_tokens, vocab, dim);
  CUDA_CHECK_LAUNCH();
}

}  // namespace sqlrl
