// Tensor fills from Philox. Element i takes word i%4 of philox_draw(seed, stream, i/4); the CPU
// and CUDA paths produce the same bits for uniform fills, and normals within float rounding of
// log/sincos (Box-Muller on word pairs).
#pragma once
#include <cstdint>

#include "runtime/tensor.h"

namespace sqlrl {

void fill_uniform(const Tensor& t, uint64_t seed, uint64_t stream, float low = 0.0f, float high = 1.0f);
void fill_normal(const Tensor& t, uint64_t seed, uint64_t stream, float mean = 0.0f, float stddev = 1.0f);
// Elements [first, first + count) of fill_normal(seed, stream, mean, stddev)'s sequence, the same
// f32 bits, stored as `dtype` (F32; BF16 or F16 rounded to nearest even as convert_f32_to_bf16 /
// convert_f32_to_f16 round) at host memory `out`, on the calling thread. Any split of a range into
// pieces gives the same bytes, so a tensor can be generated piecewise on any number of threads
// (llm_sqlrl init writes a checkpoint's tensors this way, straight into its output buffers).
void fill_normal_range(void* out, DType dtype, uint64_t first, uint64_t count, uint64_t seed, uint64_t stream,
                       float mean, float stddev);
// Raw 32-bit words (u32 stored as i32) — for tests and for kernels that need bits.
void fill_random_bits(const Tensor& t, uint64_t seed, uint64_t stream);

// Backends (called by the functions above after checks; pointers are contiguous f32 / i32).
void fill_uniform_cuda(float* out, size_t n, uint64_t seed, uint64_t stream, float low, float high, int device);
void fill_normal_cuda(float* out, size_t n, uint64_t seed, uint64_t stream, float mean, float stddev, int device);
void fill_random_bits_cuda(uint32_t* out, size_t n, uint64_t seed, uint64_t stream, int device);

}  // namespace sqlrl
