// The few-row product of decode steps (kernels/matmul.h matmul_rows_cuda) on tensor cores.
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

#include "kernels/cuda/ops_common.cuh"
#include "kernels/cuda/ptx.cuh"
#include "kernels/matmul.h"

namespace sqlrl {
namespace {

constexpr int kWarps = 4, kThreads = kWarps * 32, kRowsPerWarp = 16;
constexpr int kStepK = 32, kUnroll = 4, kBlockK = kStepK * kUnroll;
static_assert(kWarps * kRowsPerWarp == kMatmulRowsBlockRows && kBlockK == kMatmulRowsBlockK,
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

// kTiles: mma tiles of 8 batch rows (M <= 8 kTiles).
template <int kTiles, MatmulRowsEpilogue E>
__global__ void __launch_bounds__(kThreads) matmul_rows_kernel(Args a) {
  constexpr bool kSwiglu = E == MatmulRowsEpilogue::swiglu;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int64_t tile = blockIdx.x;
  const int split = blockIdx.y;
  // The warp's A rows g and g + 8, as indices into the parts laid end to end.
  const int64_t half = a.parts.end[0];  // swiglu: gate rows; up row r is row half + r
  int64_t row_lo, row_hi;
  bool valid_lo, valid_hi;
  if constexpr (kSwiglu) {
    row_lo = (tile * kWarps + warp) * 8 + g;
    row_hi = half + row_lo;
    valid_lo = valid_hi = row_lo < half;
  } else {
    row_lo = (tile * kWarps + warp) * kRowsPerWarp + g;
    row_hi = row_lo + 8;
    valid_lo = row_lo < a.total_rows;
    valid_hi = row_hi < a.total_rows;
  }
  const uint16_t* w_lo = valid_lo ? row_weight(a.parts, row_lo, a.total_rows, a.K) : nullptr;
  const uint16_t* w_hi = valid_hi ? row_weight(a.parts, row_hi, a.total_rows, a.K) : nullptr;

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

  // The lane's outputs: tile t, element e is (batch row t*8 + 2c + (e & 1), A row e < 2 ? lo : hi).
  if (a.splits == 1) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int m = t * 8 + 2 * c + e;
        if (m >= a.rows) continue;
        if constexpr (kSwiglu) {
          if (valid_lo) finish<E>(a, m, row_lo, acc[t][e], acc[t][2 + e]);
        } else {
          if (valid_lo) finish<E>(a, m, row_lo, acc[t][e], 0.0f);
          if (valid_hi) finish<E>(a, m, row_hi, acc[t][2 + e], 0.0f);
        }
      }
    return;
  }

  // Split K: write this split's partial sums, take a ticket; the tile's last block sums the
  // splits in order (so the result does not depend on which block finished last) and finishes.
  float* mine = a.partial + static_cast<int64_t>(split) * a.rows * a.total_rows;
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int m = t * 8 + 2 * c + e;
      if (m >= a.rows) continue;
      if (valid_lo) mine[static_cast<int64_t>(m) * a.total_rows + row_lo] = acc[t][e];
      if (valid_hi) mine[static_cast<int64_t>(m) * a.total_rows + row_hi] = acc[t][2 + e];
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
      const float* lo = a.partial + static_cast<int64_t>(m) * a.total_rows + row_lo;
      const float* hi = a.partial + static_cast<int64_t>(m) * a.total_rows + row_hi;
      float sum_lo = 0.0f, sum_hi = 0.0f;
      for (int s = 0; s < a.splits; ++s) {  // L2 reads (__ldcg): other blocks wrote these
        if (valid_lo) sum_lo += __ldcg(lo + s * split_stride);
        if (valid_hi) sum_hi += __ldcg(hi + s * split_stride);
      }
      if constexpr (kSwiglu) {
        if (valid_lo) finish<E>(a, m, row_lo, sum_lo, sum_hi);
      } else {
        if (valid_lo) finish<E>(a, m, row_lo, sum_lo, 0.0f);
        if (valid_hi) finish<E>(a, m, row_hi, sum_hi, 0.0f);
      }
    }
  if (threadIdx.x == 0) a.tickets[tile] = 0;  // ready for the next launch or graph replay
}

template <int kTiles>
void launch(const Args& a, MatmulRowsEpilogue e, dim3 grid, cudaStream_t s) {
  void (*kernel)(Args) = nullptr;  // one launch site: the emulator's rewrite takes single-argument templates only
  switch (e) {
    case MatmulRowsEpilogue::store: kernel = matmul_rows_kernel<kTiles, MatmulRowsEpilogue::store>; break;
    case MatmulRowsEpilogue::accumulate: kernel = matmul_rows_kernel<kTiles, MatmulRowsEpilogue::accumulate>; break;
    case MatmulRowsEpilogue::store_f32: kernel = matmul_rows_kernel<kTiles, MatmulRowsEpilogue::store_f32>; break;
    case MatmulRowsEpilogue::swiglu: kernel = matmul_rows_kernel<kTiles, MatmulRowsEpilogue::swiglu>; break;
  }
  kernel<<<grid, kThreads, 0, s>>>(a);
  CUDA_CHECK_LAUNCH();
}

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
  if (p.rows <= 8)
    launch<1>(a, p.epilogue, g, s);
  else if (p.rows <= 16)
    launch<2>(a, p.epilogue, g, s);
  else if (p.rows <= 32)
    launch<4>(a, p.epilogue, g, s);
  else if (p.rows <= 64)
    launch<8>(a, p.epilogue, g, s);
  else
    launch<16>(a, p.epilogue, g, s);
}

}  // namespace sqlrl
