// Flash attention backward on CUDA: P is recomputed tile by tile from the saved lse, nothing of
// size T x T is stored, and every sum runs in a fixed order (bitwise deterministic, no atomics).
//
// Three launches:
//  1. delta[t, h] = sum_d dout * out (fp32, one warp per row) into the caller's workspace.
//  2. dk/dv: one block of 4 warps per (64-key tile, kv head, sequence); each warp owns 16 keys
//     and keeps their dk, dv (16 x D fp32) in registers for the whole launch. The block walks
//     the q heads of its group and, per head, the 32-query tiles at or after its keys (causal),
//     then, when its keys lie in a shared prefix, the same for every sharer's queries (all of
//     them see the prefix), computing the transposed products so that no reduction crosses warps:
//        S^T = K Q^T, P^T = exp2(S^T scale log2e - lse log2e), dP^T = V dO^T,
//        dS^T = P^T (dP^T - delta), dV += P^T dO, dK += dS^T Q.
//     Shared memory: K, V [64 x (D+8)], two buffers of Q, dO [32 x (D+8)] bf16 and of
//     lse/delta (32 rows): 70,144 bytes for D = 128. The next query tile is fetched (cp.async)
//     while the current one is multiplied.
//  3. dq: one block of 4 warps per (64-query tile, q head, sequence), each warp 16 query rows,
//     walking the key tiles up to its causal end (a shared prefix's first, as in the forward):
//     S = Q K^T, dP = dO V^T, dS as above,
//     dQ += dS K (fp32 registers). Shared memory: Q, dO, V and two K buffers [64 x (D+8)]:
//     87,040 bytes (D 128); K_{j+1} loads during all of tile j, V_{j+1} from dS on.
// Computing dq in its own pass re-does S and dP (7 tile products instead of FlashAttention-2's
// 5) but removes its fp32 atomics on dq, whose summation order varies from run to run.
// ptxas (nvcc 13.0, sm_90a, D 128): dk/dv 237 registers, dq 232, no spills; 2 blocks per SM.
// Two numbers for batch 4 x 16 heads x seq 4096, D 128, causal: 6.9e11 FLOP counted as
// FlashAttention does (2.5x the forward; this schedule performs 3.5x), 0.70 ms at 989 TFLOP/s;
// 537 MB read and written once, 0.16 ms at 3.35 TB/s: compute-bound.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels/cuda/attention_tile.cuh"
#include "runtime/cuda/check.h"

namespace sqlrl {

void check_cuda_attention_shape(const char* op, AttentionShape shape, int64_t num_seqs, int64_t max_seqlen);

namespace attn {

constexpr int kBwdThreads = 128;
constexpr int kKvBc = 64, kKvBr = 32;  // dk/dv kernel: keys per block, queries per inner tile
constexpr int kQBr = 64, kQBc = 64;    // dq kernel: queries per block, keys per inner tile

template <int D>
__global__ void attention_delta_kernel(float* __restrict__ delta, const uint16_t* __restrict__ dout,
                                       const uint16_t* __restrict__ out, int64_t rows) {
  int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(dout + row * D);
  const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(out + row * D);
  float sum = 0.0f;
#pragma unroll
  for (int i = lane; i < D / 2; i += 32) {
    float2 x = __bfloat1622float2(a[i]), y = __bfloat1622float2(b[i]);
    sum += x.x * y.x + x.y * y.y;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) delta[row] = sum;
}

// Q, dO, lse and delta come in two buffers: the tile after the current one is fetched while
// the current one is multiplied.
// The queries a dk/dv block walks, as segments: first its own sequence's (from the key tile on,
// causal), then, for a tile inside a shared prefix, every sharer whose prefix reaches the tile
// (all of its queries see all of its prefix). Work item i of a segment is (q head i / tiles,
// 32-query tile i % tiles).
struct QuerySegment {
  int start = 0, len = 0;  // the queries' sequence: first packed token, length
  int first = 0;           // first query of the walk
  int offset = 0;          // key position of query 0 (a sharer's prefix length; own: 0)
  int key_limit = 0;       // keys at or past it are not seen by these queries
  int items = 0;
};

__device__ __forceinline__ QuerySegment own_segment(int start, int len, int k0, int group) {
  return {start, len, k0, 0, len, group * ((len - k0 + kKvBr - 1) / kKvBr)};
}

// Segment `index` of the walk (0 = own, then the sharers reaching k0 in ascending order; a
// sharer whose prefix ends at or before k0, or with no token of its own, is skipped). items == 0
// past the last.
__device__ __forceinline__ QuerySegment sharer_segment(int index, int seq, int k0, int group,
                                                       const int32_t* __restrict__ cu_seqlens,
                                                       const int32_t* __restrict__ prefix_len,
                                                       const int32_t* __restrict__ sharer_offsets,
                                                       const int32_t* __restrict__ sharers) {
  QuerySegment none;
  if (sharers == nullptr) return none;
  for (int i = sharer_offsets[seq], end = sharer_offsets[seq + 1]; i < end; ++i) {
    const int s = sharers[i], P = prefix_len[s], start = cu_seqlens[s], len = cu_seqlens[s + 1] - start;
    if (P <= k0 || len == 0) continue;
    if (--index == 0) return {start, len, 0, P, P, group * ((len + kKvBr - 1) / kKvBr)};
  }
  return none;
}

template <int D>
constexpr int dkdv_smem_bytes() {
  return (2 * kKvBc + 4 * kKvBr) * (D + kPad) * 2 + 4 * kKvBr * 4;
}

template <int D>
__global__ void __launch_bounds__(kBwdThreads) attention_backward_dkdv_kernel(
    uint16_t* __restrict__ dk, uint16_t* __restrict__ dv, const uint16_t* __restrict__ q,
    const uint16_t* __restrict__ k, const uint16_t* __restrict__ v, const uint16_t* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, const int32_t* __restrict__ cu_seqlens,
    const int32_t* __restrict__ prefix_len, const int32_t* __restrict__ sharer_offsets,
    const int32_t* __restrict__ sharers, int H, int KVH, float scale, float scale_log2) {
  constexpr int LD = D + kPad;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sK = smem;
  uint16_t* sV = sK + kKvBc * LD;
  uint16_t* sQ0 = sV + kKvBc * LD;   // buffer b: sQ0 + b * 2 * kKvBr * LD
  uint16_t* sdO0 = sQ0 + kKvBr * LD;  // buffer b: sdO0 + b * 2 * kKvBr * LD
  float* sStats = reinterpret_cast<float*>(sQ0 + 4 * kKvBr * LD);  // buffer b: lse, delta at 2 b kKvBr

  const int k_tile = gridDim.x - 1 - blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
  const int start = cu_seqlens[seq], len = cu_seqlens[seq + 1] - start;
  const int k0 = k_tile * kKvBc;
  if (k0 >= len) return;
  if (k_tile == 0 && len > static_cast<int>(gridDim.x) * kKvBc) {  // longer than max_seqlen
    const int64_t kv_base = (static_cast<int64_t>(start) * KVH + kvh) * D;
    nan_rows<D>(dk + kv_base, static_cast<int64_t>(KVH) * D, gridDim.x * kKvBc, len);
    nan_rows<D>(dv + kv_base, static_cast<int64_t>(KVH) * D, gridDim.x * kKvBc, len);
  }
  const int group = H / KVH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int64_t q_stride = static_cast<int64_t>(H) * D, kv_stride = static_cast<int64_t>(KVH) * D;
  const int64_t kv_off = (static_cast<int64_t>(start + k0) * KVH + kvh) * D;
  // Work items: the segments' (q head of the group, query tile), head-major within a segment.
  // Own queries before k0 see none of these keys; k0 is a multiple of kKvBr.
  const QuerySegment own = own_segment(start, len, k0, group);
  int items = own.items;
  for (int i = 1;; ++i) {
    int n = sharer_segment(i, seq, k0, group, cu_seqlens, prefix_len, sharer_offsets, sharers).items;
    if (n == 0) break;
    items += n;
  }
  // The segment of `item`, and the item's index inside it.
  auto locate = [&](int item, int& local) {
    QuerySegment seg = own;
    for (int i = 1; item >= seg.items; ++i) {
      item -= seg.items;
      seg = sharer_segment(i, seq, k0, group, cu_seqlens, prefix_len, sharer_offsets, sharers);
    }
    local = item;
    return seg;
  };
  auto fetch = [&](int item, int buf) {
    int local;
    const QuerySegment seg = locate(item, local);
    const int q_tiles = seg.items / group;
    const int h = kvh * group + local / q_tiles, qs = seg.first + (local % q_tiles) * kKvBr;
    const int64_t q_off = (static_cast<int64_t>(seg.start + qs) * H + h) * D;
    load_tile<kKvBr, D, kBwdThreads>(sQ0 + buf * 2 * kKvBr * LD, q + q_off, q_stride, min(kKvBr, seg.len - qs));
    load_tile<kKvBr, D, kBwdThreads>(sdO0 + buf * 2 * kKvBr * LD, dout + q_off, q_stride, min(kKvBr, seg.len - qs));
    cp_async_commit();
    if (threadIdx.x < kKvBr) {
      int i = qs + threadIdx.x;
      int64_t r = static_cast<int64_t>(seg.start + i) * H + h;
      sStats[2 * buf * kKvBr + threadIdx.x] = i < seg.len ? lse[r] * kLog2e : 0.0f;
      sStats[(2 * buf + 1) * kKvBr + threadIdx.x] = i < seg.len ? delta[r] : 0.0f;
    }
  };
  load_tile<kKvBc, D, kBwdThreads>(sK, k + kv_off, kv_stride, min(kKvBc, len - k0));
  load_tile<kKvBc, D, kBwdThreads>(sV, v + kv_off, kv_stride, min(kKvBc, len - k0));
  cp_async_commit();
  fetch(0, 0);

  // One 16-row tile per warp ([1] for the multi-tile helpers).
  float dk_tiles[1][D / 8][4], dv_tiles[1][D / 8][4];
  zero(dk_tiles);
  zero(dv_tiles);
  const int key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};

  for (int item = 0; item < items; ++item) {
    int local;
    const QuerySegment seg = locate(item, local);
    const int buf = item & 1, qs = seg.first + (local % (seg.items / group)) * kKvBr;
    // Buffer buf ^ 1 was last read in item - 1, which every warp finished before the barrier
    // closing that item.
    if (item + 1 < items) {
      fetch(item + 1, buf ^ 1);
      cp_async_wait<1>();  // everything but the tile just requested has landed
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* sQ = sQ0 + buf * 2 * kKvBr * LD;
    const uint16_t* sdO = sdO0 + buf * 2 * kKvBr * LD;
    const float* sLse = sStats + 2 * buf * kKvBr;
    const float* sDelta = sLse + kKvBr;

    float st_tiles[1][kKvBr / 8][4], dpt_tiles[1][kKvBr / 8][4];
    auto& st = st_tiles[0];
    auto& dpt = dpt_tiles[0];
    zero(st_tiles);
    zero(dpt_tiles);
    mma_a_smem_b_nk<LD, 1, kKvBr, D / 16>(st_tiles, sK, warp * 16, sQ, lane);
    mma_a_smem_b_nk<LD, 1, kKvBr, D / 16>(dpt_tiles, sV, warp * 16, sdO, lane);
#pragma unroll
    for (int n = 0; n < kKvBr / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int qi = n * 8 + 2 * t + (e & 1), query = qs + qi;
        bool valid = seg.offset + query >= key[e >> 1] && key[e >> 1] < seg.key_limit && query < seg.len;
        float p = valid ? exp2f(st[n][e] * scale_log2 - sLse[qi]) : 0.0f;
        st[n][e] = p;
        dpt[n][e] = p * (dpt[n][e] - sDelta[qi]);
      }
    mma_a_regs_b_kn<LD, 1, D, kKvBr>(dv_tiles, st_tiles, sdO, lane);
    mma_a_regs_b_kn<LD, 1, D, kKvBr>(dk_tiles, dpt_tiles, sQ, lane);
    __syncthreads();  // every warp is done with buffer buf before item + 2 refills it
  }

  // Each warp read only its own 16 rows of sK and sV: after a warp barrier it may reuse them.
  __syncwarp();
  acc_to_tile<LD, D>(sK, warp * 16, dk_tiles[0], scale, scale, lane);
  acc_to_tile<LD, D>(sV, warp * 16, dv_tiles[0], 1.0f, 1.0f, lane);
  __syncwarp();
  const int rows = min(16, len - (k0 + warp * 16));
  if (rows > 0) {
    int64_t off = kv_off + warp * 16 * kv_stride;
    store_rows_warp<D>(dk + off, kv_stride, sK + warp * 16 * LD, rows, lane);
    store_rows_warp<D>(dv + off, kv_stride, sV + warp * 16 * LD, rows, lane);
  }
}

// K comes in two buffers (K_{j+1} is fetched while S, dP and dQ of tile j run), V in one
// (V_{j+1} is fetched once dP of tile j is done).
template <int D>
constexpr int dq_smem_bytes() {
  return (2 * kQBr + 3 * kQBc) * (D + kPad) * 2;
}

template <int D>
__global__ void __launch_bounds__(kBwdThreads) attention_backward_dq_kernel(
    uint16_t* __restrict__ dq, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
    const uint16_t* __restrict__ v, const uint16_t* __restrict__ dout, const float* __restrict__ lse,
    const float* __restrict__ delta, const int32_t* __restrict__ cu_seqlens, const int32_t* __restrict__ prefix_seq,
    const int32_t* __restrict__ prefix_len, int H, int KVH, float scale, float scale_log2) {
  constexpr int LD = D + kPad;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sQ = smem;
  uint16_t* sdO = sQ + kQBr * LD;
  uint16_t* sK0 = sdO + kQBr * LD;  // buffer b: sK0 + b * kQBc * LD
  uint16_t* sV = sK0 + 2 * kQBc * LD;

  const int q_tile = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, seq = blockIdx.z;
  const int start = cu_seqlens[seq], len = cu_seqlens[seq + 1] - start;
  const int q0 = q_tile * kQBr;
  if (q0 >= len) return;
  if (q_tile == 0 && len > static_cast<int>(gridDim.x) * kQBr)  // longer than max_seqlen
    nan_rows<D>(dq + (static_cast<int64_t>(start) * H + h) * D, static_cast<int64_t>(H) * D, gridDim.x * kQBr, len);
  const int kvh = h / (H / KVH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int64_t q_stride = static_cast<int64_t>(H) * D, kv_stride = static_cast<int64_t>(KVH) * D;
  const int64_t q_off = (static_cast<int64_t>(start + q0) * H + h) * D;
  const uint16_t* gk = k + (static_cast<int64_t>(start) * KVH + kvh) * D;
  const uint16_t* gv = v + (static_cast<int64_t>(start) * KVH + kvh) * D;
  // A shared prefix of P keys comes first (as in the forward): query i sits at key P + i.
  const int pseq = prefix_seq != nullptr ? prefix_seq[seq] : -1;
  const int P = pseq >= 0 ? prefix_len[seq] : 0;
  const int shift = pseq >= 0 ? cu_seqlens[pseq] - start : 0;
  const int num_keys = P + len;
  const int q_rows = min(kQBr, len - q0);
  const int num_kv_tiles = (P + min(len, q0 + kQBr) + kQBc - 1) / kQBc;
  load_tile<kQBr, D, kBwdThreads>(sQ, q + q_off, q_stride, q_rows);
  load_tile<kQBr, D, kBwdThreads>(sdO, dout + q_off, q_stride, q_rows);
  load_kv_tile<kQBc, D, kBwdThreads>(sK0, gk, kv_stride, P, shift, 0, num_keys);
  load_kv_tile<kQBc, D, kBwdThreads>(sV, gv, kv_stride, P, shift, 0, num_keys);
  cp_async_commit();

  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float lse2[2], dlt[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int64_t i = static_cast<int64_t>(start + row[r]) * H + h;
    lse2[r] = row[r] < len ? lse[i] * kLog2e : 0.0f;
    dlt[r] = row[r] < len ? delta[i] : 0.0f;
  }
  float dq_tiles[1][D / 8][4];
  zero(dq_tiles);

  for (int j = 0; j < num_kv_tiles; ++j) {
    const int k0 = j * kQBc, next = k0 + kQBc;
    cp_async_wait<0>();  // K_j and V_j have landed
    __syncthreads();     // ... and every warp is done with tile j - 1, so K buffer (j + 1) & 1 is free
    const uint16_t* sK = sK0 + (j & 1) * kQBc * LD;
    if (j + 1 < num_kv_tiles) {
      load_kv_tile<kQBc, D, kBwdThreads>(sK0 + ((j + 1) & 1) * kQBc * LD, gk, kv_stride, P, shift, next, num_keys);
      cp_async_commit();
    }
    float s_tiles[1][kQBc / 8][4], dp_tiles[1][kQBc / 8][4];
    auto& s = s_tiles[0];
    auto& dp = dp_tiles[0];
    zero(s_tiles);
    zero(dp_tiles);
    mma_a_smem_b_nk<LD, 1, kQBc, D / 16>(s_tiles, sQ, warp * 16, sK, lane);
    mma_a_smem_b_nk<LD, 1, kQBc, D / 16>(dp_tiles, sdO, warp * 16, sV, lane);
    __syncthreads();  // every warp is done with V_j
    if (j + 1 < num_kv_tiles) {
      load_kv_tile<kQBc, D, kBwdThreads>(sV, gv, kv_stride, P, shift, next, num_keys);
      cp_async_commit();
    }
#pragma unroll
    for (int n = 0; n < kQBc / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int col = k0 + n * 8 + 2 * t + (e & 1);
        float p = col <= P + row[e >> 1] ? exp2f(s[n][e] * scale_log2 - lse2[e >> 1]) : 0.0f;
        dp[n][e] = p * (dp[n][e] - dlt[e >> 1]);
      }
    mma_a_regs_b_kn<LD, 1, D, kQBc>(dq_tiles, dp_tiles, sK, lane);
  }

  __syncwarp();
  acc_to_tile<LD, D>(sQ, warp * 16, dq_tiles[0], scale, scale, lane);
  __syncwarp();
  const int rows = min(16, len - (q0 + warp * 16));
  if (rows > 0) store_rows_warp<D>(dq + q_off + warp * 16 * q_stride, q_stride, sQ + warp * 16 * LD, rows, lane);
}

template <int D>
void launch_backward(uint16_t* dq, uint16_t* dk, uint16_t* dv, const uint16_t* dout, const uint16_t* out,
                     const float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                     const int32_t* cu_seqlens, int64_t num_seqs, int64_t total_tokens, int64_t max_seqlen,
                     AttentionShape shape, float* delta, const SharedPrefixesCuda& pre, cudaStream_t stream) {
  const int H = static_cast<int>(shape.heads), KVH = static_cast<int>(shape.kv_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D)), scale_log2 = scale * kLog2e;
  int64_t rows = total_tokens * H;
  attention_delta_kernel<D><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(delta, dout, out, rows);
  CUDA_CHECK_LAUNCH();

  auto dkdv = attention_backward_dkdv_kernel<D>;
  CUDA_CHECK(allow_smem(dkdv, dkdv_smem_bytes<D>()));
  dim3 grid_kv(static_cast<unsigned>((max_seqlen + kKvBc - 1) / kKvBc), static_cast<unsigned>(KVH),
               static_cast<unsigned>(num_seqs));
  dkdv<<<grid_kv, kBwdThreads, dkdv_smem_bytes<D>(), stream>>>(dk, dv, q, k, v, dout, lse, delta, cu_seqlens, pre.len,
                                                               pre.seq ? pre.sharer_offsets : nullptr,
                                                               pre.seq ? pre.sharers : nullptr, H, KVH, scale,
                                                               scale_log2);
  CUDA_CHECK_LAUNCH();

  auto dqk = attention_backward_dq_kernel<D>;
  CUDA_CHECK(allow_smem(dqk, dq_smem_bytes<D>()));
  dim3 grid_q(static_cast<unsigned>((max_seqlen + kQBr - 1) / kQBr), static_cast<unsigned>(H),
              static_cast<unsigned>(num_seqs));
  dqk<<<grid_q, kBwdThreads, dq_smem_bytes<D>(), stream>>>(dq, q, k, v, dout, lse, delta, cu_seqlens, pre.seq,
                                                           pre.len, H, KVH, scale, scale_log2);
  CUDA_CHECK_LAUNCH();
}

}  // namespace attn

size_t attention_backward_workspace_bytes(int64_t total_tokens, AttentionShape shape) {
  return static_cast<size_t>(total_tokens * shape.heads) * sizeof(float);  // delta [T, H]
}

void attention_backward_cuda(uint16_t* dq, uint16_t* dk, uint16_t* dv, const uint16_t* dout, const uint16_t* out,
                             const float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             const int32_t* cu_seqlens, int64_t num_seqs, int64_t total_tokens, int64_t max_seqlen,
                             AttentionShape shape, void* workspace, size_t workspace_bytes,
                             const CudaStream& stream, const SharedPrefixesCuda& prefixes) {
  check_cuda_attention_shape("attention_backward_cuda", shape, num_seqs, max_seqlen);
  check(prefixes.seq == nullptr || (prefixes.len != nullptr && prefixes.sharer_offsets != nullptr &&
                                    prefixes.sharers != nullptr),
        "attention_backward_cuda: shared prefixes need lengths and sharer lists (shared_prefix_sharers)");
  size_t need = attention_backward_workspace_bytes(total_tokens, shape);
  check(workspace_bytes >= need && (need == 0 || workspace != nullptr), "attention_backward_cuda: workspace of ",
        workspace_bytes, " bytes, need ", need, " (total_tokens ", total_tokens, " x heads ", shape.heads, " x 4)");
  if (num_seqs == 0 || max_seqlen == 0 || total_tokens == 0) return;
  CUDA_CHECK(cudaSetDevice(stream.device));
  auto s = static_cast<cudaStream_t>(stream.handle);
  float* delta = static_cast<float*>(workspace);
  if (shape.head_dim == 64)
    attn::launch_backward<64>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, num_seqs, total_tokens, max_seqlen,
                              shape, delta, prefixes, s);
  else
    attn::launch_backward<128>(dq, dk, dv, dout, out, lse, q, k, v, cu_seqlens, num_seqs, total_tokens, max_seqlen,
                               shape, delta, prefixes, s);
}

}  // namespace sqlrl
