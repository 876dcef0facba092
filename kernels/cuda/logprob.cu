// Masked log-prob on CUDA: fused lm_head + log-softmax + gather, chunked over tokens and vocab.
//
// Forward, per [chunk_tokens x chunk_vocab] tile: cuBLASLt writes the f32 logits tile, then one
// block per row folds the tile into that token's running state (max m, s = sum e^(l-m),
// q = sum e^(l-m) (l-m)), picking up the target's logit when the tile holds it. The last tile
// writes lse = m + log s, logprob = l_target - lse and entropy = log s - q/s (q is kept relative to
// m so that the entropy does not come from cancelling two large numbers).
//
// Backward: the tokens with a non-zero gradient are compacted (token order) and only they are
// gathered into a contiguous bf16 block; per vocab tile their logits are recomputed, turned into
// bf16 dlogits, and two GEMMs accumulate dweight (f32) and a compact f32 dhidden, which is added
// to the caller's bf16 dhidden rows at the end. Reductions are fixed trees: bitwise repeatable.
#include <cmath>

#include "kernels/cuda/ops_common.cuh"
#include "kernels/logprob.h"
#include "runtime/gemm.h"

namespace sqlrl {
namespace {

constexpr int kRowThreads = 256;

struct Layout {
  size_t logits = 0, dlogits = 0, state = 0, rows = 0, count = 0, hc = 0, dhc = 0, total = 0;
};

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

Layout layout_for(const LogprobCudaShape& s) {
  const size_t ct = static_cast<size_t>(s.chunk_tokens), cv = static_cast<size_t>(s.chunk_vocab);
  const size_t C = static_cast<size_t>(s.hidden), T = static_cast<size_t>(s.tokens);
  Layout l;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    size_t start = at;
    at += align256(bytes);
    return start;
  };
  l.logits = take(ct * cv * sizeof(float));
  l.dlogits = take(ct * cv * sizeof(uint16_t));
  l.state = take(4 * ct * sizeof(float));
  l.rows = take(T * sizeof(int32_t));
  l.count = take(sizeof(int32_t));
  l.hc = take(ct * C * sizeof(uint16_t));
  l.dhc = take(ct * C * sizeof(float));
  l.total = at;
  return l;
}

void check_shape(const LogprobCudaShape& s, size_t workspace_bytes, const void* workspace) {
  check(s.hidden > 0 && s.vocab > 0 && s.tokens >= 0, "logprob cuda: bad shape tokens=", s.tokens,
        " hidden=", s.hidden, " vocab=", s.vocab);
  check(s.chunk_tokens > 0 && s.chunk_vocab > 0, "logprob cuda: chunk_tokens ", s.chunk_tokens, " and chunk_vocab ",
        s.chunk_vocab, " must be positive");
  check(s.tokens <= INT32_MAX && s.chunk_vocab <= INT32_MAX && s.chunk_tokens <= INT32_MAX,
        "logprob cuda: sizes exceed 32-bit indices");
  check(s.logit_scale > 0 && std::isfinite(s.logit_scale), "logprob cuda: logit_scale must be positive and finite, got ",
        s.logit_scale);
  size_t need = layout_for(s).total;
  check(workspace && workspace_bytes >= need, "logprob cuda: workspace of ", workspace_bytes, " bytes, need ", need);
}

// Softmax statistics of a set of values: m = max, s = sum e^(l-m), q = sum e^(l-m) (l-m).
struct Stats {
  float m, s, q;
};

__device__ __forceinline__ Stats merge(Stats a, Stats b) {
  if (b.s == 0.0f) return a;
  if (a.s == 0.0f) return b;
  float m = fmaxf(a.m, b.m);
  float ea = expf(a.m - m), eb = expf(b.m - m);
  // Rebasing sum e^(l-a.m) (l-a.m) onto m: e^(a.m-m) (q_a + (a.m - m) s_a).
  return Stats{m, a.s * ea + b.s * eb, ea * (a.q + (a.m - m) * a.s) + eb * (b.q + (b.m - m) * b.s)};
}

__device__ __forceinline__ Stats add_value(Stats a, float l) {
  if (l == -INFINITY) return a;  // e^(l-m) = 0 contributes nothing
  if (a.s == 0.0f) return Stats{l, 1.0f, 0.0f};
  if (l > a.m) {
    float e = expf(a.m - l);
    a = Stats{l, a.s * e, e * (a.q + (a.m - l) * a.s)};
  }
  float e = expf(l - a.m);
  return Stats{a.m, a.s + e, a.q + e * (l - a.m)};
}

__device__ __forceinline__ Stats shfl_stats(Stats a, int offset) {
  return Stats{__shfl_xor_sync(0xffffffffu, a.m, offset), __shfl_xor_sync(0xffffffffu, a.s, offset),
               __shfl_xor_sync(0xffffffffu, a.q, offset)};
}

// One block per row of the tile [n, w] (row stride w): fold the row into the token's state.
__global__ __launch_bounds__(kRowThreads) void forward_tile_kernel(float* state, int state_stride, float* logprobs,
                                                                   float* lse, float* entropy, const float* logits,
                                                                   int w, int64_t v0, const int32_t* targets,
                                                                   bool first, bool last) {
  const int r = blockIdx.x;
  const float* row = logits + static_cast<int64_t>(r) * w;
  Stats st{-INFINITY, 0.0f, 0.0f};
  for (int c = threadIdx.x; c < w; c += kRowThreads) st = add_value(st, row[c]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) st = merge(st, shfl_stats(st, o));
  __shared__ Stats warps[kRowThreads / 32];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = st;
  __syncthreads();
  if (threadIdx.x != 0) return;
  Stats total = warps[0];
  for (int i = 1; i < kRowThreads / 32; ++i) total = merge(total, warps[i]);
  float* m = state + r;
  float* s = m + state_stride;
  float* q = s + state_stride;
  float* target_logit = q + state_stride;
  if (first) {
    *target_logit = NAN;  // stays NaN if the target is outside [0, vocab)
  } else {
    total = merge(Stats{*m, *s, *q}, total);
  }
  const int64_t target = targets[r];
  if (target >= v0 && target < v0 + w) *target_logit = row[target - v0];
  if (!last) {
    *m = total.m, *s = total.s, *q = total.q;
    return;
  }
  const float log_s = logf(total.s), l = total.m + log_s;
  lse[r] = l;
  logprobs[r] = *target_logit - l;
  if (entropy) entropy[r] = log_s - total.q / total.s;
}

// Indices of the tokens whose gradient is non-zero, in token order, and their count. One block.
__global__ void compact_kernel(int32_t* rows, int32_t* count, const float* dlogprobs, const float* dentropy,
                               int64_t tokens) {
  __shared__ int warp_counts[32];
  __shared__ int base;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (threadIdx.x == 0) base = 0;
  __syncthreads();
  for (int64_t start = 0; start < tokens; start += blockDim.x) {
    const int64_t t = start + threadIdx.x;
    const bool active = t < tokens && (dlogprobs[t] != 0.0f || (dentropy && dentropy[t] != 0.0f));
    const unsigned ballot = __ballot_sync(0xffffffffu, active);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = base;
    for (int i = 0; i < warp; ++i) before += warp_counts[i];
    if (active) rows[before + __popc(ballot & ((1u << lane) - 1u))] = static_cast<int32_t>(t);
    __syncthreads();  // everyone has read base and warp_counts
    if (threadIdx.x == 0)
      for (int i = 0; i < warps; ++i) base += warp_counts[i];
    __syncthreads();
  }
  if (threadIdx.x == 0) *count = base;
}

// dst[r] = src[rows[r]] for n rows of C bf16 values (16-byte copies when possible).
__global__ void gather_rows_kernel(uint16_t* dst, const uint16_t* src, const int32_t* rows, int n, int64_t C,
                                   bool vectorised) {
  const int64_t per_row = vectorised ? C / 8 : C;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n * per_row;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / per_row, c = idx % per_row;
    const int64_t t = rows[r];
    if (vectorised)
      reinterpret_cast<uint4*>(dst + r * C)[c] = reinterpret_cast<const uint4*>(src + t * C)[c];
    else
      dst[r * C + c] = src[t * C + c];
  }
}

// dhidden[rows[r]] += dhc[r] (bf16 += f32, rounded once).
__global__ void scatter_add_rows_kernel(uint16_t* dhidden, const float* dhc, const int32_t* rows, int n, int64_t C) {
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n * C;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / C, c = idx % C;
    uint16_t* dst = dhidden + static_cast<int64_t>(rows[r]) * C + c;
    *dst = f32_to_bf16(bf16_to_f32(*dst) + dhc[idx]);
  }
}

// One block per compacted row: bf16 dlogits (with respect to the unscaled logits) of the tile from
// recomputed f32 scaled logits.
__global__ __launch_bounds__(kRowThreads) void dlogits_kernel(uint16_t* dlogits, const float* logits, int w,
                                                              int64_t v0, const int32_t* rows, const int32_t* targets,
                                                              const float* dlogprobs, const float* dentropy,
                                                              const float* lse, const float* entropy,
                                                              float logit_scale) {
  const int r = blockIdx.x;
  const int64_t t = rows[r];
  const float g = dlogprobs[t], h = dentropy ? dentropy[t] : 0.0f, l = lse[t];
  const float H = h != 0.0f ? entropy[t] : 0.0f;
  const int64_t target = targets[t] - v0;
  const float* in = logits + static_cast<int64_t>(r) * w;
  uint16_t* out = dlogits + static_cast<int64_t>(r) * w;
  for (int c = threadIdx.x; c < w; c += kRowThreads) {
    const float log_p = in[c] - l, p = expf(log_p);
    float d = -g * p;
    if (h != 0.0f) d -= h * p * (log_p + H);
    if (c == target) d += g;
    out[c] = f32_to_bf16(d * logit_scale);  // the chain rule through the scaled logits
  }
}

GemmProblem bf16_gemm(int64_t m, int64_t n, int64_t k, const void* a, int64_t lda, bool trans_a, const void* b,
                      int64_t ldb, bool trans_b, float* c, int64_t ldc, float beta, float alpha = 1.0f) {
  GemmProblem p;
  p.alpha = alpha;
  p.m = m, p.n = n, p.k = k;
  p.a = a, p.b = b, p.c = c;
  p.lda = lda, p.ldb = ldb, p.ldc = ldc;
  p.trans_a = trans_a, p.trans_b = trans_b;
  p.beta = beta;
  p.ab_type = DType::BF16;
  p.c_type = DType::F32;
  return p;
}

}  // namespace

size_t logprob_cuda_workspace_bytes(const LogprobCudaShape& shape) { return layout_for(shape).total; }

void logprob_forward_cuda(float* logprobs, float* lse, float* entropy, const uint16_t* hidden, const uint16_t* weight,
                          const int32_t* targets, const LogprobCudaShape& shape, void* workspace,
                          size_t workspace_bytes, const CudaStream& stream) {
  check_shape(shape, workspace_bytes, workspace);
  const Layout lay = layout_for(shape);
  char* base = static_cast<char*>(workspace);
  float* logits = reinterpret_cast<float*>(base + lay.logits);
  float* state = reinterpret_cast<float*>(base + lay.state);
  const int64_t C = shape.hidden, V = shape.vocab;
  for (int64_t t0 = 0; t0 < shape.tokens; t0 += shape.chunk_tokens) {
    const int64_t n = std::min(shape.chunk_tokens, shape.tokens - t0);
    for (int64_t v0 = 0; v0 < V; v0 += shape.chunk_vocab) {
      const int64_t w = std::min(shape.chunk_vocab, V - v0);
      // logits [n, w] = logit_scale * hidden[t0 : t0+n] @ weight[v0 : v0+w]^T
      gemm_cuda(bf16_gemm(n, w, C, hidden + t0 * C, C, false, weight + v0 * C, C, true, logits, w, 0.0f,
                          shape.logit_scale),
                stream.device, stream);
      forward_tile_kernel<<<static_cast<unsigned>(n), kRowThreads, 0, cuda_stream_of(stream)>>>(
          state, static_cast<int>(shape.chunk_tokens), logprobs + t0, lse + t0, entropy ? entropy + t0 : nullptr,
          logits, static_cast<int>(w), v0, targets + t0, v0 == 0, v0 + w >= V);
      CUDA_CHECK_LAUNCH();
    }
  }
}

void logprob_backward_cuda(uint16_t* dhidden, float* dweight, const float* dlogprobs, const float* dentropy,
                           const uint16_t* hidden, const uint16_t* weight, const int32_t* targets, const float* lse,
                           const float* entropy, const LogprobCudaShape& shape, void* workspace,
                           size_t workspace_bytes, const CudaStream& stream) {
  check_shape(shape, workspace_bytes, workspace);
  check(!dentropy || entropy, "logprob cuda backward: dentropy needs the forward's entropy");
  if (shape.tokens == 0 || (!dhidden && !dweight)) return;
  const Layout lay = layout_for(shape);
  char* base = static_cast<char*>(workspace);
  float* logits = reinterpret_cast<float*>(base + lay.logits);
  uint16_t* dlogits = reinterpret_cast<uint16_t*>(base + lay.dlogits);
  int32_t* rows = reinterpret_cast<int32_t*>(base + lay.rows);
  int32_t* count_dev = reinterpret_cast<int32_t*>(base + lay.count);
  uint16_t* hc = reinterpret_cast<uint16_t*>(base + lay.hc);
  float* dhc = reinterpret_cast<float*>(base + lay.dhc);
  cudaStream_t s = cuda_stream_of(stream);
  const int64_t C = shape.hidden, V = shape.vocab;

  compact_kernel<<<1, 1024, 0, s>>>(rows, count_dev, dlogprobs, dentropy, shape.tokens);
  CUDA_CHECK_LAUNCH();
  int32_t active = 0;
  CUDA_CHECK(cudaMemcpyAsync(&active, count_dev, sizeof(active), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));

  const bool vectorised = C % 8 == 0 && aligned16(hidden) && aligned16(hc);
  for (int64_t r0 = 0; r0 < active; r0 += shape.chunk_tokens) {
    const int64_t n = std::min<int64_t>(shape.chunk_tokens, active - r0);
    const int32_t* chunk_rows = rows + r0;
    gather_rows_kernel<<<grid_for(n * (vectorised ? C / 8 : C), 256), 256, 0, s>>>(
        hc, hidden, chunk_rows, static_cast<int>(n), C, vectorised);
    CUDA_CHECK_LAUNCH();
    for (int64_t v0 = 0; v0 < V; v0 += shape.chunk_vocab) {
      const int64_t w = std::min(shape.chunk_vocab, V - v0);
      gemm_cuda(bf16_gemm(n, w, C, hc, C, false, weight + v0 * C, C, true, logits, w, 0.0f, shape.logit_scale),
                stream.device, stream);
      dlogits_kernel<<<static_cast<unsigned>(n), kRowThreads, 0, s>>>(dlogits, logits, static_cast<int>(w), v0,
                                                                      chunk_rows, targets, dlogprobs, dentropy, lse,
                                                                      entropy, shape.logit_scale);
      CUDA_CHECK_LAUNCH();
      // dweight[v0 : v0+w] [w, C] += dlogits^T [w, n] @ hc [n, C]
      if (dweight)
        gemm_cuda(bf16_gemm(w, C, n, dlogits, w, true, hc, C, false, dweight + v0 * C, C, 1.0f), stream.device,
                  stream);
      // dhc [n, C] (+)= dlogits [n, w] @ weight[v0 : v0+w] [w, C]
      if (dhidden)
        gemm_cuda(bf16_gemm(n, C, w, dlogits, w, false, weight + v0 * C, C, false, dhc, C, v0 == 0 ? 0.0f : 1.0f),
                  stream.device, stream);
    }
    if (dhidden) {
      scatter_add_rows_kernel<<<grid_for(n * C, 256), 256, 0, s>>>(dhidden, dhc, chunk_rows, static_cast<int>(n), C);
      CUDA_CHECK_LAUNCH();
    }
  }
}

}  // namespace sqlrl
