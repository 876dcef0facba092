#pragma once
#include "runtime/dtype.h"
struct __nv_bfloat162 {
  uint16_t x, y;
};
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return {sqlrl::f32_to_bf16_bits(a), sqlrl::f32_to_bf16_bits(b)};
}
inline float2 __bfloat1622float2(__nv_bfloat162 v) {
  return {sqlrl::bf16_bits_to_f32(v.x), sqlrl::bf16_bits_to_f32(v.y)};
}
