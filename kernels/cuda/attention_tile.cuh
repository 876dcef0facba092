// Building blocks shared by the flash-attention kernels: bf16 tiles in shared memory, moved
// there with cp.async and read into tensor-core fragments with ldmatrix, multiplied with
// mma.sync m16n8k16 (bf16 in, fp32 accumulate; sm_80 and later).
//
// Fragment layouts of m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16"), with
// g = lane / 4 and t = lane % 4:
//   A 16x16: a0 = (row g, cols 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B 16x8:  b0 = (k 2t..2t+1, col g), b1 = (k 2t+8.., col g)
//   C 16x8:  c0,c1 = (row g, cols 2t, 2t+1), c2,c3 = (row g+8, cols 2t, 2t+1)
// A C fragment pair (two n-tiles of 8 columns) is therefore exactly an A fragment of a 16-wide
// k-chunk once packed to bf16 (a_from_c): P = softmax(S) feeds P·V without leaving registers.
#pragma once
#include <cstdint>

#include "kernels/cuda/ptx.cuh"

namespace sqlrl::attn {

// Each tile row is padded by 8 bf16 (16 bytes): a row is then 4 banks further on than the one
// above, so the 8 row addresses of one ldmatrix phase cover all 32 banks once.
constexpr int kPad = 8;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Rows [0, ROWS) of a tile of D columns from global rows g + r * stride; rows >= valid_rows
// become zeros (keys past a sequence's end must be finite: P = 0 times garbage could be NaN).
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_tile(uint16_t* tile, const uint16_t* g, int64_t stride, int valid_rows) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  for (int c = threadIdx.x; c < ROWS * kChunks; c += THREADS) {
    int r = c / kChunks, col = (c % kChunks) * 8;
    bool valid = r < valid_rows;
    cp_async16(tile + r * (D + kPad) + col, valid ? g + r * stride + col : g, valid);
  }
}

// A key or value tile of a sequence whose keys are `prefix` rows of another sequence (a shared
// prefix, starting `shift` rows from `own`; negative when it comes first) followed by its own:
// tile row r holds key r0 + r; keys at or past `end` are zero-filled. prefix 0 is
// load_tile(own + r0 * stride, ..., end - r0). One base pointer and a row shift rather than two
// pointers: the forward kernel has no registers to spare.
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_kv_tile(uint16_t* tile, const uint16_t* own, int64_t stride, int prefix,
                                             int shift, int r0, int end) {
  constexpr int kChunks = D / 8;
  for (int c = threadIdx.x; c < ROWS * kChunks; c += THREADS) {
    int r = c / kChunks, col = (c % kChunks) * 8, key = r0 + r;
    bool valid = key < end;
    const int64_t row = key < prefix ? key + shift : key - prefix;
    cp_async16(tile + r * (D + kPad) + col, valid ? own + row * stride + col : own, valid);
  }
}

// Stores rows [0, rows) of a tile (already bf16 in shared memory) to global, 16 bytes a thread.
// Called by one warp for its own rows.
template <int D>
__device__ __forceinline__ void store_rows_warp(uint16_t* g, int64_t stride, const uint16_t* tile, int rows,
                                                int lane) {
  constexpr int kChunks = D / 8;
  for (int c = lane; c < rows * kChunks; c += 32) {
    int r = c / kChunks, col = (c % kChunks) * 8;
    *reinterpret_cast<uint4*>(g + r * stride + col) = *reinterpret_cast<const uint4*>(tile + r * (D + kPad) + col);
  }
}

// A fragment of rows r0..r0+15, cols k0..k0+15 of a row-major tile with leading dim LD.
// ldmatrix matrices 0..3 = (rows +0, cols +0), (+8, +0), (+0, +8), (+8, +8) = a0..a3; lanes
// 8i..8i+7 give the row addresses of matrix i.
template <int LD>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* tile, int r0, int k0, int lane) {
  int r = r0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  int c = k0 + (lane >> 4) * 8;
  ldmatrix_x4(a, tile + r * LD + c);
}

// B fragments of two n-tiles (n0..n0+7 -> b[0], b[1]; n0+8..n0+15 -> b[2], b[3]) over k0..k0+15,
// from a tile stored [n][k] (keys in S = Q K^T): matrices (n +0, k +0), (+0, +8), (+8, +0), (+8, +8).
template <int LD>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const uint16_t* tile, int n0, int k0, int lane) {
  int r = n0 + (lane & 7) + (lane >> 4) * 8;
  int c = k0 + ((lane >> 3) & 1) * 8;
  ldmatrix_x4(b, tile + r * LD + c);
}

// The same two n-tiles from a tile stored [k][n] (values in O = P V): the transposing ldmatrix
// hands thread (g, t) elements (k 2t, 2t+1; n g) of each 8x8 matrix, i.e. b0/b1 directly.
// Matrices (k +0, n +0), (k +8, n +0), (k +0, n +8), (k +8, n +8).
template <int LD>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const uint16_t* tile, int k0, int n0, int lane) {
  int r = k0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  int c = n0 + (lane >> 4) * 8;
  ldmatrix_x4_trans(b, tile + r * LD + c);
}

template <int M, int N>
__device__ __forceinline__ void zero(float (&acc)[M][N][4]) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int n = 0; n < N; ++n) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.0f;
}

// acc[m][16 x N] += A(rows r0 + 16 m .., 16 * KC columns of a_tile) * B, B stored [n][k] in
// b_tile: S = Q K^T style products over the full head dim (KC = D / 16). A warp covering M
// row tiles reuses each B fragment M times (shared-memory reads per MMA fall as 1/M).
template <int LD, int M, int N, int KC>
__device__ __forceinline__ void mma_a_smem_b_nk(float (&acc)[M][N / 8][4], const uint16_t* a_tile, int r0,
                                                const uint16_t* b_tile, int lane) {
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) {
    uint32_t a[M][4];
#pragma unroll
    for (int m = 0; m < M; ++m) load_a<LD>(a[m], a_tile, r0 + 16 * m, kc * 16, lane);
#pragma unroll
    for (int n2 = 0; n2 < N / 16; ++n2) {
      uint32_t b[4];
      load_b_nk<LD>(b, b_tile, n2 * 16, kc * 16, lane);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        mma_16816(acc[m][2 * n2], a[m], b[0], b[1]);
        mma_16816(acc[m][2 * n2 + 1], a[m], b[2], b[3]);
      }
    }
  }
}

// acc[m][16 x N] += P[m](16 x K, held as C fragments p[m][K / 8][4]) * B, B stored [k][n] in
// b_tile (P V, P^T dO, dS K ...).
template <int LD, int M, int N, int K>
__device__ __forceinline__ void mma_a_regs_b_kn(float (&acc)[M][N / 8][4], const float (&p)[M][K / 8][4],
                                                const uint16_t* b_tile, int lane) {
#pragma unroll
  for (int kc = 0; kc < K / 16; ++kc) {
    uint32_t a[M][4];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      a[m][0] = pack_bf16(p[m][2 * kc][0], p[m][2 * kc][1]);
      a[m][1] = pack_bf16(p[m][2 * kc][2], p[m][2 * kc][3]);
      a[m][2] = pack_bf16(p[m][2 * kc + 1][0], p[m][2 * kc + 1][1]);
      a[m][3] = pack_bf16(p[m][2 * kc + 1][2], p[m][2 * kc + 1][3]);
    }
#pragma unroll
    for (int n2 = 0; n2 < N / 16; ++n2) {
      uint32_t b[4];
      load_b_kn<LD>(b, b_tile, kc * 16, n2 * 16, lane);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        mma_16816(acc[m][2 * n2], a[m], b[0], b[1]);
        mma_16816(acc[m][2 * n2 + 1], a[m], b[2], b[3]);
      }
    }
  }
}

// Writes a warp's 16 x N fp32 accumulator as bf16 into rows r0.. of a tile, rows g scaled by
// scale_lo and rows g + 8 by scale_hi (1 / l of each row in the forward).
template <int LD, int N>
__device__ __forceinline__ void acc_to_tile(uint16_t* tile, int r0, const float (&acc)[N / 8][4], float scale_lo,
                                            float scale_hi, int lane) {
  int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int n = 0; n < N / 8; ++n) {
    int col = n * 8 + 2 * t;
    *reinterpret_cast<uint32_t*>(tile + (r0 + g) * LD + col) = pack_bf16(acc[n][0] * scale_lo, acc[n][1] * scale_lo);
    *reinterpret_cast<uint32_t*>(tile + (r0 + g + 8) * LD + col) = pack_bf16(acc[n][2] * scale_hi, acc[n][3] * scale_hi);
  }
}

// Rows [from, to) of a [rows, stride] bf16 tensor (D columns each) become NaN. For sequences
// longer than the max_seqlen the grid was sized for: the rows no block covers are marked
// instead of left unwritten (the launcher cannot see device-side cu_seqlens).
template <int D>
__device__ __forceinline__ void nan_rows(uint16_t* base, int64_t stride, int from, int to) {
  for (int64_t i = threadIdx.x; i < static_cast<int64_t>(to - from) * D; i += blockDim.x)
    base[(from + i / D) * stride + i % D] = 0x7fc0;
}

// Shared-memory limit above 48 KB must be granted per kernel before its first launch.
template <typename Kernel>
inline cudaError_t allow_smem(Kernel kernel, int bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

}  // namespace sqlrl::attn
