// RMSNorm forward/backward on bf16 rows, f32 math, one read of each input.
//
// A block of 256 threads is split into teams of W warps; a team handles one row at a time and
// each thread owns the same columns of every row it sees ((it * team_threads + t) * V + e for it
// < I, e < V), so a row lives in registers between the sum of squares and the output, and the
// backward keeps its weight-gradient partial sums for those columns in registers across rows.
// Each team's partials go to its own workspace row; column_sum_kernel adds the rows in a fixed
// order (no atomics: bitwise repeatable). (V, W, I) is chosen from dim at launch: V = 8 (16-byte
// accesses) when dim % 8 == 0 and the pointers are aligned, else V = 1.
#include "kernels/cuda/ops_common.cuh"
#include "kernels/rmsnorm.h"

namespace sqlrl {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxForwardBlocks = 4096;
constexpr int64_t kMaxBackwardWarps = 2048;  // bounds the number of partial rows
constexpr int64_t kMinRowsPerTeam = 8;       // partials cost at most 1/8 of a row read per row

template <int kV, int kW, int kI>
struct Config {
  static constexpr int V = kV, W = kW, I = kI;
  static constexpr int teams = kWarps / kW;
  static constexpr int team_threads = 32 * kW;
  static constexpr int64_t capacity = int64_t{kV} * 32 * kW * kI;
};

// Sum over the W warps of the caller's team, the same value in every thread of the team.
// Every thread of the block must call it (it synchronises the block when W > 1).
template <int W>
__device__ __forceinline__ float team_sum(float v, float* scratch) {
  v = warp_sum(v);
  if constexpr (W == 1) {
    return v;
  } else {
    int warp = threadIdx.x / 32, first = warp / W * W;
    if (threadIdx.x % 32 == 0) scratch[warp] = v;
    __syncthreads();
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < W; ++i) s += scratch[first + i];
    __syncthreads();
    return s;
  }
}

template <typename C>
__global__ __launch_bounds__(kThreads) void rmsnorm_forward_kernel(uint16_t* out, float* rstd, const uint16_t* x,
                                                                   const uint16_t* weight, int64_t rows, int dim,
                                                                   float eps) {
  __shared__ float scratch[kWarps];
  const int team = threadIdx.x / C::team_threads, t = threadIdx.x % C::team_threads;
  float w[C::I][C::V];
#pragma unroll
  for (int it = 0; it < C::I; ++it) {
    int col = (it * C::team_threads + t) * C::V;
    if (col < dim) load_bf16v<C::V>(weight + col, w[it]);
  }
  // Loop bounds depend only on the block, so every thread reaches team_sum's barriers.
  for (int64_t base = int64_t{blockIdx.x} * C::teams; base < rows; base += int64_t{gridDim.x} * C::teams) {
    const int64_t row = base + team;
    const bool active = row < rows;
    const uint16_t* xr = x + row * dim;
    float v[C::I][C::V];
    float ss = 0.0f;
#pragma unroll
    for (int it = 0; it < C::I; ++it) {
      int col = (it * C::team_threads + t) * C::V;
      if (active && col < dim) {
        load_bf16v<C::V>(xr + col, v[it]);
#pragma unroll
        for (int e = 0; e < C::V; ++e) ss += v[it][e] * v[it][e];
      }
    }
    ss = team_sum<C::W>(ss, scratch);
    if (!active) continue;
    const float s = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);  // as the CPU path: IEEE div and sqrt
    if (rstd && t == 0) rstd[row] = s;
#pragma unroll
    for (int it = 0; it < C::I; ++it) {
      int col = (it * C::team_threads + t) * C::V;
      if (col < dim) {
        float y[C::V];
#pragma unroll
        for (int e = 0; e < C::V; ++e) y[e] = w[it][e] * (v[it][e] * s);
        store_bf16v<C::V>(out + row * dim + col, y);
      }
    }
  }
}

// dx = s * (g - xhat * mean(g * xhat)), g = dout * w, xhat = x * s; dweight = sum_rows dout * xhat.
template <typename C>
__global__ __launch_bounds__(kThreads) void rmsnorm_backward_kernel(uint16_t* dx, float* partial, const uint16_t* dout,
                                                                    const uint16_t* x, const uint16_t* weight,
                                                                    const float* rstd, int64_t rows, int dim) {
  __shared__ float scratch[kWarps];
  const int team = threadIdx.x / C::team_threads, t = threadIdx.x % C::team_threads;
  float w[C::I][C::V], acc[C::I][C::V];
#pragma unroll
  for (int it = 0; it < C::I; ++it) {
    int col = (it * C::team_threads + t) * C::V;
#pragma unroll
    for (int e = 0; e < C::V; ++e) acc[it][e] = 0.0f;
    if (col < dim) load_bf16v<C::V>(weight + col, w[it]);
  }
  for (int64_t base = int64_t{blockIdx.x} * C::teams; base < rows; base += int64_t{gridDim.x} * C::teams) {
    const int64_t row = base + team;
    const bool active = row < rows;
    const float s = active ? rstd[row] : 0.0f;
    float xv[C::I][C::V], dy[C::I][C::V];
    float dot = 0.0f;
#pragma unroll
    for (int it = 0; it < C::I; ++it) {
      int col = (it * C::team_threads + t) * C::V;
      if (active && col < dim) {
        load_bf16v<C::V>(x + row * dim + col, xv[it]);
        load_bf16v<C::V>(dout + row * dim + col, dy[it]);
#pragma unroll
        for (int e = 0; e < C::V; ++e) dot += dy[it][e] * w[it][e] * xv[it][e] * s;
      }
    }
    dot = team_sum<C::W>(dot, scratch) / static_cast<float>(dim);
    if (!active) continue;
#pragma unroll
    for (int it = 0; it < C::I; ++it) {
      int col = (it * C::team_threads + t) * C::V;
      if (col < dim) {
        float d[C::V];
        load_bf16v<C::V>(dx + row * dim + col, d);
#pragma unroll
        for (int e = 0; e < C::V; ++e) {
          d[e] += s * (dy[it][e] * w[it][e] - xv[it][e] * s * dot);
          acc[it][e] += dy[it][e] * xv[it][e] * s;
        }
        store_bf16v<C::V>(dx + row * dim + col, d);
      }
    }
  }
  if (!partial) return;
  float* mine = partial + (int64_t{blockIdx.x} * C::teams + team) * dim;
#pragma unroll
  for (int it = 0; it < C::I; ++it) {
    int col = (it * C::team_threads + t) * C::V;
    if (col < dim) {
#pragma unroll
      for (int e = 0; e < C::V; ++e) mine[col + e] = acc[it][e];
    }
  }
}

// out[c] += sum_p partial[p, c], p in a fixed order: 8 strided slices (one warp each, lanes over
// 32 columns), then the slices in order.
__global__ void column_sum_kernel(float* out, const float* partial, int64_t parts, int dim) {
  __shared__ float slices[8][33];
  const int lane = threadIdx.x % 32, slice = threadIdx.x / 32;
  const int col = blockIdx.x * 32 + lane;
  float sum = 0.0f;
  if (col < dim)
    for (int64_t p = slice; p < parts; p += 8) sum += partial[p * dim + col];
  slices[slice][lane] = sum;
  __syncthreads();
  if (slice == 0 && col < dim) {
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) total += slices[i][lane];
    out[col] += total;
  }
}

// Calls f(Config<...>{}) with the smallest configuration whose capacity covers dim.
template <typename F>
void dispatch(int64_t dim, bool vectorised, F&& f) {
  check(dim > 0, "rmsnorm: dim must be positive, got ", dim);
  if (vectorised) {
    if (dim <= Config<8, 1, 1>::capacity) return f(Config<8, 1, 1>{});
    if (dim <= Config<8, 1, 2>::capacity) return f(Config<8, 1, 2>{});
    if (dim <= Config<8, 1, 4>::capacity) return f(Config<8, 1, 4>{});
    if (dim <= Config<8, 2, 4>::capacity) return f(Config<8, 2, 4>{});
    if (dim <= Config<8, 4, 3>::capacity) return f(Config<8, 4, 3>{});
    if (dim <= Config<8, 4, 4>::capacity) return f(Config<8, 4, 4>{});
    if (dim <= Config<8, 8, 3>::capacity) return f(Config<8, 8, 3>{});
    if (dim <= Config<8, 8, 4>::capacity) return f(Config<8, 8, 4>{});
    fail("rmsnorm: dim ", dim, " exceeds the CUDA kernel's limit of ", Config<8, 8, 4>::capacity);
  }
  if (dim <= Config<1, 1, 1>::capacity) return f(Config<1, 1, 1>{});
  if (dim <= Config<1, 1, 2>::capacity) return f(Config<1, 1, 2>{});
  if (dim <= Config<1, 1, 4>::capacity) return f(Config<1, 1, 4>{});
  if (dim <= Config<1, 1, 8>::capacity) return f(Config<1, 1, 8>{});
  if (dim <= Config<1, 2, 8>::capacity) return f(Config<1, 2, 8>{});
  if (dim <= Config<1, 4, 8>::capacity) return f(Config<1, 4, 8>{});
  if (dim <= Config<1, 8, 8>::capacity) return f(Config<1, 8, 8>{});
  if (dim <= Config<1, 8, 16>::capacity) return f(Config<1, 8, 16>{});
  fail("rmsnorm: dim ", dim, " (not a multiple of 8, or unaligned pointers) exceeds the scalar CUDA kernel's limit of ",
       Config<1, 8, 16>::capacity);
}

// Blocks of the backward: teams handle >= kMinRowsPerTeam rows when rows allow, and the number of
// partial rows stays bounded. A function of (rows, team width) only: the reduction order, hence
// the bits of dweight, does not depend on the device.
template <typename C>
int64_t backward_blocks(int64_t rows) {
  int64_t teams = (rows + kMinRowsPerTeam - 1) / kMinRowsPerTeam;
  int64_t max_teams = kMaxBackwardWarps / C::W;
  if (teams > max_teams) teams = max_teams;
  int64_t blocks = (teams + C::teams - 1) / C::teams;
  return blocks < 1 ? 1 : blocks;
}

}  // namespace

void rmsnorm_forward_cuda(uint16_t* out, float* rstd, const uint16_t* x, const uint16_t* weight, int64_t rows,
                          int64_t dim, float eps, const CudaStream& stream) {
  if (rows == 0) return;
  bool vectorised = dim % 8 == 0 && aligned16(out) && aligned16(x) && aligned16(weight);
  dispatch(dim, vectorised, [&](auto config) {
    using C = decltype(config);
    int64_t blocks = (rows + C::teams - 1) / C::teams;
    if (blocks > kMaxForwardBlocks) blocks = kMaxForwardBlocks;
    rmsnorm_forward_kernel<C><<<static_cast<unsigned>(blocks), kThreads, 0, cuda_stream_of(stream)>>>(
        out, rstd, x, weight, rows, static_cast<int>(dim), eps);
  });
  CUDA_CHECK_LAUNCH();
}

size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t dim) {
  if (rows == 0) return 0;
  // The vectorised and scalar configurations may differ in team width: size for the larger.
  size_t bytes = 0;
  for (bool vectorised : {true, false}) {
    if (vectorised && dim % 8 != 0) continue;
    if (!vectorised && dim > Config<1, 8, 16>::capacity) continue;
    dispatch(dim, vectorised, [&](auto config) {
      using C = decltype(config);
      size_t b = static_cast<size_t>(backward_blocks<C>(rows) * C::teams * dim) * sizeof(float);
      if (b > bytes) bytes = b;
    });
  }
  return bytes;
}

void rmsnorm_backward_cuda(uint16_t* dx, float* dweight, const uint16_t* dout, const uint16_t* x, const uint16_t* weight,
                           const float* rstd, int64_t rows, int64_t dim, void* workspace, size_t workspace_bytes,
                           const CudaStream& stream) {
  if (rows == 0) return;
  bool vectorised = dim % 8 == 0 && aligned16(dx) && aligned16(dout) && aligned16(x) && aligned16(weight);
  dispatch(dim, vectorised, [&](auto config) {
    using C = decltype(config);
    int64_t blocks = backward_blocks<C>(rows), parts = blocks * C::teams;
    float* partial = nullptr;
    if (dweight) {
      size_t need = static_cast<size_t>(parts * dim) * sizeof(float);
      check(workspace && workspace_bytes >= need, "rmsnorm backward: workspace of ", workspace_bytes,
            " bytes, need ", need, " for rows=", rows, " dim=", dim);
      partial = static_cast<float*>(workspace);
    }
    rmsnorm_backward_kernel<C><<<static_cast<unsigned>(blocks), kThreads, 0, cuda_stream_of(stream)>>>(
        dx, partial, dout, x, weight, rstd, rows, static_cast<int>(dim));
    CUDA_CHECK_LAUNCH();
    if (dweight) {
      column_sum_kernel<<<static_cast<unsigned>((dim + 31) / 32), 256, 0, cuda_stream_of(stream)>>>(
          dweight, partial, parts, static_cast<int>(dim));
      CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace sqlrl
