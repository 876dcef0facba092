// Shared by the rl_cuda tests: a random Qwen3 whose head_dim is 64 (the CUDA attention takes 64
// or 128) with weights exactly representable in bf16, so the CPU f32 model and the device's
// bf16 copy start from the same numbers and only the arithmetic differs.
#pragma once
#include <cmath>
#include <random>

#include "model/model.h"
#include "runtime/dtype.h"

namespace sqlrl::rl::testing {

inline QwenModel bf16_model(int64_t vocab, uint32_t seed, int64_t max_positions = 4096) {
  QwenConfig c;
  c.arch = QwenArch::Qwen3;
  c.vocab_size = vocab;
  c.hidden_size = 128;
  c.intermediate_size = 192;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 64;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = max_positions;
  QwenModel m = make_model(c);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const ParamView& view : m.table) {
    bool norm = view.spec.name.find("norm") != std::string::npos;
    // Norms near 1, matrices ~ 1/sqrt(fan_in): activations and logits stay O(1), so greedy
    // choices have margins the bf16 path can resolve at most positions.
    float scale = norm ? 0.1f : 1.0f / std::sqrt(static_cast<float>(view.spec.shape.back()));
    for (int64_t i = 0; i < view.spec.numel(); ++i) {
      float x = (norm ? 1.0f : 0.0f) + scale * normal(rng);
      m.params[view.offset + i] = bf16_bits_to_f32(f32_to_bf16_bits(x));
    }
  }
  return m;
}

}  // namespace sqlrl::rl::testing
