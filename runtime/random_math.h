// The per-element formulas shared by the CPU and CUDA fills, so both compute the same thing.
#pragma once
#include <cmath>
#include <cstdint>

#include "runtime/philox.h"

namespace sqlrl {

// low + (high-low)*u with the multiply and add rounded separately (no FMA contraction on the
// device), so host and device agree bit for bit.
SQLRL_HD float scale_uniform(float u, float low, float high) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(low, __fmul_rn(high - low, u));
#else
  volatile float product = (high - low) * u;
  return low + product;
#endif
}

SQLRL_HD float uniform_element(uint64_t seed, uint64_t stream, uint64_t i, float low, float high) {
  Philox4 draw = philox_draw(seed, stream, i / 4);
  return scale_uniform(uniform_from_bits(draw.v[i % 4]), low, high);
}

// Box-Muller on the word pair (0,1) or (2,3) of the element's draw.
SQLRL_HD float normal_element(uint64_t seed, uint64_t stream, uint64_t i, float mean, float stddev) {
  Philox4 draw = philox_draw(seed, stream, i / 4);
  unsigned pair = static_cast<unsigned>(i % 4) / 2;
  float u1 = uniform_open_from_bits(draw.v[2 * pair]);
  float u2 = uniform_from_bits(draw.v[2 * pair + 1]);
  float radius = sqrtf(-2.0f * logf(u1));
  float angle = 6.2831853071795864f * u2;
  float z = (i % 2 == 0) ? radius * cosf(angle) : radius * sinf(angle);
  return mean + stddev * z;
}

// The four elements 4*block .. 4*block+3 of normal_element, bit for bit (the same operations in
// the same order on the same words; the build contracts no multiply-add, -std=c++20 without
// extensions), for a quarter of the Philox calls and half the logs: a fill costs ~1/3 of one
// made element by element (llm_sqlrl init draws billions).
SQLRL_HD void normal_block4(uint64_t seed, uint64_t stream, uint64_t block, float mean, float stddev, float out[4]) {
  Philox4 draw = philox_draw(seed, stream, block);
  for (unsigned pair = 0; pair < 2; ++pair) {
    float u1 = uniform_open_from_bits(draw.v[2 * pair]);
    float u2 = uniform_from_bits(draw.v[2 * pair + 1]);
    float radius = sqrtf(-2.0f * logf(u1));
    float angle = 6.2831853071795864f * u2;
    out[2 * pair] = mean + stddev * (radius * cosf(angle));
    out[2 * pair + 1] = mean + stddev * (radius * sinf(angle));
  }
}

}  // namespace sqlrl
