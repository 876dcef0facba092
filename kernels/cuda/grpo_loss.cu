// GRPO loss on the GPU in three launches, every sum in a fixed order:
//   1. (seq-mean only) one block per sequence counts its masked tokens -> counts[s]
//   2. one block per tile of kTile tokens: per-token loss and dlogp, tile stats reduced by a
//      fixed shared-memory tree -> partials[tile]
//   3. one block sums the partials, thread i taking tiles i, i + 256, ... then a fixed tree.
// The CPU path tiles by 4096 and this one by 1024, so the two agree to float64 rounding of the
// stats, not bitwise; each is bitwise repeatable on its own.
#include "kernels/grpo_loss.h"
#include "kernels/cuda/ops_common.cuh"
#include "runtime/cuda/check.h"

namespace sqlrl {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kTile = 1024;
constexpr int kStats = sizeof(GrpoLossStats) / sizeof(double);
static_assert(sizeof(GrpoLossStats) == kStats * sizeof(double), "GrpoLossStats must be plain doubles");

__global__ void count_mask_kernel(int32_t* counts, const uint8_t* mask, const int32_t* cu_seqlens) {
  __shared__ int32_t sh[kThreads];
  int s = blockIdx.x;
  int32_t n = 0;
  for (int32_t t = cu_seqlens[s] + threadIdx.x; t < cu_seqlens[s + 1]; t += kThreads) n += mask[t] != 0;
  sh[threadIdx.x] = n;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) counts[s] = sh[0];
}

// Fixed-tree block sum of kStats doubles per thread into out (thread 0 writes).
__device__ void block_sum_stats(double (&v)[kStats], double* out) {
  __shared__ double sh[kStats][kThreads];
  for (int k = 0; k < kStats; ++k) sh[k][threadIdx.x] = v[k];
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w)
      for (int k = 0; k < kStats; ++k) sh[k][threadIdx.x] += sh[k][threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    for (int k = 0; k < kStats; ++k) out[k] = sh[k][0];
}

__global__ void grpo_token_kernel(float* dlogp, double* partials, const float* logp, const float* old_logp,
                                  const float* ref_logp, const float* adv, const uint8_t* mask,
                                  const int32_t* cu_seqlens, const int32_t* counts, int64_t num_seqs, int64_t T,
                                  GrpoLossConfig c) {
  double v[kStats] = {};  // loss, tokens, clipped, ratio, approx_kl, ref_kl
  int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int64_t t = t0 + threadIdx.x; t < t0 + kTile && t < T; t += kThreads) {
    if (!mask[t]) {
      if (dlogp) dlogp[t] = 0.0f;
      continue;
    }
    double w64 = 1.0 / c.denominator;
    if (c.agg == LossAgg::SeqMeanTokenMean) {
      int64_t lo = 0, hi = num_seqs - 1;  // last sequence starting at or before t
      while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (cu_seqlens[mid] <= t) lo = mid; else hi = mid - 1;
      }
      w64 = 1.0 / (static_cast<double>(counts[lo]) * c.denominator);
    }
    float w = static_cast<float>(w64);
    GrpoToken k = grpo_token(logp[t], old_logp[t], adv[t], ref_logp ? ref_logp + t : nullptr, c);
    if (dlogp) dlogp[t] = w * k.dloss;
    v[0] += static_cast<double>(w) * k.loss;
    v[1] += 1, v[2] += k.clipped, v[3] += k.ratio, v[4] += k.approx_kl, v[5] += k.ref_kl;
  }
  block_sum_stats(v, partials + blockIdx.x * kStats);
}

__global__ void finish_stats_kernel(double* stats, const double* partials, int64_t tiles) {
  double v[kStats] = {};
  for (int64_t i = threadIdx.x; i < tiles; i += kThreads)
    for (int k = 0; k < kStats; ++k) v[k] += partials[i * kStats + k];
  block_sum_stats(v, stats);
}

int64_t tiles_of(int64_t T) { return (T + kTile - 1) / kTile; }
size_t counts_bytes(int64_t num_seqs) { return static_cast<size_t>((num_seqs * 4 + 15) / 16 * 16); }

}  // namespace

size_t grpo_loss_workspace_bytes(int64_t num_tokens, int64_t num_seqs) {
  return counts_bytes(num_seqs) + static_cast<size_t>(tiles_of(num_tokens)) * sizeof(GrpoLossStats);
}

void grpo_loss_cuda(float* dlogp, GrpoLossStats* stats, const float* logp, const float* old_logp,
                    const float* ref_logp, const float* advantages, const uint8_t* mask, const int32_t* cu_seqlens,
                    int64_t num_seqs, int64_t num_tokens, const GrpoLossConfig& config, void* workspace,
                    const CudaStream& stream) {
  check(config.denominator > 0, "grpo_loss: denominator must be positive (masked tokens or sequences of the "
        "mini-batch), got ", config.denominator);
  check(config.kl_coef <= 0 || ref_logp != nullptr, "grpo_loss: kl_coef ", config.kl_coef, " needs ref_logp");
  check(num_seqs > 0 || num_tokens == 0, "grpo_loss: ", num_tokens, " tokens but no sequences");
  int32_t* counts = static_cast<int32_t*>(workspace);
  double* partials = reinterpret_cast<double*>(static_cast<char*>(workspace) + counts_bytes(num_seqs));
  int64_t tiles = tiles_of(num_tokens);
  if (config.agg == LossAgg::SeqMeanTokenMean && num_seqs > 0) {
    count_mask_kernel<<<static_cast<unsigned>(num_seqs), kThreads, 0, cuda_stream_of(stream)>>>(counts, mask, cu_seqlens);
    CUDA_CHECK_LAUNCH();
  }
  if (tiles > 0) {
    grpo_token_kernel<<<static_cast<unsigned>(tiles), kThreads, 0, cuda_stream_of(stream)>>>(
        dlogp, partials, logp, old_logp, ref_logp, advantages, mask, cu_seqlens, counts, num_seqs, num_tokens, config);
    CUDA_CHECK_LAUNCH();
  }
  finish_stats_kernel<<<1, kThreads, 0, cuda_stream_of(stream)>>>(reinterpret_cast<double*>(stats), partials, tiles);
  CUDA_CHECK_LAUNCH();
}

}  // namespace sqlrl
