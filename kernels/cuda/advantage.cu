// Group advantage: one warp per group, lanes stride over the G samples, float64 sums reduced by
// shuffles in a fixed tree (deterministic). Broadcast: one thread per token, its sequence found
// by binary search over the span offsets.
#include "kernels/advantage.h"
#include "kernels/cuda/ops_common.cuh"
#include "runtime/cuda/check.h"

namespace sqlrl {

namespace {

__global__ void group_advantage_kernel(float* adv, const float* rewards, int64_t groups, int64_t G,
                                       AdvantageOptions options) {
  int64_t g = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (g >= groups) return;  // whole warps leave together
  const float* r = rewards + g * G;
  double sum = 0;
  for (int64_t i = lane; i < G; i += 32) sum += r[i];
  sum = warp_sum(sum);
  double mean = sum / static_cast<double>(G), dev = 0;
  for (int64_t i = lane; i < G; i += 32) dev += (r[i] - mean) * (r[i] - mean);
  dev = warp_sum(dev);
  for (int64_t i = lane; i < G; i += 32) adv[g * G + i] = normalise_advantage(r[i], sum, dev, G, options);
}

__global__ void broadcast_spans_kernel(float* out, const float* values, const int32_t* offsets, int64_t num_seqs,
                                       int64_t T) {
  int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= T) return;
  // Last s with offsets[s] <= t: empty spans share an offset with their successor and are skipped.
  int64_t lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= t) lo = mid; else hi = mid - 1;
  }
  out[t] = values[lo];
}

}  // namespace

void group_advantage_cuda(float* advantages, const float* rewards, int64_t groups, int64_t group_size,
                          AdvantageOptions options, const CudaStream& stream) {
  check(groups >= 0 && group_size > 0, "advantage: groups ", groups, " x group_size ", group_size,
        " (group_size must be positive)");
  if (groups == 0) return;
  const int warps = 8;
  unsigned blocks = static_cast<unsigned>((groups + warps - 1) / warps);
  group_advantage_kernel<<<blocks, warps * 32, 0, cuda_stream_of(stream)>>>(advantages, rewards, groups, group_size, options);
  CUDA_CHECK_LAUNCH();
}

void broadcast_spans_cuda(float* token_values, const float* seq_values, const int32_t* offsets, int64_t num_seqs,
                          int64_t num_tokens, const CudaStream& stream) {
  check(num_seqs > 0 || num_tokens == 0, "advantage: ", num_tokens, " tokens but no sequences");
  if (num_tokens == 0) return;
  unsigned blocks = static_cast<unsigned>((num_tokens + 255) / 256);
  broadcast_spans_kernel<<<blocks, 256, 0, cuda_stream_of(stream)>>>(token_values, seq_values, offsets, num_seqs, num_tokens);
  CUDA_CHECK_LAUNCH();
}

}  // namespace sqlrl
