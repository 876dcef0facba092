// SwiGLU MLP activation: h = silu(gate) * up, elementwise over n values.
#pragma once
#include <cstdint>

namespace sqlrl {

void swiglu_forward_cpu(float* out, const float* gate, const float* up, int64_t n);
// Overwrites dgate and dup.
void swiglu_backward_cpu(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n);

}  // namespace sqlrl
