// Element types and the bf16/f16 <-> f32 conversions used everywhere (host and device).
// Conversions round to nearest, ties to even; NaN stays NaN (quieted, sign kept), Inf stays Inf;
// f16 handles subnormals both ways.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "runtime/hd.h"

namespace sqlrl {

enum class DType : uint8_t { F32, BF16, F16, I32, I64, U8 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "bf16", ...
DType parse_dtype(const std::string& name);  // throws on an unknown name
bool dtype_is_float(DType dtype);

SQLRL_HD uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
SQLRL_HD float f32_from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

SQLRL_HD uint16_t f32_to_bf16_bits(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: quiet it
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // ties to even; overflow carries into Inf correctly
  return static_cast<uint16_t>((u + rounding) >> 16);
}
SQLRL_HD float bf16_bits_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

SQLRL_HD uint16_t f32_to_f16_bits(float x) {
  uint32_t u = f32_bits(x);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: Inf
  if (abs < 0x38800000u) {
    // Result is an f16 subnormal (or zero): value = m * 2^-24 with m rounded to nearest even.
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal: +-0
    int exponent = static_cast<int>(abs >> 23);
    uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    int shift = 126 - exponent;  // 14..24 for the exponents that reach here
    uint32_t result = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (remainder > half || (remainder == half && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  // Normal: rebias exponent (127 -> 15) and round 23 mantissa bits to 10.
  uint32_t rebased = abs - (112u << 23);
  uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rebased + rounding) >> 13));
}

SQLRL_HD float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mantissa << 13));  // Inf / NaN
  if (exponent == 0) {
    if (mantissa == 0) return f32_from_bits(sign);
    // Subnormal: normalise into an f32 normal.
    int e = -1;
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    return f32_from_bits(sign | ((112u - e) << 23) | ((mantissa & 0x3ffu) << 13));
  }
  return f32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Bulk host conversions (used by loaders and tests).
void convert_f32_to_bf16(const float* src, uint16_t* dst, size_t n);
void convert_bf16_to_f32(const uint16_t* src, float* dst, size_t n);
void convert_f32_to_f16(const float* src, uint16_t* dst, size_t n);
void convert_f16_to_f32(const uint16_t* src, float* dst, size_t n);

}  // namespace sqlrl
