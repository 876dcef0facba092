#include "runtime/dtype.h"

#include "runtime/error.h"

namespace sqlrl {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  fail("dtype_size: invalid dtype value ", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
  }
  return "invalid";
}

DType parse_dtype(const std::string& name) {
  for (DType d : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8})
    if (name == dtype_name(d)) return d;
  fail("unknown dtype '", name, "' (expected f32, bf16, f16, i32, i64 or u8)");
}

bool dtype_is_float(DType dtype) { return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16; }

void convert_f32_to_bf16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16_bits(src[i]);
}
void convert_bf16_to_f32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_f32(src[i]);
}
void convert_f32_to_f16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_f16_bits(src[i]);
}
void convert_f16_to_f32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f16_bits_to_f32(src[i]);
}

}  // namespace sqlrl
