// Flash attention forward on CUDA (FlashAttention-2 schedule, mma.sync tensor cores, sm_80+).
//
// Tiling: one block of 4 warps per (128-query tile, q head, sequence); the heavy tiles (late in
// a causal sequence) are launched first. Q [128 x D], K and V [64 x D] bf16 tiles live in shared
// memory, rows padded by 16 bytes (conflict-free ldmatrix): (128 + 2 * 64) * (D + 8) * 2 bytes =
// 69,632 bytes for D = 128, 36,864 for D = 64. Each warp owns 32 query rows (two 16-row MMA
// tiles, so each K/V fragment read from shared memory feeds two MMAs) and walks the key tiles
// 0 .. its causal end: S = Q K^T (32 x 64, fp32 in registers), mask, online softmax in fp32 in
// the exp2 domain (running max m and sum l per row, O rescaled when m moves), then O += P V
// with P re-packed from the S accumulators as bf16 A fragments (never stored). K_{j+1} is
// fetched with cp.async while P V of tile j runs, V_{j+1} while S of tile j+1 runs. The
// epilogue divides by l, stages the warp's rows in shared memory (over its Q rows) and writes
// 16-byte rows; lse = (m + log2 l) ln 2 per row. A sequence with a shared prefix of P tokens
// walks P + its own keys (load_kv_tile reads the first P from the prefix's sequence); its query
// i sits at key position P + i. ptxas (nvcc 13.0): 255 registers, no spills
// on sm_90a for D = 128 (8 bytes spilled on sm_80); 2 blocks (8 warps) per SM.
//
// Two numbers (compute and memory floors, docs/ARCHITECTURE.md §7), batch 4 x 16 heads x seq 4096, D 128, causal: 4 * 64 * 4096^2 / 2 *
// 128 = 2.75e11 FLOP, at the H100's 989 TFLOP/s dense bf16 spec 0.28 ms; bytes q, k, v, out
// once = 4 * 16384 * 16 * 128 * 2 = 268 MB, at 3.35 TB/s 0.08 ms. Compute-bound: the floor is the
// tensor-core rate, and mma.sync (not wgmma) reaches roughly two thirds of it on Hopper.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels/cuda/attention_tile.cuh"
#include "runtime/cuda/check.h"

namespace sqlrl {
namespace attn {

// Each warp covers kFwdMTiles tiles of 16 query rows: every K or V fragment read from shared
// memory feeds kFwdMTiles MMAs (the 1-tile version, commit b4137d8, needs one 512-byte ldmatrix
// per 2 MMAs, more shared-memory bandwidth than an SM has for its tensor-core rate).
constexpr int kFwdWarps = 4, kFwdThreads = kFwdWarps * 32, kFwdMTiles = 2;
constexpr int kFwdBr = kFwdWarps * 16 * kFwdMTiles, kFwdBc = 64;

template <int D>
constexpr int fwd_smem_bytes() {
  return (kFwdBr + 2 * kFwdBc) * (D + kPad) * 2;
}

template <int D>
__global__ void __launch_bounds__(kFwdThreads) attention_forward_kernel(uint16_t* __restrict__ out,
                                                                        float* __restrict__ lse,
                                                                        const uint16_t* __restrict__ q,
                                                                        const uint16_t* __restrict__ k,
                                                                        const uint16_t* __restrict__ v,
                                                                        const int32_t* __restrict__ cu_seqlens,
                                                                        const int32_t* __restrict__ prefix_seq,
                                                                        const int32_t* __restrict__ prefix_len, int H,
                                                                        int KVH, float scale_log2) {
  constexpr int LD = D + kPad, M = kFwdMTiles, WR = 16 * M;  // WR: query rows per warp
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sQ = smem;
  uint16_t* sK = sQ + kFwdBr * LD;
  uint16_t* sV = sK + kFwdBc * LD;

  const int q_tile = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, seq = blockIdx.z;
  const int start = cu_seqlens[seq], len = cu_seqlens[seq + 1] - start;
  const int q0 = q_tile * kFwdBr;
  if (q0 >= len) return;
  if (q_tile == 0 && len > static_cast<int>(gridDim.x) * kFwdBr) {  // longer than max_seqlen
    const int covered = gridDim.x * kFwdBr;
    nan_rows<D>(out + (static_cast<int64_t>(start) * H + h) * D, static_cast<int64_t>(H) * D, covered, len);
    for (int i = covered + threadIdx.x; i < len; i += kFwdThreads) lse[static_cast<int64_t>(start + i) * H + h] = NAN;
  }
  const int kvh = h / (H / KVH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int64_t q_stride = static_cast<int64_t>(H) * D, kv_stride = static_cast<int64_t>(KVH) * D;
  const uint16_t* gq = q + (static_cast<int64_t>(start + q0) * H + h) * D;
  const uint16_t* gk = k + (static_cast<int64_t>(start) * KVH + kvh) * D;
  const uint16_t* gv = v + (static_cast<int64_t>(start) * KVH + kvh) * D;
  const int pseq = prefix_seq != nullptr ? prefix_seq[seq] : -1;
  const int P = pseq >= 0 ? prefix_len[seq] : 0;  // keys [0, P) are the prefix's, key P + i is own token i
  const int shift = pseq >= 0 ? cu_seqlens[pseq] - start : 0;  // the prefix's rows, counted from ours
  const int q_rows = min(kFwdBr, len - q0);
  const int num_keys = P + len;
  const int kv_end = P + min(len, q0 + kFwdBr);  // causal: no key past the tile's last query
  const int num_kv_tiles = (kv_end + kFwdBc - 1) / kFwdBc;

  load_tile<kFwdBr, D, kFwdThreads>(sQ, gq, q_stride, q_rows);
  load_kv_tile<kFwdBc, D, kFwdThreads>(sK, gk, kv_stride, P, shift, 0, num_keys);
  cp_async_commit();
  load_kv_tile<kFwdBc, D, kFwdThreads>(sV, gv, kv_stride, P, shift, 0, num_keys);
  cp_async_commit();

  float o[M][D / 8][4];
  zero(o);
  // Row state, index [mt][r]: row r = 0 is g, r = 1 is g + 8 of row tile mt; log2 domain.
  float m[M][2], l[M][2];
#pragma unroll
  for (int mt = 0; mt < M; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
  const int row0 = q0 + warp * WR + g;  // row of element (mt, r): row0 + 16 mt + 8 r
  // Tiles entirely above the diagonal for this warp's rows contribute nothing: skip their MMAs
  // (the loads and barriers are shared by the block and still happen).
  const int warp_last_row = q0 + warp * WR + WR - 1;

  for (int j = 0; j < num_kv_tiles; ++j) {
    const int k0 = j * kFwdBc;
    const bool active = k0 <= P + warp_last_row;
    cp_async_wait<1>();  // Q and K_j have landed (V_j may still be in flight)
    __syncthreads();
    float s[M][kFwdBc / 8][4];
    zero(s);
    if (active) {
      mma_a_smem_b_nk<LD, M, kFwdBc, D / 16>(s, sQ, warp * WR, sK, lane);

      // Scale, causal mask (keys past the end are masked too for every row that is written),
      // then the online softmax update of each row.
#pragma unroll
      for (int mt = 0; mt < M; ++mt) {
        float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < kFwdBc / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            int col = k0 + n * 8 + 2 * t + (e & 1);
            float x = col <= P + row0 + 16 * mt + 8 * (e >> 1) ? s[mt][n][e] * scale_log2 : -INFINITY;
            s[mt][n][e] = x;
            row_max[e >> 1] = fmaxf(row_max[e >> 1], x);
          }
        float corr[2], m_use[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          // The 4 threads of a quad hold the 64 columns of one row between them.
          row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
          row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
          float m_new = fmaxf(m[mt][r], row_max[r]);
          m_use[r] = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing unmasked yet stays at 0
          corr[r] = exp2f(m[mt][r] - m_use[r]);
          m[mt][r] = m_new;
          l[mt][r] *= corr[r];
        }
#pragma unroll
        for (int n = 0; n < kFwdBc / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float p = exp2f(s[mt][n][e] - m_use[e >> 1]);
            s[mt][n][e] = p;
            l[mt][e >> 1] += p;  // per-thread partial; the quad's partials are summed at the end
          }
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          o[mt][n][0] *= corr[0];
          o[mt][n][1] *= corr[0];
          o[mt][n][2] *= corr[1];
          o[mt][n][3] *= corr[1];
        }
      }
    }

    cp_async_wait<0>();  // V_j has landed
    __syncthreads();     // ... and every warp is done reading K_j
    if (j + 1 < num_kv_tiles) {
      load_kv_tile<kFwdBc, D, kFwdThreads>(sK, gk, kv_stride, P, shift, k0 + kFwdBc, num_keys);
      cp_async_commit();
    }
    if (active) mma_a_regs_b_kn<LD, M, D, kFwdBc>(o, s, sV, lane);
    __syncthreads();  // every warp is done reading V_j
    if (j + 1 < num_kv_tiles) {
      load_kv_tile<kFwdBc, D, kFwdThreads>(sV, gv, kv_stride, P, shift, k0 + kFwdBc, num_keys);
      cp_async_commit();
    }
  }

  // Each warp reads only its own rows of sQ, so it may overwrite them after a warp barrier.
  __syncwarp();
#pragma unroll
  for (int mt = 0; mt < M; ++mt) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      inv[r] = 1.0f / sum;
      const int row = row0 + 16 * mt + 8 * r;
      if (t == 0 && row < len) lse[static_cast<int64_t>(start + row) * H + h] = (m[mt][r] + log2f(sum)) * kLn2;
    }
    acc_to_tile<LD, D>(sQ, warp * WR + mt * 16, o[mt], inv[0], inv[1], lane);
  }
  __syncwarp();
  const int rows = min(WR, len - (q0 + warp * WR));
  if (rows > 0)
    store_rows_warp<D>(out + (static_cast<int64_t>(start + q0 + warp * WR) * H + h) * D, q_stride,
                       sQ + warp * WR * LD, rows, lane);
}

template <int D>
void launch_forward(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                    const int32_t* cu_seqlens, int64_t num_seqs, int64_t max_seqlen, AttentionShape shape,
                    const SharedPrefixesCuda& prefixes, cudaStream_t stream) {
  auto kernel = attention_forward_kernel<D>;
  constexpr int smem = fwd_smem_bytes<D>();
  CUDA_CHECK(allow_smem(kernel, smem));
  dim3 grid(static_cast<unsigned>((max_seqlen + kFwdBr - 1) / kFwdBr), static_cast<unsigned>(shape.heads),
            static_cast<unsigned>(num_seqs));
  float scale_log2 = kLog2e / std::sqrt(static_cast<float>(D));
  kernel<<<grid, kFwdThreads, smem, stream>>>(out, lse, q, k, v, cu_seqlens, prefixes.seq, prefixes.len,
                                               static_cast<int>(shape.heads), static_cast<int>(shape.kv_heads),
                                               scale_log2);
  CUDA_CHECK_LAUNCH();
}

}  // namespace attn

void check_cuda_attention_shape(const char* op, AttentionShape shape, int64_t num_seqs, int64_t max_seqlen);

void attention_forward_cuda(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                            const int32_t* cu_seqlens, int64_t num_seqs, int64_t max_seqlen, AttentionShape shape,
                            const CudaStream& stream, const SharedPrefixesCuda& prefixes) {
  check_cuda_attention_shape("attention_forward_cuda", shape, num_seqs, max_seqlen);
  check(prefixes.seq == nullptr || prefixes.len != nullptr, "attention_forward_cuda: shared prefixes without lengths");
  if (num_seqs == 0 || max_seqlen == 0) return;
  CUDA_CHECK(cudaSetDevice(stream.device));
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (shape.head_dim == 64)
    attn::launch_forward<64>(out, lse, q, k, v, cu_seqlens, num_seqs, max_seqlen, shape, prefixes, s);
  else
    attn::launch_forward<128>(out, lse, q, k, v, cu_seqlens, num_seqs, max_seqlen, shape, prefixes, s);
}

// Shared by the forward and backward launchers (defined here, declared where used).
void check_cuda_attention_shape(const char* op, AttentionShape shape, int64_t num_seqs, int64_t max_seqlen) {
  check(shape.heads > 0 && shape.kv_heads > 0 && shape.heads % shape.kv_heads == 0, op, ": heads ", shape.heads,
        " must be a positive multiple of kv_heads ", shape.kv_heads);
  check(shape.head_dim == 64 || shape.head_dim == 128, op, ": head_dim ", shape.head_dim,
        " is not supported (64 or 128)");
  check(shape.heads <= 65535 && num_seqs >= 0 && num_seqs <= 65535, op, ": heads ", shape.heads, " and num_seqs ",
        num_seqs, " must each be <= 65535 (grid dimensions)");
  check(max_seqlen >= 0 && max_seqlen < (int64_t{1} << 31), op, ": max_seqlen ", max_seqlen, " out of range");
}

}  // namespace sqlrl
