// The attention emulator's shim (tools/cuda_emu/shim: a std::thread per CUDA thread, barriers
// for warp collectives) plus what the RMSNorm/RoPE/SwiGLU/embedding/sampling/log-prob kernels
// use: 8-byte shuffles, shfl_up/shfl, ballot, match_any, shared- and global-memory atomics
// (std::atomic_ref), fences and L2 loads (the sampler's last-block ticket), bit casts, explicit
// roundings, stream copies.
#pragma once
#include <atomic>
#include <bit>

#include "../../cuda_emu/shim/cuda_runtime.h"

#define __noinline__ __attribute__((noinline))

namespace emu {
template <class T>
T exchange(T v, int src) {  // every lane deposits v, reads lane src's
  static_assert(sizeof(T) <= 8);
  auto& w = warp();
  std::memcpy(&w.u[lane()][0], &v, sizeof(T));
  warp_sync();
  T r;
  std::memcpy(&r, &w.u[src][0], sizeof(T));
  warp_sync();
  return r;
}
}  // namespace emu

inline unsigned long long __shfl_xor_sync(unsigned, unsigned long long v, int o) { return emu::exchange(v, emu::lane() ^ o); }
inline double __shfl_xor_sync(unsigned, double v, int o) { return emu::exchange(v, emu::lane() ^ o); }
inline unsigned long long __shfl_up_sync(unsigned, unsigned long long v, int d) {
  return emu::exchange(v, emu::lane() >= d ? emu::lane() - d : emu::lane());
}
inline unsigned long long __shfl_sync(unsigned, unsigned long long v, int src) { return emu::exchange(v, src); }
inline unsigned __ballot_sync(unsigned, bool p) {
  auto& w = emu::warp();
  w.u[emu::lane()][2] = p ? 1u : 0u;
  emu::warp_sync();
  unsigned m = 0;
  for (int i = 0; i < 32; ++i) m |= w.u[i][2] ? 1u << i : 0u;
  emu::warp_sync();
  return m;
}
inline unsigned __match_any_sync(unsigned, int v) {
  auto& w = emu::warp();
  w.u[emu::lane()][3] = static_cast<uint32_t>(v);
  emu::warp_sync();
  unsigned m = 0;
  for (int i = 0; i < 32; ++i) m |= w.u[i][3] == static_cast<uint32_t>(v) ? 1u << i : 0u;
  emu::warp_sync();
  return m;
}
inline int __popc(unsigned x) { return std::popcount(x); }
inline int __ffs(unsigned x) { return x ? std::countr_zero(x) + 1 : 0; }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return std::atomic_ref<unsigned long long>(*p).fetch_add(v);
}
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount };
// A small device: the planner's splits then show up at the emulator's small shapes too.
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr, int) {
  *value = 2;
  return 0;
}
inline float __uint_as_float(uint32_t u) { return std::bit_cast<float>(u); }
inline uint32_t __float_as_uint(float f) { return std::bit_cast<uint32_t>(f); }
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
inline double __dmul_rn(double a, double b) { volatile double r = a * b; return r; }
inline double __dadd_rn(double a, double b) { volatile double r = a + b; return r; }
inline unsigned long long __double2ull_rn(double x) { return static_cast<unsigned long long>(std::nearbyint(x)); }
inline unsigned atomicOr(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_or(v); }
// Blocks run one after another here, so a fence only has to keep the compiler's order.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <class T>
T __ldcg(const T* p) { return *p; }
using std::ceil;
using std::exp;
using std::floor;
using std::log;

enum cudaMemcpyKind { cudaMemcpyDeviceToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToDevice };
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memcpy(d, s, n);
  return 0;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return 0; }
inline cudaError_t cudaGetDevice(int* device) {  // one device here
  *device = 0;
  return 0;
}

