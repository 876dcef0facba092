// Tensor fills from Philox. Element i takes word i%4 of philox_draw(seed, stream, i/4); the CPU
// and CUDA paths produce the same bits for uniform fills, and normals within float rounding of
// log/sincos (Box-Muller on word pairs).
#pragma once
#include <cstdint>

#include "runtime/tensor.h"

namespace sqlrl {

void fill_uniform(const Tensor& t, uint64_t seed, uint64_t stream, float low = 0.0f, float high = 1.0f);
void fill_normal(const Tensor& t, uint64_t seed, uint64_t stream, float mean = 0.0f, float stddev = 1.0f);
// Raw 32-bit words (u32 stored as i32) — for tests and for kernels that need bits.
void fill_random_bits(const Tensor& t, uint64_t seed, uint64_t stream);

// Backends (called by the functions above after checks; pointers are contiguous f32 / i32).
void fill_uniform_cuda(float* out, size_t n, uint64_t seed, uint64_t stream, float low, float high, int device);
void fill_normal_cuda(float* out, size_t n, uint64_t seed, uint64_t stream, float mean, float stddev, int device);
void fill_random_bits_cuda(uint32_t* out, size_t n, uint64_t seed, uint64_t stream, int device);

}  // namespace sqlrl
