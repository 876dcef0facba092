// CPU emulation of the CUDA features the attention kernels use: one std::thread per CUDA thread,
// std::barrier for __syncthreads and for warp collectives (deposit, barrier, read, barrier).
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 gridDim, blockDim;
typedef void* cudaStream_t;
typedef int cudaError_t;
constexpr int cudaSuccess = 0;
enum { cudaFuncAttributeMaxDynamicSharedMemorySize };
template <class K>
cudaError_t cudaFuncSetAttribute(K, int, int) { return 0; }
inline cudaError_t cudaSetDevice(int) { return 0; }
inline cudaError_t cudaGetLastError() { return 0; }
struct uint4 { uint32_t x, y, z, w; };
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
struct float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
using std::max;
using std::min;

namespace emu {
struct Warp {
  std::unique_ptr<std::barrier<>> bar;
  const void* ptr[32];
  uint32_t u[32][8];
};
inline std::unique_ptr<std::barrier<>> block_bar;
inline std::vector<Warp> warps;
alignas(16) inline uint16_t g_smem[1 << 17];
inline thread_local int warp_id = 0;
inline Warp& warp() { return warps[warp_id]; }
inline void warp_sync() { warp().bar->arrive_and_wait(); }
inline int lane() { return static_cast<int>(threadIdx.x % 32); }
}  // namespace emu

inline void __syncthreads() { emu::block_bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_sync(); }
template <class T>
T __shfl_xor_sync(unsigned, T v, int off) {
  static_assert(sizeof(T) == 4);
  auto& w = emu::warp();
  std::memcpy(&w.u[emu::lane()][0], &v, 4);
  emu::warp_sync();
  T r;
  std::memcpy(&r, &w.u[emu::lane() ^ off][0], 4);
  emu::warp_sync();
  return r;
}

template <class Kernel, class... Args>
void emu_launch(Kernel kernel, dim3 grid, int threads, int smem, cudaStream_t, Args... args) {
  if (smem > static_cast<int>(sizeof(emu::g_smem))) std::abort();
  gridDim = grid;
  blockDim = dim3(threads);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        // Fresh shared memory holds garbage on a GPU: fill with NaN bits to catch reads of unwritten smem.
        std::fill(std::begin(emu::g_smem), std::end(emu::g_smem), uint16_t{0x7fc1});
        emu::block_bar = std::make_unique<std::barrier<>>(threads);
        emu::warps = std::vector<emu::Warp>(static_cast<size_t>((threads + 31) / 32));
        for (auto& w : emu::warps) w.bar = std::make_unique<std::barrier<>>(32);
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t)
          pool.emplace_back([=] {
            threadIdx = dim3(static_cast<unsigned>(t));
            blockIdx = dim3(x, y, z);
            emu::warp_id = t / 32;
            kernel(args...);
            // A thread that returns early leaves the barriers of its warp and block.
            emu::warps[t / 32].bar->arrive_and_drop();
            emu::block_bar->arrive_and_drop();
          });
        for (auto& th : pool) th.join();
      }
}
