// Paged decode attention on CUDA: one query token per sequence against its block table.
//
// Decode is memory-bound (each cached key and value is read once per step and used for only
// `group` dot products), so the kernel is built around 16-byte loads kept in flight:
//  * grid (split, kv head x head chunk, query). A block serves one kv head and up to 8 of its
//    q heads (GQA: the group's keys and values are read once), over one split of
//    split_tokens cache positions.
//  * A token's D-element row is read by D / 8 consecutive lanes (16 bytes each): 16 lanes for
//    D = 128, so a warp covers 2 tokens per step, and each lane loads kUnroll = 4 tokens' K and V
//    before using any. The lanes of a token reduce their partial dot products with shuffles and
//    then hold identical softmax state (running max m, sum l) plus 8 output columns per head.
//  * Partial states of the block's 4 warps x token slots are merged in shared memory. A context
//    that fits one split is normalised and written out directly; otherwise each split writes
//    (its normalised output, its log2-sum-exp) to the workspace and a second kernel merges them.
// Two numbers, 64 sequences x 4096 context, 8 kv heads, D 128: 64 * 4096 * 8 * 128 * 2 * 2 = 1.07 GB
// of K and V, 0.32 ms at 3.35 TB/s; 64 * 4096 * 32 * 128 * 4 = 4.3 GFLOP is nothing beside it.
// ptxas (nvcc 13.0, sm_90a): 157 registers, no spills, 37,376 bytes static shared memory
// (D 128; q of 8 heads, the slots' partial states): 3 blocks per SM.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels/cuda/attention_tile.cuh"
#include "runtime/cuda/check.h"
#include "runtime/dtype.h"

namespace sqlrl {
namespace attn {

constexpr int kPagedWarps = 4, kPagedThreads = kPagedWarps * 32, kMaxHeads = 8, kUnroll = 4;

template <int D>
struct PagedCfg {
  static constexpr int kLanesPerToken = D / 8;
  static constexpr int kTokensPerWarp = 32 / kLanesPerToken;
  static constexpr int kSlots = kPagedWarps * kTokensPerWarp;  // independent softmax states per block
};

__device__ __forceinline__ void bf16x8_to_float(const uint4& raw, float (&x)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 f = __bfloat1622float2(h[i]);
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}

// workspace: part_out [N, H, max_splits, D] fp32 then part_lse [N, H, max_splits] fp32.
template <int D>
__global__ void __launch_bounds__(kPagedThreads) paged_attention_kernel(
    uint16_t* __restrict__ out, float* __restrict__ part_out, float* __restrict__ part_lse,
    const uint16_t* __restrict__ q, const uint16_t* __restrict__ k_cache, const uint16_t* __restrict__ v_cache,
    const int32_t* __restrict__ block_table, const int32_t* __restrict__ positions, int max_blocks, int block_size,
    int H, int KVH, int split_tokens, float scale_log2) {
  using Cfg = PagedCfg<D>;
  __shared__ float s_m[Cfg::kSlots][kMaxHeads], s_l[Cfg::kSlots][kMaxHeads];
  __shared__ float s_acc[Cfg::kSlots][kMaxHeads][D];
  __shared__ __align__(16) float s_q[kMaxHeads][D];  // q of the block's heads, times scale log2(e)

  const int split = blockIdx.x, query = blockIdx.z;
  const int group = H / KVH, chunks = (group + kMaxHeads - 1) / kMaxHeads;
  const int kvh = blockIdx.y / chunks, h0 = kvh * group + (blockIdx.y % chunks) * kMaxHeads;
  const int heads = min(kMaxHeads, kvh * group + group - h0);
  const int context = positions[query] + 1;
  const int num_splits = (context + split_tokens - 1) / split_tokens;
  if (num_splits > static_cast<int>(gridDim.x)) {
    // positions[query] + 1 exceeds the max_context the grid was sized for: NaN, not a result
    // silently cut short.
    for (int idx = threadIdx.x; split == 0 && idx < heads * D; idx += kPagedThreads)
      out[(static_cast<int64_t>(query) * H + h0 + idx / D) * D + idx % D] = 0x7fc0;
    return;
  }
  if (split >= num_splits) return;
  const int t_begin = split * split_tokens, t_end = min(context, t_begin + split_tokens);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slot_in_warp = lane / Cfg::kLanesPerToken, sub = lane % Cfg::kLanesPerToken;
  const int slot = warp * Cfg::kTokensPerWarp + slot_in_warp;
  const int col = sub * 8;

  // q lives in shared memory, not registers: 8 heads x 8 columns would take 64 registers per
  // thread and cost resident blocks; each lane reads its 8 columns once per head per step.
  for (int idx = threadIdx.x; idx < heads * D; idx += kPagedThreads)
    s_q[idx / D][idx % D] =
        bf16_bits_to_f32(q[(static_cast<int64_t>(query) * H + h0 + idx / D) * D + idx % D]) * scale_log2;
  __syncthreads();
  float m[kMaxHeads], l[kMaxHeads], acc[kMaxHeads][8];
#pragma unroll
  for (int hh = 0; hh < kMaxHeads; ++hh) {
    m[hh] = -INFINITY;
    l[hh] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[hh][i] = 0.0f;
  }

  const int32_t* table = block_table + static_cast<int64_t>(query) * max_blocks;
  constexpr int kStep = Cfg::kSlots * kUnroll;  // tokens the block covers per step
  for (int base = t_begin; base < t_end; base += kStep) {
    uint4 kraw[kUnroll], vraw[kUnroll];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      int tok = base + u * Cfg::kSlots + slot;
      valid[u] = tok < t_end;
      kraw[u] = vraw[u] = make_uint4(0, 0, 0, 0);
      if (valid[u]) {
        int64_t phys = table[tok / block_size];
        int64_t off = ((phys * block_size + tok % block_size) * KVH + kvh) * D + col;
        kraw[u] = *reinterpret_cast<const uint4*>(k_cache + off);
        vraw[u] = *reinterpret_cast<const uint4*>(v_cache + off);
      }
    }
#pragma unroll
    for (int hh = 0; hh < kMaxHeads; ++hh) {
      if (hh >= heads) continue;
      float s[kUnroll], qv[8];
      *reinterpret_cast<float4*>(qv) = *reinterpret_cast<const float4*>(&s_q[hh][col]);
      *reinterpret_cast<float4*>(qv + 4) = *reinterpret_cast<const float4*>(&s_q[hh][col + 4]);
      float step_max = -INFINITY;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float kx[8];
        bf16x8_to_float(kraw[u], kx);
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot += qv[i] * kx[i];
        // The lanes of one token are consecutive and aligned: xor offsets below kLanesPerToken
        // stay inside the token.
#pragma unroll
        for (int off = Cfg::kLanesPerToken / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        s[u] = valid[u] ? dot : -INFINITY;
        step_max = fmaxf(step_max, s[u]);
      }
      float m_new = fmaxf(m[hh], step_max);
      float m_use = m_new == -INFINITY ? 0.0f : m_new;
      float corr = exp2f(m[hh] - m_use);
      m[hh] = m_new;
      l[hh] *= corr;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[hh][i] *= corr;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float p = exp2f(s[u] - m_use);
        l[hh] += p;
        float vx[8];
        bf16x8_to_float(vraw[u], vx);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[hh][i] += p * vx[i];
      }
    }
  }

  // Merge the block's slots: every slot's (m, l, acc) goes to shared memory, then thread
  // (head, column) combines them with weights exp2(m_slot - M).
#pragma unroll
  for (int hh = 0; hh < kMaxHeads; ++hh) {
    if (sub == 0) {
      s_m[slot][hh] = m[hh];
      s_l[slot][hh] = l[hh];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) s_acc[slot][hh][col + i] = acc[hh][i];
  }
  __syncthreads();
  const bool direct = num_splits == 1;
  for (int idx = threadIdx.x; idx < heads * D; idx += kPagedThreads) {
    int hh = idx / D, d = idx % D;
    float big = -INFINITY;
    for (int sl = 0; sl < Cfg::kSlots; ++sl) big = fmaxf(big, s_m[sl][hh]);
    float sum = 0.0f, o = 0.0f;
    for (int sl = 0; sl < Cfg::kSlots; ++sl) {
      float w = exp2f(s_m[sl][hh] - big);  // slots that saw no token: m = -inf, weight 0
      sum += w * s_l[sl][hh];
      o += w * s_acc[sl][hh][d];
    }
    int64_t row = static_cast<int64_t>(query) * H + h0 + hh;
    if (direct) {
      out[row * D + d] = f32_to_bf16_bits(o / sum);
    } else {
      int64_t part = row * gridDim.x + split;
      part_out[part * D + d] = o / sum;
      if (d == 0) part_lse[part] = big + log2f(sum);
    }
  }
}

// One block per (head, query) whose context spans more than one split.
template <int D>
__global__ void paged_attention_reduce_kernel(uint16_t* __restrict__ out, const float* __restrict__ part_out,
                                              const float* __restrict__ part_lse,
                                              const int32_t* __restrict__ positions, int H, int max_splits,
                                              int split_tokens) {
  const int h = blockIdx.x, query = blockIdx.y;
  const int context = positions[query] + 1;
  const int num_splits = (context + split_tokens - 1) / split_tokens;
  if (num_splits <= 1 || num_splits > max_splits) return;  // written by the first kernel
  const int64_t row = static_cast<int64_t>(query) * H + h;
  const float* lse2 = part_lse + row * max_splits;
  float big = -INFINITY;
  for (int s = 0; s < num_splits; ++s) big = fmaxf(big, lse2[s]);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.0f, o = 0.0f;
    for (int s = 0; s < num_splits; ++s) {
      float w = exp2f(lse2[s] - big);
      sum += w;
      o += w * part_out[(row * max_splits + s) * D + d];
    }
    out[row * D + d] = f32_to_bf16_bits(o / sum);
  }
}

template <int D>
void launch_paged(uint16_t* out, const uint16_t* q, const uint16_t* k_cache, const uint16_t* v_cache,
                  const PagedQueries& queries, AttentionShape shape, int max_splits, int split_tokens,
                  float* part_out, float* part_lse, cudaStream_t stream) {
  const int H = static_cast<int>(shape.heads), KVH = static_cast<int>(shape.kv_heads);
  const int chunks = static_cast<int>((H / KVH + kMaxHeads - 1) / kMaxHeads);
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(D));
  dim3 grid(static_cast<unsigned>(max_splits), static_cast<unsigned>(KVH * chunks),
            static_cast<unsigned>(queries.num_queries));
  paged_attention_kernel<D><<<grid, kPagedThreads, 0, stream>>>(
      out, part_out, part_lse, q, k_cache, v_cache, queries.block_table, queries.positions,
      static_cast<int>(queries.max_blocks), static_cast<int>(queries.block_size), H, KVH, split_tokens, scale_log2);
  CUDA_CHECK_LAUNCH();
  if (max_splits > 1) {
    dim3 grid_reduce(static_cast<unsigned>(H), static_cast<unsigned>(queries.num_queries));
    paged_attention_reduce_kernel<D><<<grid_reduce, D, 0, stream>>>(out, part_out, part_lse, queries.positions, H,
                                                                    max_splits, split_tokens);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace attn

size_t paged_attention_workspace_bytes(int64_t num_queries, AttentionShape shape, int64_t max_context,
                                       int64_t split_tokens) {
  check(split_tokens > 0, "paged_attention_cuda: split_tokens ", split_tokens, " must be positive");
  int64_t splits = (max_context + split_tokens - 1) / split_tokens;
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
  check(split_tokens > 0 && split_tokens < (int64_t{1} << 30), op, ": split_tokens ", split_tokens, " out of range");
  check(queries.num_queries >= 0 && queries.num_queries <= 65535, op, ": num_queries ", queries.num_queries,
        " must be <= 65535 (grid dimension)");
  size_t need = paged_attention_workspace_bytes(queries.num_queries, shape, max_context, split_tokens);
  check(workspace_bytes >= need && (need == 0 || workspace != nullptr), op, ": workspace of ", workspace_bytes,
        " bytes, need ", need);
  if (queries.num_queries == 0) return;
  CUDA_CHECK(cudaSetDevice(stream.device));
  const int max_splits = static_cast<int>((max_context + split_tokens - 1) / split_tokens);
  float* part_out = static_cast<float*>(workspace);
  float* part_lse = part_out == nullptr ? nullptr : part_out + queries.num_queries * shape.heads * max_splits * shape.head_dim;
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (shape.head_dim == 64)
    attn::launch_paged<64>(out, q, k_cache, v_cache, queries, shape, max_splits, static_cast<int>(split_tokens),
                           part_out, part_lse, s);
  else
    attn::launch_paged<128>(out, q, k_cache, v_cache, queries, shape, max_splits, static_cast<int>(split_tokens),
                            part_out, part_lse, s);
}

}  // namespace sqlrl
