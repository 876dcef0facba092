// SwiGLU MLP activation: h = silu(gate) * up, elementwise over n values.
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/stream.h"

namespace sqlrl {

void swiglu_forward_cpu(float* out, const float* gate, const float* up, int64_t n);
// Overwrites dgate and dup.
void swiglu_backward_cpu(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n);

// CUDA (kernels/cuda/swiglu.cu): bf16 arrays (uint16_t bits) of n values, f32 math; 16-byte
// accesses when every pointer is 16-byte aligned. The backward overwrites dgate and dup (they may
// alias gate and up: each element is read before it is written, by the same thread).
void swiglu_forward_cuda(uint16_t* out, const uint16_t* gate, const uint16_t* up, int64_t n, const CudaStream& stream);
void swiglu_backward_cuda(uint16_t* dgate, uint16_t* dup, const uint16_t* dout, const uint16_t* gate, const uint16_t* up,
                          int64_t n, const CudaStream& stream);

}  // namespace sqlrl
