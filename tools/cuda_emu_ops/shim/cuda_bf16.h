// bf16 conversions for the emulated kernels: the host path's own (runtime/dtype.h), which rounds
// to nearest even as __float2bfloat16_rn does.
#pragma once
#include "runtime/dtype.h"
struct __nv_bfloat16 {
  uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16_rn(float x) { return {sqlrl::f32_to_bf16_bits(x)}; }
inline uint16_t __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
