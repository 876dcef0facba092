// bf16 bit vectors <-> floats for the emulator drivers (tools/cuda_emu, tools/cuda_emu_ops): the
// host path's own conversions (runtime/dtype.h), round to nearest even.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/dtype.h"

namespace emu {

inline std::vector<uint16_t> bits(const std::vector<float>& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = sqlrl::f32_to_bf16_bits(x[i]);
  return b;
}

inline std::vector<float> floats(const std::vector<uint16_t>& b) {
  std::vector<float> x(b.size());
  for (size_t i = 0; i < b.size(); ++i) x[i] = sqlrl::bf16_bits_to_f32(b[i]);
  return x;
}

}  // namespace emu
