// Paged decode attention on CUDA: one query token per sequence against its block table, both
// products on the tensor cores.
//
// Decode is memory-bound: each cached key and value (bf16) is read once per step and used for
// `group` = H / KVH dot products, 2 * group FLOP per byte at most. The previous version (one
// 16-lane shuffle tree per token per head, exp2 per head per token on the CUDA cores, 157
// registers) was issue-bound at 0.28-0.45 of the device copy bandwidth. This one:
//  * grid (kv head x head chunk, split, query); a block of 4 warps serves one kv head and up to 16
//    of its query heads over one split of the query's context. The group's query heads are the 16
//    M rows of mma.m16n8k16 (rows past the group are zeros, never written out): S = Q K^T with Q
//    as the A fragment and K tiles as B (ldmatrix from shared memory), then O += P V with P
//    re-packed from the S accumulators as the bf16 A fragment and V as B (ldmatrix.trans). One
//    tensor-core pass covers 16 heads x 16 keys: per 16 keys a warp does 8 exp2 per lane and two
//    2-level quad shuffles per row half, instead of a shuffle tree per key per head. (The
//    FlashAttention-2 schedule applied to decode with the GQA group's heads as the M rows, as
//    FlashInfer's decode kernels do: FlashAttention-2, arXiv:2307.08691; Dao-AILab/flash-attention;
//    flashinfer-ai/flashinfer; split-K as in "Flash-Decoding for long-context inference", 2023.)
//  * Keys stream through shared memory in tiles of 64 (warp w takes keys 16w..16w+15 of every
//    tile with its own running max, sum and O), kPagedStages = 3 deep with cp.async, the next
//    tile issued before waiting for the current one: 3 tiles (96 KB) in flight per block. The
//    block first turns its split's block-table entries into cache slots in shared memory, so a
//    tile's 16-byte copies need no global lookups. The 4 warps' states are merged in warp order
//    through shared memory (over the drained pipeline).
//  * Split-K: a context is cut by paged_split_tokens (kernels/attention.h), which depends on the
//    context alone: batch-invariant bits. A one-split context is normalised and written directly;
//    otherwise each split writes (normalised O, log2-sum-exp) to the workspace and a second,
//    small kernel merges the splits of each (query, head) in split order.
//  * positions < 0: padding row, zeros written by split 0, nothing else read. Context past
//    max_context: NaN written by split 0.
//
// Shared memory (D 128): Q 16 x 136 x 2 = 4,352 B, slots 4 B per key of the longest split, stages
// of (K + V) 64 x 136 x 2 x 2 = 34,816 B; the launcher allocates only the stages the longest split
// fills: 512-key splits 110,848 B (2 blocks per SM), 128-key 74,496 B (3), 64-key 39,424 B (4,
// the register limit). D 64: 18,432 B per stage.
// ptxas (nvcc 13.0): paged_attention_kernel 122 registers for D 128, 90 for D 64 on sm_90a (120 /
// 88 on sm_80), the merge kernel 32; no spills, no stack frame. SASS (sm_90a, cuobjdump on the
// H200 machine): 48 HMMA.16816.F32.BF16 (32 in the D 128 kernel, 16 in D 64), 36 LDSM (.M88.4 for
// Q and K, .MT88.4 for V), LDGSTS.E.BYPASS.128 for the tiles.
//
// Two numbers, Qwen3-4B heads (32 q / 8 kv, D 128), K and V bytes at the 4.2 TB/s a 1 GiB device
// copy reaches on an H200: 64 x 4096 keys 1.07 GB, 255 us; 8 x 8192 268 MB, 64 us; 1 x 32768
// 134 MB, 32 us. FLOPs (64 x 4096): 4.3 G useful, 17 G on the tensor cores with the rows padded
// to 16, 0.03 ms at mma.sync's ~600 TFLOP/s: memory-bound 8x over.
// Measured (H200, bench_attention_cuda's way: one call between events / per launch in a CUDA
// graph), fraction of the copy rate: 64 x 4096 0.89 / 0.92, 8 x 8192 0.67-0.69 / 0.76, 1 x 32768
// 0.51 / 0.57, 64 x 2048 0.80 / 0.83, 128 x 1024 0.77 / 0.80 (the kernel before: 0.45, 0.39,
// 0.28, 0.42, 0.41); 1 x 512 (Qwen3-4B decode at batch 1, per layer) 8.0 us per launch in a graph
// (before: 40). bench/attention_notes.md has the versions tried and what missed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "kernels/attention.h"
#include "kernels/cuda/attention_tile.cuh"
#include "runtime/cuda/check.h"
#include "runtime/dtype.h"

namespace sqlrl {
namespace attn {

constexpr int kPagedWarps = 4, kPagedThreads = kPagedWarps * 32;
constexpr int kPagedTile = static_cast<int>(kPagedTileTokens);  // keys per stage: 16 per warp
constexpr int kPagedRows = 16;                                    // query heads per block (the M of the MMA)
constexpr int kPagedStages = 3;
constexpr int kMaxDevices = 64;
constexpr int kPagedMaxSplit = static_cast<int>(kPagedMaxSplitTokens);
static_assert(kPagedTile == 16 * kPagedWarps, "each warp takes 16 keys of a tile");

template <int D>
struct PagedSmem {
  static constexpr int kLd = D + kPad;                                   // bf16 per tile row
  static constexpr int kQBytes = kPagedRows * kLd * 2;                   // Q rows
  static constexpr int kStageBytes = 2 * kPagedTile * kLd * 2;           // K tile then V tile
  static constexpr int kAccLd = D + 4;                                   // fp32 row of the warp merge
  static constexpr int kMergeBytes = kPagedWarps * kPagedRows * (kAccLd + 2) * 4;  // O rows, then m and l
  static_assert(kMergeBytes <= kStageBytes, "the warp merge reuses the first pipeline stage");
  // Q, then the cache slots of the longest split's keys (a 16-byte multiple), then the stages.
  static constexpr int slot_ints(int longest) { return (longest + 3) / 4 * 4; }
  static constexpr int bytes(int stages, int longest) { return kQBytes + 4 * slot_ints(longest) + stages * kStageBytes; }
};

// workspace: part_out [N, H, max_splits, D] fp32 then part_lse [N, H, max_splits] fp32 (log2 domain).
template <int D>
__global__ void __launch_bounds__(kPagedThreads, 4) paged_attention_kernel(
    uint16_t* __restrict__ out, float* __restrict__ part_out, float* __restrict__ part_lse,
    const uint16_t* __restrict__ q, const uint16_t* __restrict__ k_cache, const uint16_t* __restrict__ v_cache,
    const int32_t* __restrict__ block_table, const int32_t* __restrict__ positions, int max_blocks, int block_size,
    int H, int KVH, int max_context, int split_tokens, int slot_ints, float scale_log2) {
  using Smem = PagedSmem<D>;
  constexpr int LD = Smem::kLd, kChunks = D / 8, kRowsPerPass = kPagedThreads / kChunks;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sQ = smem;
  int32_t* sSlot = reinterpret_cast<int32_t*>(smem + Smem::kQBytes / 2);
  uint16_t* sKV = smem + Smem::kQBytes / 2 + 2 * slot_ints;  // stage s: K at s * kStageBytes, V after it

  // The kv heads of one split are adjacent in launch order, so blocks running together read all of
  // a key's heads (one contiguous 2 KB row of the cache at Qwen3-4B's 8 x 128), not scattered
  // parts of many rows (measured, one 32k query: 0.537 -> 0.570 of the copy rate).
  const int split = blockIdx.y, query = blockIdx.z, tid = threadIdx.x;
  const int group = H / KVH, chunks = (group + kPagedRows - 1) / kPagedRows;
  const int kvh = blockIdx.x / chunks, h0 = kvh * group + (blockIdx.x % chunks) * kPagedRows;
  const int rows = min(kPagedRows, kvh * group + group - h0);
  const int context = positions[query] + 1;
  const int size = static_cast<int>(paged_split_tokens(context, split_tokens));
  const int num_splits = context > 0 ? (context + size - 1) / size : 0;
  if (context <= 0 || context > max_context || num_splits > static_cast<int>(gridDim.y)) {
    // A padding row reads nothing and gets zeros. A context past the max_context the grid was
    // sized for gets NaN, not attention over a context silently cut short.
    const uint16_t fill = context <= 0 ? uint16_t{0} : uint16_t{0x7fc0};
    for (int idx = tid; split == 0 && idx < rows * D; idx += kPagedThreads)
      out[(static_cast<int64_t>(query) * H + h0 + idx / D) * D + idx % D] = fill;
    return;
  }
  if (split >= num_splits) return;
  const int t0 = split * size, t1 = min(context, t0 + size);
  const int num_tiles = (t1 - t0 + kPagedTile - 1) / kPagedTile;

  // Q rows of the chunk (zeros past the group: their scores are 0, finite, and never written).
  for (int c = tid; c < kPagedRows * kChunks; c += kPagedThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = r < rows;
    cp_async16(sQ + r * LD + col, valid ? q + (static_cast<int64_t>(query) * H + h0 + r) * D + col : q, valid);
  }
  // The cache slot (block * block_size + offset) of every key of the split, looked up once.
  const int32_t* table = block_table + static_cast<int64_t>(query) * max_blocks;
  for (int t = t0 + tid; t < t1; t += kPagedThreads) sSlot[t - t0] = table[t / block_size] * block_size + t % block_size;
  __syncthreads();

  // Tile i of the split into stage i % kPagedStages; keys past the split are zero-filled (a zero
  // key gives a finite score that the mask replaces; a zero value times P = 0 adds nothing).
  // Every call commits a group, empty past the last tile, so the wait counts stay uniform.
  const int col = (tid % kChunks) * 8;
  auto load_tile = [&](int i) {
    if (i < num_tiles) {
      uint16_t* sK = sKV + (i % kPagedStages) * (Smem::kStageBytes / 2);
      uint16_t* sV = sK + kPagedTile * LD;
      const int base = t0 + i * kPagedTile;
#pragma unroll
      for (int pass = 0; pass < kPagedTile / kRowsPerPass; ++pass) {
        const int r = tid / kChunks + pass * kRowsPerPass, tok = base + r;
        const bool valid = tok < t1;
        const int64_t off = valid ? (static_cast<int64_t>(sSlot[tok - t0]) * KVH + kvh) * D + col : 0;
        cp_async16(sK + r * LD + col, k_cache + off, valid);
        cp_async16(sV + r * LD + col, v_cache + off, valid);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < kPagedStages - 1; ++i) load_tile(i);  // the first group also carries Q

  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  // Rows g ("lo") and g + 8 ("hi") of this lane: running max (log2 domain) and this lane's share
  // of the running sum (its 4 keys of each 16; the quad's shares are added at the end).
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;

  // Tile i + kPagedStages - 1 goes into the stage of tile i - 1, free once every warp is done with
  // it (the first barrier), and is issued before waiting for tile i: while a warp waits,
  // kPagedStages tiles are in flight, not kPagedStages - 1 (at the cost of a second barrier).
  for (int i = 0; i < num_tiles; ++i) {
    if (i > 0) __syncthreads();
    load_tile(i + kPagedStages - 1);
    cp_async_wait<kPagedStages - 1>();  // tile i (and Q with tile 0) has landed for this thread
    __syncthreads();                    // ... for every thread
    const int key0 = t0 + i * kPagedTile + warp * 16;  // this warp's first key in the tile
    if (key0 >= t1) continue;                          // warp-uniform: the split ended before
    const uint16_t* sK = sKV + (i % kPagedStages) * (Smem::kStageBytes / 2) + warp * 16 * LD;
    const uint16_t* sV = sK + kPagedTile * LD;

    // S (16 heads x 16 keys) = Q K^T: s[j] holds keys 8j..8j+7 (C fragment: rows g / g + 8,
    // keys 2t, 2t + 1).
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      // Q's fragment is read again each tile (one ldmatrix) rather than held: 32 registers fewer,
      // 4 resident blocks instead of 3 where shared memory allows.
      uint32_t a[4], b[4];
      load_a<LD>(a, sQ, 0, kc * 16, lane);
      load_b_nk<LD>(b, sK, 0, kc * 16, lane);
      mma_16816(s[0], a, b[0], b[1]);
      mma_16816(s[1], a, b[2], b[3]);
    }
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool valid = key0 + 8 * j + 2 * t + (e & 1) < t1;
        s[j][e] = valid ? s[j][e] * scale_log2 : -INFINITY;
      }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      mx_lo = fmaxf(mx_lo, fmaxf(s[j][0], s[j][1]));
      mx_hi = fmaxf(mx_hi, fmaxf(s[j][2], s[j][3]));
    }
    // The quad (t = 0..3) holds one row's 16 keys: two xor levels give its max.
    mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 1));
    mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 2));
    mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 1));
    mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 2));
    // key0 < t1, so every row has a finite score here: the new max is finite, and the first
    // rescale is exp2(-inf) = 0 against l = 0, O = 0.
    const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
    const float corr_lo = exp2f(m_lo - mn_lo), corr_hi = exp2f(m_hi - mn_hi);
    m_lo = mn_lo;
    m_hi = mn_hi;
    float p[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      p[j][0] = exp2f(s[j][0] - mn_lo);
      p[j][1] = exp2f(s[j][1] - mn_lo);
      p[j][2] = exp2f(s[j][2] - mn_hi);
      p[j][3] = exp2f(s[j][3] - mn_hi);
    }
    l_lo = l_lo * corr_lo + ((p[0][0] + p[0][1]) + (p[1][0] + p[1][1]));
    l_hi = l_hi * corr_hi + ((p[0][2] + p[0][3]) + (p[1][2] + p[1][3]));
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      acc[n][0] *= corr_lo;
      acc[n][1] *= corr_lo;
      acc[n][2] *= corr_hi;
      acc[n][3] *= corr_hi;
    }
    // P as the A fragment of a 16-key chunk (a0: row g keys 2t.., a1: row g + 8, a2 / a3: keys 8 + 2t..).
    const uint32_t pa[4] = {pack_bf16(p[0][0], p[0][1]), pack_bf16(p[0][2], p[0][3]), pack_bf16(p[1][0], p[1][1]),
                            pack_bf16(p[1][2], p[1][3])};
#pragma unroll
    for (int n2 = 0; n2 < D / 16; ++n2) {
      uint32_t b[4];
      load_b_kn<LD>(b, sV, 0, n2 * 16, lane);
      mma_16816(acc[2 * n2], pa, b[0], b[1]);
      mma_16816(acc[2 * n2 + 1], pa, b[2], b[3]);
    }
  }

  // Merge the 4 warps (each saw its own keys of every tile) in warp order, through the first
  // pipeline stage: nothing is in flight any more (the groups past the last tile are empty).
  cp_async_wait<0>();
  __syncthreads();
  l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
  l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
  l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
  l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
  float* sAcc = reinterpret_cast<float*>(sKV);  // [warp][16 rows][kAccLd]
  float* sM = sAcc + kPagedWarps * kPagedRows * Smem::kAccLd;
  float* sL = sM + kPagedWarps * kPagedRows;
  {
    float* lo = sAcc + (warp * kPagedRows + g) * Smem::kAccLd;
    float* hi = lo + 8 * Smem::kAccLd;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<float2*>(lo + n * 8 + 2 * t) = float2{acc[n][0], acc[n][1]};
      *reinterpret_cast<float2*>(hi + n * 8 + 2 * t) = float2{acc[n][2], acc[n][3]};
    }
    if (t == 0) {
      sM[warp * kPagedRows + g] = m_lo;
      sM[warp * kPagedRows + g + 8] = m_hi;
      sL[warp * kPagedRows + g] = l_lo;
      sL[warp * kPagedRows + g + 8] = l_hi;
    }
  }
  __syncthreads();
  const bool direct = num_splits == 1;
  for (int idx = tid; idx < rows * D; idx += kPagedThreads) {
    const int r = idx / D, d = idx % D;
    float big = -INFINITY;
#pragma unroll
    for (int w = 0; w < kPagedWarps; ++w) big = fmaxf(big, sM[w * kPagedRows + r]);
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < kPagedWarps; ++w) {
      const float e = exp2f(sM[w * kPagedRows + r] - big);  // a warp that saw no key: m = -inf, weight 0
      sum += e * sL[w * kPagedRows + r];
      o += e * sAcc[(w * kPagedRows + r) * Smem::kAccLd + d];
    }
    const int64_t row = static_cast<int64_t>(query) * H + h0 + r;
    if (direct) {
      out[row * D + d] = f32_to_bf16_bits(o / sum);
    } else {
      const int64_t part = row * gridDim.y + split;
      part_out[part * D + d] = o / sum;
      if (d == 0) part_lse[part] = big + log2f(sum);
    }
  }
}

// One warp per (query, head) whose context took more than one split: the splits' outputs
// weighted by exp2(lse - max), summed in split order (the same order for any batch). A version
// with lane-parallel max and 8 splits' loads issued at once measured the same (H200, up to 64
// splits): the merge is not on the critical path, so the plain loop stays.
template <int D>
__global__ void __launch_bounds__(kPagedThreads) paged_attention_combine_kernel(
    uint16_t* __restrict__ out, const float* __restrict__ part_out, const float* __restrict__ part_lse,
    const int32_t* __restrict__ positions, int64_t num_rows, int H, int max_splits, int max_context,
    int split_tokens) {
  constexpr int kPer = D / 32;  // columns per lane: 4 (D 128) or 2 (D 64)
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kPagedWarps + threadIdx.x / 32;
  if (row >= num_rows) return;
  const int context = positions[row / H] + 1;
  if (context <= 0 || context > max_context) return;  // written by the first kernel
  const int num_splits = static_cast<int>(paged_num_splits(context, split_tokens));
  if (num_splits <= 1 || num_splits > max_splits) return;
  const float* lse = part_lse + row * max_splits;
  const float* po = part_out + row * max_splits * D + lane * kPer;
  float big = -INFINITY;
  for (int s = 0; s < num_splits; ++s) big = fmaxf(big, lse[s]);
  float sum = 0.0f, o[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) o[i] = 0.0f;
#pragma unroll 4
  for (int s = 0; s < num_splits; ++s) {
    const float w = exp2f(lse[s] - big);
    float x[kPer];
    if constexpr (kPer == 4) {
      *reinterpret_cast<float4*>(x) = *reinterpret_cast<const float4*>(po + static_cast<int64_t>(s) * D);
    } else {
      *reinterpret_cast<float2*>(x) = *reinterpret_cast<const float2*>(po + static_cast<int64_t>(s) * D);
    }
    sum += w;
#pragma unroll
    for (int i = 0; i < kPer; ++i) o[i] += w * x[i];
  }
  uint16_t* dst = out + row * D + lane * kPer;
#pragma unroll
  for (int i = 0; i < kPer; ++i) dst[i] = f32_to_bf16_bits(o[i] / sum);
}

template <int D>
void launch_paged(uint16_t* out, const uint16_t* q, const uint16_t* k_cache, const uint16_t* v_cache,
                  const PagedQueries& queries, AttentionShape shape, int max_context, int max_splits,
                  int split_tokens, float* part_out, float* part_lse, cudaStream_t stream, int device) {
  const int H = static_cast<int>(shape.heads), KVH = static_cast<int>(shape.kv_heads);
  const int chunks = static_cast<int>((H / KVH + kPagedRows - 1) / kPagedRows);
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(D));
  // Only the stages the longest split can fill (split sizes grow with the context): one-tile
  // splits leave room for more resident blocks.
  const int longest = static_cast<int>(paged_split_tokens(max_context, split_tokens));
  const int stages = std::min(kPagedStages, (longest + kPagedTile - 1) / kPagedTile);
  const int smem = PagedSmem<D>::bytes(stages, longest);
  // The shared-memory limit is raised once per device: the call costs host time on every decode
  // step, and a one-query launch's whole GPU time is a few microseconds.
  static std::once_flag raised[kMaxDevices];
  check(device >= 0 && device < kMaxDevices, "paged_attention_cuda: device ", device, " out of range");
  std::call_once(raised[device], [] {
    CUDA_CHECK(allow_smem(paged_attention_kernel<D>, PagedSmem<D>::bytes(kPagedStages, kPagedMaxSplit)));
  });
  dim3 grid(static_cast<unsigned>(KVH * chunks), static_cast<unsigned>(max_splits),
            static_cast<unsigned>(queries.num_queries));
  paged_attention_kernel<D><<<grid, kPagedThreads, smem, stream>>>(
      out, part_out, part_lse, q, k_cache, v_cache, queries.block_table, queries.positions,
      static_cast<int>(queries.max_blocks), static_cast<int>(queries.block_size), H, KVH, max_context, split_tokens,
      PagedSmem<D>::slot_ints(longest), scale_log2);
  CUDA_CHECK_LAUNCH();
  if (max_splits > 1) {
    const int64_t rows = queries.num_queries * H;
    const unsigned blocks = static_cast<unsigned>((rows + kPagedWarps - 1) / kPagedWarps);
    paged_attention_combine_kernel<D><<<blocks, kPagedThreads, 0, stream>>>(
        out, part_out, part_lse, queries.positions, rows, H, max_splits, max_context, split_tokens);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace attn

size_t paged_attention_workspace_bytes(int64_t num_queries, AttentionShape shape, int64_t max_context,
                                       int64_t split_tokens) {
  check(split_tokens > 0, "paged_attention_cuda: split_tokens ", split_tokens, " must be positive");
  const int64_t splits = paged_max_splits(max_context, split_tokens);
  if (splits <= 1) return 0;  // every context fits one split: written directly
  return static_cast<size_t>(num_queries * shape.heads * splits * (shape.head_dim + 1)) * sizeof(float);
}

void paged_attention_cuda(uint16_t* out, const uint16_t* q, const uint16_t* k_cache, const uint16_t* v_cache,
                          const PagedQueries& queries, AttentionShape shape, int64_t max_context, void* workspace,
                          size_t workspace_bytes, int64_t split_tokens, const CudaStream& stream) {
  const char* op = "paged_attention_cuda";
  check(shape.heads > 0 && shape.kv_heads > 0 && shape.heads % shape.kv_heads == 0, op, ": heads ", shape.heads,
        " must be a positive multiple of kv_heads ", shape.kv_heads);
  check(shape.head_dim == 64 || shape.head_dim == 128, op, ": head_dim ", shape.head_dim,
        " is not supported (64 or 128)");
  check(queries.block_size > 0 && queries.max_blocks > 0, op, ": block_size ", queries.block_size, " and max_blocks ",
        queries.max_blocks, " must be positive");
  check(max_context >= 1 && max_context <= queries.max_blocks * queries.block_size, op, ": max_context ", max_context,
        " must lie in [1, max_blocks * block_size = ", queries.max_blocks * queries.block_size, "]");
  check(max_context < (int64_t{1} << 30), op, ": max_context ", max_context, " out of range");
  check(split_tokens > 0 && split_tokens < (int64_t{1} << 30), op, ": split_tokens ", split_tokens, " out of range");
  check(queries.num_queries >= 0 && queries.num_queries <= 65535, op, ": num_queries ", queries.num_queries,
        " must be <= 65535 (grid dimension)");
  size_t need = paged_attention_workspace_bytes(queries.num_queries, shape, max_context, split_tokens);
  check(workspace_bytes >= need && (need == 0 || workspace != nullptr), op, ": workspace of ", workspace_bytes,
        " bytes, need ", need);
  if (queries.num_queries == 0) return;
  CUDA_CHECK(cudaSetDevice(stream.device));
  const int max_splits = static_cast<int>(paged_max_splits(max_context, split_tokens));
  check(max_splits <= 65535, op, ": max_context ", max_context, " at split_tokens ", split_tokens, " needs ",
        max_splits, " splits, more than a grid dimension holds (65535)");
  float* part_out = static_cast<float*>(workspace);
  float* part_lse =
      part_out == nullptr ? nullptr : part_out + queries.num_queries * shape.heads * max_splits * shape.head_dim;
  auto s = static_cast<cudaStream_t>(stream.handle);
  const int mc = static_cast<int>(max_context), st = static_cast<int>(split_tokens);
  if (shape.head_dim == 64)
    attn::launch_paged<64>(out, q, k_cache, v_cache, queries, shape, mc, max_splits, st, part_out, part_lse, s,
                           stream.device);
  else
    attn::launch_paged<128>(out, q, k_cache, v_cache, queries, shape, mc, max_splits, st, part_out, part_lse, s,
                           stream.device);
}

}  // namespace sqlrl
