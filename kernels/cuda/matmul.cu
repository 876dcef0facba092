// The few-row product of decode steps (kernels/matmul.h matmul_rows_cuda) on tensor cores, in
// two variants (MatmulRowsVariant): `staged` (W and x through shared memory, below) and `direct`
// (W straight from global memory into the mma fragments, described here first).
//
// Two numbers, Qwen3-4B at M = 1: the layer's q/k/v, o, gate/up and down weights are 72 MB of
// bf16 and 2 x 36 M FLOPs per row; at ~4.2 TB/s the weights take 17 us and the arithmetic nothing.
// At M = 64 it is 64 x that arithmetic (4.6 GFLOP per layer, ~10 us on the tensor cores at a
// modest 450 TFLOP/s): still under the bytes. So the kernel is built to stream W at full speed:
//  * A warp owns 16 rows of W (the mma's M dimension) and the batch rows are the mma's N: one
//    mma.m16n8k16 per 8 batch rows per 16 k. Each lane loads W in 16-byte pieces (8 k-values of
//    one row) and uses them directly as A fragments: within a 32-wide k step, k is permuted so that
//    lane (g, c)'s 16 bytes of rows g and g + 8 are exactly the elements its A registers need; x is
//    read with the same permutation for the B fragments (the dot product does not care about the
//    order of k, only that A and B agree). No shared memory, no ldmatrix, no shuffles.
//  * A block is 4 warps (64 rows of W). K is split over blocks so that a short, wide problem (o or
//    down: N = 2560) still fills every SM: matmul_rows_grid picks splits from N, K and the SM
//    count, never from M (batch invariance). Split partials go to a f32 workspace; the last block
//    of a tile to finish (an atomic ticket it resets, so graph replays start from zero) adds them
//    in split order and runs the epilogue.
//  * swiglu: a warp's rows g are 8 gate rows and rows g + 8 the same 8 rows of up, so one lane
//    holds both products of an output and applies silu(gate) * up in registers.
// The k permutation: in k step [k0, k0 + 32), lane (g = lane / 4, c = lane % 4) loads elements
// k0 + 8c .. 8c + 7 of its rows (words w0..w3, two bf16 each). For the step's first mma (logical
// k 0..15) it passes words w0, w1; for the second, w2, w3: lane c's A registers {a0 a1} / {a4 a5}
// (logical k 2c, 2c+1 / 2c+8, 2c+9, PTX ISA "mma.m16n8k16 fragment layouts") then hold physical
// k 8c + 4j + {0,1} / {2,3} for mma j, and its B registers read x at the same physical k. Every
// physical k of the step is used exactly once.
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>

#include "kernels/cuda/attention_tile.cuh"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/cuda/ptx.cuh"
#include "kernels/matmul.h"

namespace sqlrl {
namespace {

constexpr int kWarps = 4, kThreads = kWarps * 32, kRowsPerWarp = 16, kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kStepK = 32, kUnroll = 4, kBlockK = kStepK * kUnroll;
static_assert(kRowsPerBlock == kMatmulRowsBlockRows && kBlockK == kMatmulRowsBlockK,
              "matmul_rows_grid (kernels/matmul_rows.cpp) plans with these");

struct Parts {
  const uint16_t* weight[3];
  const uint16_t* bias[3];
  int64_t end[3];  // cumulative rows: part p holds rows [end[p-1], end[p])
  int count;
};

struct Args {
  void* out;
  int64_t ld_out;
  const uint16_t* x;
  int64_t ld_x;
  int rows;  // M
  int64_t K;
  Parts parts;
  int64_t total_rows;  // rows of all parts
  int64_t split_k;
  int splits;
  float* partial;  // [splits, M, total_rows]
  unsigned* tickets;
};

__device__ __forceinline__ int part_of(const Parts& p, int64_t row) {
  int i = 0;
  while (i + 1 < p.count && row >= p.end[i]) ++i;
  return i;
}
__device__ __forceinline__ int64_t part_begin(const Parts& p, int i) { return i == 0 ? 0 : p.end[i - 1]; }

__device__ __forceinline__ const uint16_t* row_weight(const Parts& p, int64_t row, int64_t total, int64_t K) {
  if (row >= total) return nullptr;
  int i = part_of(p, row);
  return p.weight[i] + (row - part_begin(p, i)) * K;
}
__device__ __forceinline__ float row_bias(const Parts& p, int64_t row) {
  int i = part_of(p, row);
  return p.bias[i] ? bf16_to_f32(p.bias[i][row - part_begin(p, i)]) : 0.0f;
}

__device__ __forceinline__ uint4 load16(const uint16_t* p, bool ok) {
  return ok ? *reinterpret_cast<const uint4*>(p) : make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// The value of output element (m, row) from its f32 dot product(s). For swiglu `row` is the gate
// row (the output column) and `up` the matching product of up; otherwise `up` is unused.
template <MatmulRowsEpilogue E>
__device__ __forceinline__ void finish(const Args& a, int m, int64_t row, float dot, float up) {
  if constexpr (E == MatmulRowsEpilogue::swiglu) {
    uint16_t* out = static_cast<uint16_t*>(a.out) + static_cast<int64_t>(m) * a.ld_out + row;
    *out = f32_to_bf16(silu(dot) * up);
  } else if constexpr (E == MatmulRowsEpilogue::store_f32) {
    static_cast<float*>(a.out)[static_cast<int64_t>(m) * a.ld_out + row] = dot + row_bias(a.parts, row);
  } else {
    uint16_t* out = static_cast<uint16_t*>(a.out) + static_cast<int64_t>(m) * a.ld_out + row;
    float v = dot + row_bias(a.parts, row);
    if constexpr (E == MatmulRowsEpilogue::accumulate) v = bf16_to_f32(*out) + v;
    *out = f32_to_bf16(v);
  }
}

// The A rows a lane's accumulators belong to: smem/warp rows g and g + 8 of warp `warp` in tile
// `tile`, as indices into the parts laid end to end. swiglu: rows g are 8 gate rows and rows g + 8
// the same rows of up (row half + r), so one lane holds both products of an output.
struct LaneRows {
  int64_t lo, hi;
  bool valid_lo, valid_hi;
};
template <bool kSwiglu>
__device__ __forceinline__ LaneRows lane_rows(const Args& a, int64_t tile, int warp, int g) {
  LaneRows r;
  if constexpr (kSwiglu) {
    const int64_t half = a.parts.end[0];
    r.lo = (tile * kWarps + warp) * 8 + g;
    r.hi = half + r.lo;
    r.valid_lo = r.valid_hi = r.lo < half;
  } else {
    r.lo = (tile * kWarps + warp) * kRowsPerWarp + g;
    r.hi = r.lo + 8;
    r.valid_lo = r.lo < a.total_rows;
    r.valid_hi = r.hi < a.total_rows;
  }
  return r;
}

// Writes a block's outputs from the lanes' accumulators: acc[t][e] is (batch row t*8 + 2c +
// (e & 1), A row e < 2 ? lo : hi). With split K the block first leaves its partial sums in the
// workspace and takes a ticket; the tile's last block sums every split in split order (so the
// result does not depend on which block finished last) and writes the outputs.
template <int kTiles, MatmulRowsEpilogue E>
__device__ __forceinline__ void write_outputs(const Args& a, const LaneRows& r, const float (&acc)[kTiles][4],
                                              int64_t tile, int split, int c) {
  constexpr bool kSwiglu = E == MatmulRowsEpilogue::swiglu;
  if (a.splits == 1) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int m = t * 8 + 2 * c + e;
        if (m >= a.rows) continue;
        if constexpr (kSwiglu) {
          if (r.valid_lo) finish<E>(a, m, r.lo, acc[t][e], acc[t][2 + e]);
        } else {
          if (r.valid_lo) finish<E>(a, m, r.lo, acc[t][e], 0.0f);
          if (r.valid_hi) finish<E>(a, m, r.hi, acc[t][2 + e], 0.0f);
        }
      }
    return;
  }
  float* mine = a.partial + static_cast<int64_t>(split) * a.rows * a.total_rows;
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int m = t * 8 + 2 * c + e;
      if (m >= a.rows) continue;
      if (r.valid_lo) mine[static_cast<int64_t>(m) * a.total_rows + r.lo] = acc[t][e];
      if (r.valid_hi) mine[static_cast<int64_t>(m) * a.total_rows + r.hi] = acc[t][2 + e];
    }
  __threadfence();  // this block's partials are visible device-wide before its ticket is
  __syncthreads();
  __shared__ int s_last;
  if (threadIdx.x == 0) s_last = atomicAdd(&a.tickets[tile], 1u) == static_cast<unsigned>(a.splits - 1);
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  const int64_t split_stride = static_cast<int64_t>(a.rows) * a.total_rows;
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int m = t * 8 + 2 * c + e;
      if (m >= a.rows) continue;
      const float* lo = a.partial + static_cast<int64_t>(m) * a.total_rows + r.lo;
      const float* hi = a.partial + static_cast<int64_t>(m) * a.total_rows + r.hi;
      float sum_lo = 0.0f, sum_hi = 0.0f;
      for (int s = 0; s < a.splits; ++s) {  // L2 reads (__ldcg): other blocks wrote these
        if (r.valid_lo) sum_lo += __ldcg(lo + s * split_stride);
        if (r.valid_hi) sum_hi += __ldcg(hi + s * split_stride);
      }
      if constexpr (kSwiglu) {
        if (r.valid_lo) finish<E>(a, m, r.lo, sum_lo, sum_hi);
      } else {
        if (r.valid_lo) finish<E>(a, m, r.lo, sum_lo, 0.0f);
        if (r.valid_hi) finish<E>(a, m, r.hi, sum_hi, 0.0f);
      }
    }
  if (threadIdx.x == 0) a.tickets[tile] = 0;  // ready for the next launch or graph replay
}

// ---- variant direct: W from global straight into A fragments -------------------------------
// kTiles: mma tiles of 8 batch rows (M <= 8 kTiles).
template <int kTiles, MatmulRowsEpilogue E>
__global__ void __launch_bounds__(kThreads) matmul_rows_direct_kernel(Args a) {
  constexpr bool kSwiglu = E == MatmulRowsEpilogue::swiglu;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int64_t tile = blockIdx.x;
  const int split = blockIdx.y;
  const LaneRows r = lane_rows<kSwiglu>(a, tile, warp, g);
  const uint16_t* w_lo = r.valid_lo ? row_weight(a.parts, r.lo, a.total_rows, a.K) : nullptr;
  const uint16_t* w_hi = r.valid_hi ? row_weight(a.parts, r.hi, a.total_rows, a.K) : nullptr;

  const int64_t k_begin = split * a.split_k, k_end = min(a.K, k_begin + a.split_k);
  float acc[kTiles][4];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;

  for (int64_t k0 = k_begin; k0 < k_end; k0 += kBlockK) {
    uint4 wl[kUnroll], wh[kUnroll];
    bool ok[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // every load of W first: they are what the memory waits on
      const int64_t k = k0 + u * kStepK + 8 * c;
      ok[u] = k < k_end;  // K and the splits are multiples of 8
      wl[u] = load16(w_lo + k, ok[u] && w_lo != nullptr);
      wh[u] = load16(w_hi + k, ok[u] && w_hi != nullptr);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = k0 + u * kStepK + 8 * c;
      uint4 xv[kTiles];
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        const int m = t * 8 + g;
        xv[t] = load16(a.x + static_cast<int64_t>(m) * a.ld_x + k, ok[u] && m < a.rows);
      }
      const uint32_t a0[4] = {wl[u].x, wh[u].x, wl[u].y, wh[u].y};
      const uint32_t a1[4] = {wl[u].z, wh[u].z, wl[u].w, wh[u].w};
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        attn::mma_16816(acc[t], a0, xv[t].x, xv[t].y);
        attn::mma_16816(acc[t], a1, xv[t].z, xv[t].w);
      }
    }
  }
  write_outputs<kTiles, E>(a, r, acc, tile, split, c);
}

// ---- variant staged: W and x through shared memory ------------------------------------------
// Measured on an H200 (2026-11-28), the direct variant reached only 0.27-0.56 of copy bandwidth
// at M = 1 and less at larger M: a warp's load touches 16 rows 64 bytes each and every W byte
// costs a register until its mma, which caps the bytes in flight per SM; x's fragments were
// reloaded per lane from L1 (M/16 of W's bytes again). Here the block streams 128-wide K chunks of
// its 64 W rows (256 contiguous bytes a row) and of x into shared memory with cp.async (L2 only,
// no registers held), kStages deep, and the warps read both as fragments with ldmatrix: the
// flash-attention kernels' machinery (attention_tile.cuh).
constexpr int kStagedLd = kBlockK + attn::kPad;  // bf16 per shared-memory row (padding: no bank conflicts)
template <int kTiles>
struct Staged {
  static_assert(kTiles % 2 == 0, "x is read two 8-row tiles at a time");
  static constexpr int kXRows = 8 * kTiles;
  static constexpr int kStages = kTiles <= 8 ? 3 : 2;  // <= 104 KB: two blocks per SM
  static constexpr int kStageElems = (kRowsPerBlock + kXRows) * kStagedLd;
  static constexpr int kBytes = kStages * kStageElems * 2;
};

// The global W row behind shared-memory row `row` of tile `tile` (null past the parts).
template <bool kSwiglu>
__device__ __forceinline__ const uint16_t* staged_row(const Args& a, int64_t tile, int row) {
  const int warp = row / kRowsPerWarp, r = row % kRowsPerWarp;
  int64_t global;
  if constexpr (kSwiglu) {
    const int64_t half = a.parts.end[0], out = (tile * kWarps + warp) * 8 + (r % 8);
    if (out >= half) return nullptr;
    global = r < 8 ? out : half + out;
  } else {
    global = tile * kRowsPerBlock + row;
  }
  return row_weight(a.parts, global, a.total_rows, a.K);
}

template <int kTiles, MatmulRowsEpilogue E>
__global__ void __launch_bounds__(kThreads) matmul_rows_staged_kernel(Args a) {
  using S = Staged<kTiles>;
  constexpr bool kSwiglu = E == MatmulRowsEpilogue::swiglu;
  extern __shared__ __align__(16) uint16_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int64_t tile = blockIdx.x;
  const int split = blockIdx.y;
  const LaneRows r = lane_rows<kSwiglu>(a, tile, warp, g);

  // Thread t copies 16-byte column (t % 16) of shared rows t / 16 + 8 j: 8 rows of W, kXRows / 8
  // rows of x. Its W rows' global addresses are fixed for the block.
  const int col = (threadIdx.x % 16) * 8, row0 = threadIdx.x / 16;
  const uint16_t* w_rows[kRowsPerBlock / 8];
#pragma unroll
  for (int j = 0; j < kRowsPerBlock / 8; ++j) w_rows[j] = staged_row<kSwiglu>(a, tile, row0 + 8 * j);
  const int64_t k_begin = split * a.split_k, k_end = min(a.K, k_begin + a.split_k);
  const int chunks = static_cast<int>((k_end - k_begin + kBlockK - 1) / kBlockK);
  auto load = [&](int chunk, int stage) {
    uint16_t* w_s = smem + stage * S::kStageElems;
    uint16_t* x_s = w_s + kRowsPerBlock * kStagedLd;
    const int64_t k = k_begin + static_cast<int64_t>(chunk) * kBlockK + col;
    const bool in_k = k < k_end;  // K and the splits are multiples of 8: whole 16-byte pieces
#pragma unroll
    for (int j = 0; j < kRowsPerBlock / 8; ++j) {
      const bool v = in_k && w_rows[j] != nullptr;
      attn::cp_async16(w_s + (row0 + 8 * j) * kStagedLd + col, v ? w_rows[j] + k : a.x, v);
    }
#pragma unroll
    for (int j = 0; j < S::kXRows / 8; ++j) {
      const int m = row0 + 8 * j;
      const bool v = in_k && m < a.rows;
      attn::cp_async16(x_s + m * kStagedLd + col, v ? a.x + static_cast<int64_t>(m) * a.ld_x + k : a.x, v);
    }
  };

  float acc[kTiles][4];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < chunks) load(s, s);
    attn::cp_async_commit();  // empty groups too: the wait below counts groups
  }
  for (int ch = 0; ch < chunks; ++ch) {
    attn::cp_async_wait<S::kStages - 2>();  // chunk ch has landed (this thread's copies)
    __syncthreads();                        // everyone's copies; everyone is done with chunk ch - 1
    const int next = ch + S::kStages - 1;   // refills chunk ch - 1's stage
    if (next < chunks) load(next, next % S::kStages);
    attn::cp_async_commit();
    const uint16_t* w_s = smem + (ch % S::kStages) * S::kStageElems;
    const uint16_t* x_s = w_s + kRowsPerBlock * kStagedLd;
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) {
      uint32_t af[4];
      attn::load_a<kStagedLd>(af, w_s, warp * kRowsPerWarp, kk * 16, lane);
#pragma unroll
      for (int t2 = 0; t2 < kTiles / 2; ++t2) {
        uint32_t b[4];
        attn::load_b_nk<kStagedLd>(b, x_s, t2 * 16, kk * 16, lane);
        attn::mma_16816(acc[2 * t2], af, b[0], b[1]);
        attn::mma_16816(acc[2 * t2 + 1], af, b[2], b[3]);
      }
    }
  }
  attn::cp_async_wait<0>();
  write_outputs<kTiles, E>(a, r, acc, tile, split, c);
}

template <template <int, MatmulRowsEpilogue> class Pick, int kTiles>
void launch(const Args& a, MatmulRowsEpilogue e, dim3 grid, cudaStream_t s) {
  // One launch site: the emulator's rewrite takes single-argument templates only.
  auto kernel = Pick<kTiles, MatmulRowsEpilogue::store>::kernel();
  switch (e) {
    case MatmulRowsEpilogue::store: break;
    case MatmulRowsEpilogue::accumulate: kernel = Pick<kTiles, MatmulRowsEpilogue::accumulate>::kernel(); break;
    case MatmulRowsEpilogue::store_f32: kernel = Pick<kTiles, MatmulRowsEpilogue::store_f32>::kernel(); break;
    case MatmulRowsEpilogue::swiglu: kernel = Pick<kTiles, MatmulRowsEpilogue::swiglu>::kernel(); break;
  }
  const int smem = Pick<kTiles, MatmulRowsEpilogue::store>::smem();
  if (smem > 48 * 1024) {
    // Above 48 KB a kernel must be granted its shared memory once; before any capture (the
    // decode step runs each bucket once without a graph before capturing it).
    static std::once_flag granted[4];
    std::call_once(granted[static_cast<int>(e)], [&] { CUDA_CHECK(attn::allow_smem(kernel, smem)); });
  }
  kernel<<<grid, kThreads, smem, s>>>(a);
  CUDA_CHECK_LAUNCH();
}

template <int kTiles, MatmulRowsEpilogue E>
struct Direct {
  static auto kernel() { return &matmul_rows_direct_kernel<kTiles, E>; }
  static constexpr int smem() { return 0; }
};
template <int kTiles, MatmulRowsEpilogue E>
struct StagedPick {
  static auto kernel() { return &matmul_rows_staged_kernel<kTiles, E>; }
  static constexpr int smem() { return Staged<kTiles>::kBytes; }
};

int multiprocessors_of(int device) {
  static std::mutex mutex;
  static int counts[64] = {};
  check(device >= 0 && device < 64, "matmul_rows_cuda: cuda:", device, " out of range");
  std::lock_guard<std::mutex> lock(mutex);
  if (counts[device] == 0) CUDA_CHECK(cudaDeviceGetAttribute(&counts[device], cudaDevAttrMultiProcessorCount, device));
  return counts[device];
}

}  // namespace

void matmul_rows_cuda(const MatmulRowsProblem& p, void* workspace, size_t workspace_bytes, const CudaStream& stream) {
  const char* why = nullptr;
  check(matmul_rows_supported(p, &why), "matmul_rows_cuda: M=", p.rows, " K=", p.in_features, ": ", why);
  const bool swiglu = p.epilogue == MatmulRowsEpilogue::swiglu;
  const int64_t total = matmul_rows_total(p);
  const int sms = multiprocessors_of(stream.device);
  MatmulRowsGrid grid = matmul_rows_grid(total, p.in_features, swiglu, sms);
  const size_t need = matmul_rows_workspace_bytes(total, p.in_features, swiglu, p.rows, sms);
  check(workspace_bytes >= need && workspace != nullptr, "matmul_rows_cuda: workspace of ", workspace_bytes,
        " bytes, need ", need, " (M=", p.rows, " N=", total, " K=", p.in_features, ")");
  check(grid.tiles <= INT32_MAX && grid.splits <= 65535, "matmul_rows_cuda: grid of ", grid.tiles, " x ", grid.splits,
        " blocks");
  Args a{};
  a.out = p.out;
  a.ld_out = p.ld_out;
  a.x = p.x;
  a.ld_x = p.ld_x;
  a.rows = static_cast<int>(p.rows);
  a.K = p.in_features;
  a.parts.count = p.num_parts;
  int64_t end = 0;
  for (int i = 0; i < 3; ++i) {
    const bool used = i < p.num_parts;
    a.parts.weight[i] = used ? p.parts[i].weight : nullptr;
    a.parts.bias[i] = used ? p.parts[i].bias : nullptr;
    end += used ? p.parts[i].rows : 0;
    a.parts.end[i] = end;
  }
  a.total_rows = total;
  a.split_k = grid.split_k;
  a.splits = static_cast<int>(grid.splits);
  a.tickets = static_cast<unsigned*>(workspace);
  a.partial = reinterpret_cast<float*>(static_cast<char*>(workspace) + matmul_rows_ticket_bytes(grid));
  dim3 g(static_cast<unsigned>(grid.tiles), static_cast<unsigned>(grid.splits));
  CUDA_CHECK(cudaSetDevice(stream.device));
  cudaStream_t s = cuda_stream_of(stream);
  if (p.variant == MatmulRowsVariant::direct) {
    if (p.rows <= 8)
      launch<Direct, 1>(a, p.epilogue, g, s);
    else if (p.rows <= 16)
      launch<Direct, 2>(a, p.epilogue, g, s);
    else if (p.rows <= 32)
      launch<Direct, 4>(a, p.epilogue, g, s);
    else if (p.rows <= 64)
      launch<Direct, 8>(a, p.epilogue, g, s);
    else
      launch<Direct, 16>(a, p.epilogue, g, s);
  } else {
    if (p.rows <= 16)
      launch<StagedPick, 2>(a, p.epilogue, g, s);
    else if (p.rows <= 32)
      launch<StagedPick, 4>(a, p.epilogue, g, s);
    else if (p.rows <= 64)
      launch<StagedPick, 8>(a, p.epilogue, g, s);
    else
      launch<StagedPick, 16>(a, p.epilogue, g, s);
  }
}

}  // namespace sqlrl
