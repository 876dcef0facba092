// Shared by the CUDA model tests: a random Qwen model whose weights are exactly representable in
// bf16 (so the CPU f32 model and the GPU bf16 copy hold the same numbers), a packed batch with
// an empty and a length-1 sequence, and the comparisons.
#pragma once
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "model/cuda_model.h"
#include "runtime/dtype.h"
#include "tests/test_util.h"

namespace sqlrl::testing {

// head_dim 64: the CUDA attention kernels take 64 or 128 (the HF fixtures have 16).
inline QwenModel random_model(QwenArch arch, uint32_t seed) {
  QwenConfig c;
  c.arch = arch;
  c.vocab_size = 512;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = arch == QwenArch::Qwen3;
  QwenModel m = make_model(c);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const ParamView& view : m.table) {
    bool norm = view.spec.name.find("norm") != std::string::npos;
    bool bias = view.spec.shape.size() == 1 && !norm;
    // Norm weights near 1, biases and matrices ~ 1/sqrt(fan_in) so activations stay O(1).
    float scale = norm ? 0.1f : bias ? 0.05f : 1.0f / std::sqrt(static_cast<float>(view.spec.shape.back()));
    for (int64_t i = 0; i < view.spec.numel(); ++i) {
      float x = (norm ? 1.0f : 0.0f) + scale * normal(rng);
      m.params[view.offset + i] = bf16_bits_to_f32(f32_to_bf16_bits(x));
    }
  }
  return m;
}

// Sequences of 17, 1, 0 and 40 tokens packed back to back; targets and mask random.
struct RandomBatch {
  PackedBatch batch;
  std::vector<int32_t> targets;
  std::vector<float> dlogprobs;  // -mask / count, the SFT/GRPO token-mean shape
};
// Random targets for every packed position, about two thirds of them trained (mask 1).
inline void random_targets(RandomBatch& b, std::mt19937& rng, int64_t vocab) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab) - 1);
  int64_t T = b.batch.num_tokens();
  std::vector<int> mask(static_cast<size_t>(T));
  int count = 0;
  for (int64_t t = 0; t < T; ++t) {
    b.targets.push_back(token(rng));
    mask[t] = (rng() % 3) != 0;
    count += mask[t];
  }
  for (int64_t t = 0; t < T; ++t) b.dlogprobs.push_back(-static_cast<float>(mask[t]) / std::max(count, 1));
}

inline RandomBatch random_batch(int64_t vocab, uint32_t seed, std::vector<int> lengths = {17, 1, 0, 40}) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab) - 1);
  std::vector<std::vector<int32_t>> seqs;
  for (int n : lengths) {
    seqs.emplace_back();
    for (int i = 0; i < n; ++i) seqs.back().push_back(token(rng));
  }
  RandomBatch b;
  b.batch = pack_sequences(seqs);
  random_targets(b, rng, vocab);
  return b;
}

// ||got - want|| / ||want||.
inline double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline double max_abs_diff(const float* got, const float* want, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(got[i])) return INFINITY;
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return worst;
}

}  // namespace sqlrl::testing
