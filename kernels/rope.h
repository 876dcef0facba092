// Rotary position embedding, rotate-half convention (Hugging Face Qwen2/Qwen3): for head
// vectors x of size D and i < D/2, with angle = position * theta^(-2i/D),
//   x'[i]       = x[i] cos - x[i + D/2] sin
//   x'[i + D/2] = x[i + D/2] cos + x[i] sin.
// The angle is computed in f32 the way transformers does (inv_freq in f32, position * inv_freq
// in f32), so both agree on the rounding of large positions.
#pragma once
#include <cstdint>

namespace sqlrl {

// In place on x [tokens, heads, head_dim]; positions [tokens].
void rope_forward_cpu(float* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, float theta);
// The transpose (inverse) rotation, in place on the gradient dx [tokens, heads, head_dim].
void rope_backward_cpu(float* dx, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim,
                       float theta);

}  // namespace sqlrl
