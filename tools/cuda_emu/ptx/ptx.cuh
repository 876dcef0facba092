// Emulated PTX: fragment layouts as the PTX ISA documents them.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <vector>
namespace sqlrl::attn {
// cp.async is deferred: a copy lands only when a cp.async.wait_group that covers its group
// runs in the issuing thread, so reading a tile before waiting for it shows stale or NaN data.
struct PendingCopy {
  void* dst;
  const void* src;
  bool valid;
};
inline thread_local std::vector<PendingCopy> open_group;
inline thread_local std::vector<std::vector<PendingCopy>> committed_groups;
inline void cp_async16(void* dst, const void* src, bool valid) { open_group.push_back({dst, src, valid}); }
inline void cp_async_commit() {
  committed_groups.push_back(std::move(open_group));
  open_group.clear();
}
template <int N>
inline void cp_async_wait() {
  while (committed_groups.size() > static_cast<size_t>(N)) {
    for (const PendingCopy& c : committed_groups.front()) {
      if (c.valid)
        std::memcpy(c.dst, c.src, 16);
      else
        std::memset(c.dst, 0, 16);
    }
    committed_groups.erase(committed_groups.begin());
  }
}
inline void ldmatrix_impl(uint32_t (&r)[4], const uint16_t* p, bool trans) {
  auto& w = emu::warp();
  int lane = emu::lane(), g = lane / 4, t = lane % 4;
  w.ptr[lane] = p;
  emu::warp_sync();
  for (int i = 0; i < 4; ++i) {
    uint16_t lo, hi;
    if (!trans) {
      const uint16_t* row = static_cast<const uint16_t*>(w.ptr[8 * i + g]);
      lo = row[2 * t];
      hi = row[2 * t + 1];
    } else {
      lo = static_cast<const uint16_t*>(w.ptr[8 * i + 2 * t])[g];
      hi = static_cast<const uint16_t*>(w.ptr[8 * i + 2 * t + 1])[g];
    }
    r[i] = lo | (static_cast<uint32_t>(hi) << 16);
  }
  emu::warp_sync();
}
inline void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* p) { ldmatrix_impl(r, p, false); }
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* p) { ldmatrix_impl(r, p, true); }
inline float half_of(uint32_t v, int k) {
  return bf16_bits_to_f32(static_cast<uint16_t>(k % 2 ? v >> 16 : v & 0xffff));
}
inline void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  auto& w = emu::warp();
  int lane = emu::lane(), g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) w.u[lane][i] = a[i];
  w.u[lane][4] = b0;
  w.u[lane][5] = b1;
  emu::warp_sync();
  for (int e = 0; e < 4; ++e) {
    int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
    float sum = 0;
    for (int k = 0; k < 16; ++k) {
      int la = (row % 8) * 4 + (k % 8) / 2, ra = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
      int lb = col * 4 + (k % 8) / 2, rb = 4 + (k >= 8 ? 1 : 0);
      sum += half_of(w.u[la][ra], k) * half_of(w.u[lb][rb], k);
    }
    c[e] += sum;
  }
  emu::warp_sync();
}
inline uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t r;
  std::memcpy(&r, &v, 4);
  return r;
}
}  // namespace sqlrl::attn
