// Shared by the rl_cuda tests: a random Qwen3 whose head_dim is 64 (the CUDA attention takes 64
// or 128) with weights exactly representable in bf16, so the CPU f32 model and the device's
// bf16 copy start from the same numbers and only the arithmetic differs; and the audit of a CPU
// trajectory's draws against the bf16 error budget of the device's logits.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "model/cuda_ops.h"
#include "model/lora.h"
#include "model/model.h"
#include "rl/agent/trajectory.h"
#include "rl/policy.h"
#include "runtime/dtype.h"
#include "runtime/philox.h"
#include "tests/model_cuda/model_cuda_util.h"

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

// A rank-8 adapter (alpha 16: scale 2) on all seven projections of every layer, as
// tests/model_cuda/test_lora_cuda.cpp makes one: PEFT's A and a non-zero B (normals of std 0.1,
// so each adapted projection's low-rank term is about a third of its output and the adapter
// moves the logits by about their own rms: an adapter the device ignored is far outside every
// bf16 budget), both bf16-exact so the CPU's f32 and the device's bf16 copy hold the same numbers.
inline LoraAdapter bf16_adapter(const QwenConfig& model, uint32_t seed) {
  LoraConfig lc;
  lc.rank = 8;
  lc.alpha = 16;
  lc.target_pattern = "all-linear";
  LoraAdapter a = init_adapter(lc, model, seed);
  std::mt19937 rng(seed + 1);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (const LoraView& v : a.table)
    if (v.is_b)
      for (int64_t i = 0; i < v.numel(); ++i) a.params[static_cast<size_t>(v.offset + i)] = normal(rng);
  for (float& x : a.params) x = bf16_bits_to_f32(f32_to_bf16_bits(x));
  return a;
}

// The base's bf16 weights as they are on the device (a frozen base must stay bit for bit).
inline std::vector<uint16_t> device_weight_bits(const Policy& p) {
  std::vector<uint16_t> out(static_cast<size_t>(p.cuda.num_params()));
  model_copy(out.data(), p.cuda.weights.data(), p.cuda.weights.nbytes(), CopyKind::DeviceToHost, p.cuda.stream);
  return out;
}

// The roundings on a path through the model with an adapter (test_lora_cuda.cpp's count): each
// adapted projection stores its output once more and its low-rank term u once.
inline int bf16_lora_roundings(const QwenConfig& c) {
  return sqlrl::testing::bf16_roundings(c) + 2 * kLoraModules * static_cast<int>(c.num_hidden_layers);
}

// The CPU's draws along one of its own trajectories, judged against the device's error: the CPU
// logits of every prefix with their per-element bf16 budget (model_cuda_util.h,
// cpu_logits_and_budget), the Philox uniform each sampled position drew (the rollout's stream of
// the sample, the position as index: rl/agent/rollout.h), and whether the CPU's token there is
// drawn by every logits within budget of the CPU's (bf16_draw_holds). A device that runs the same
// model within budget can part from the CPU only at a sampled position that is not sure, and only
// for a token that some error within budget draws there.
struct DrawAudit {
  sqlrl::testing::LogitsAndBudget cpu;  // row q - 1 predicts tokens[q]
  std::vector<double> u;                // [tokens]: the uniform drawn at q (0 where not sampled, or greedy)
  std::vector<int8_t> sure;             // [tokens]: 1 sure, 0 sampled but within budget of changing, -1 not sampled
  float temperature = 0;
  int64_t known = 0;  // ids the sampler may draw (the tokenizer's; the vocabulary may be padded)

  // Whether `token` can come out at sampled position q from some logits within budget.
  bool possible(size_t q, int32_t token) const {
    return sqlrl::testing::bf16_draw_holds(cpu.logit_row(static_cast<int64_t>(q) - 1),
                                           cpu.budget_row(static_cast<int64_t>(q) - 1), known, token, temperature,
                                           u[q], sqlrl::testing::DrawCase::Possibly);
  }
  // The budget of the sampler's log-prob at q: log softmax(l / T)[x] is a logit over T minus a
  // log-sum-exp over T, the latter moved by at most the row's largest error over T.
  double logprob_budget(size_t q, int32_t token) const {
    const float* b = cpu.budget_row(static_cast<int64_t>(q) - 1);
    return (b[token] + *std::max_element(b, b + cpu.vocab)) / temperature;
  }
};

inline DrawAudit audit_draws(const QwenModel& model, const Trajectory& t, const SamplingParams& sampling,
                             uint64_t stream, int64_t known) {
  // The audit follows sample_token_cpu without truncation (bf16_draw_holds).
  EXPECT_TRUE(sampling.top_k == 0 && sampling.top_p == 1.0f) << "audit_draws covers sampling without top-k/top-p";
  DrawAudit a;
  a.cpu = sqlrl::testing::cpu_logits_and_budget(model, t.tokens);
  a.temperature = sampling.temperature;
  a.known = known;
  a.u.assign(t.tokens.size(), 0.0);
  a.sure.assign(t.tokens.size(), -1);
  for (size_t q = 1; q < t.tokens.size(); ++q) {
    if (!t.policy_mask[q]) continue;
    const float *l = a.cpu.logit_row(static_cast<int64_t>(q) - 1), *b = a.cpu.budget_row(static_cast<int64_t>(q) - 1);
    if (sampling.temperature > 0) a.u[q] = uniform_from_bits(philox_draw(sampling.seed, stream, q).v[0]);
    a.sure[q] = sqlrl::testing::bf16_draw_holds(l, b, known, t.tokens[q], sampling.temperature, a.u[q],
                                                sqlrl::testing::DrawCase::Surely);
  }
  return a;
}

// A device trajectory against its CPU twin under the audit of the CPU's draws: equal token for
// token (and in policy mask) up to the first difference, which must sit at a sampled position
// whose CPU draw is not sure, with a device token some error within budget draws; on the common
// prefix, sampled log-probs within the audit's budget (+ 1e-4 for the f32 rounding of the CPU's
// probabilities and the device's exp and sums; greedy reports 0 on both). Prints one line.
struct TrajectoryComparison {
  size_t equal = 0;                      // tokens equal from the start
  int64_t equal_sampled = 0, equal_sure = 0;
  bool whole = false;
  double worst_logprob = 0;              // largest log-prob error over its budget
};
inline TrajectoryComparison compare_trajectory(const Trajectory& a, const Trajectory& b, const DrawAudit& audit,
                                               const char* what) {
  TrajectoryComparison r;
  EXPECT_EQ(b.tokens.size(), b.policy_mask.size()) << what;
  EXPECT_EQ(b.tokens.size(), b.sampler_logprobs.size()) << what;
  if (b.tokens.size() != b.policy_mask.size() || b.tokens.size() != b.sampler_logprobs.size()) return r;
  for (int32_t id : b.tokens) EXPECT_LT(id, static_cast<int32_t>(audit.known)) << what;
  const size_t n = std::min(a.tokens.size(), b.tokens.size());
  size_t p = 0;
  while (p < n && a.tokens[p] == b.tokens[p]) ++p;
  r.equal = p;
  for (size_t q = 0; q < p; ++q) {
    EXPECT_EQ(a.policy_mask[q], b.policy_mask[q]) << what << " token " << q;
    if (!a.policy_mask[q]) continue;
    ++r.equal_sampled;
    r.equal_sure += audit.sure[q] == 1;
    if (audit.temperature == 0.0f) {
      EXPECT_EQ(b.sampler_logprobs[q], 0.0f) << what << " token " << q;
      continue;
    }
    double err = std::fabs(static_cast<double>(b.sampler_logprobs[q]) - a.sampler_logprobs[q]);
    double ratio = err / (audit.logprob_budget(q, a.tokens[q]) + 1e-4);
    r.worst_logprob = std::max(r.worst_logprob, ratio);
    EXPECT_LE(ratio, 1.0) << what << " token " << q << ": sampler log-prob " << b.sampler_logprobs[q] << ", CPU "
                          << a.sampler_logprobs[q];
  }
  if (p == a.tokens.size() && p == b.tokens.size()) {
    r.whole = true;
    std::printf("%s: whole (%zu tokens, %lld sampled, %lld sure)\n", what, p, static_cast<long long>(r.equal_sampled),
                static_cast<long long>(r.equal_sure));
    return r;
  }
  // Equal prefixes end equally and inject equal text: the first difference is a sampled token.
  EXPECT_LT(p, n) << what << " ends differently after equal tokens";
  if (p >= n) return r;
  EXPECT_EQ(a.policy_mask[p], 1) << what << " first differs at an injected token";
  EXPECT_EQ(b.policy_mask[p], 1) << what << " first differs at an injected token";
  std::printf("%s: equal through token %zu of %zu (prompt %lld; %lld sampled, %lld sure), then CPU %d device %d where "
              "the CPU's draw is %s\n",
              what, p, a.tokens.size(), static_cast<long long>(a.prompt_length),
              static_cast<long long>(r.equal_sampled), static_cast<long long>(r.equal_sure), a.tokens[p], b.tokens[p],
              audit.sure[p] == 1 ? "SURE" : "within the budget of changing");
  EXPECT_EQ(audit.sure[p], 0) << what << ": the device parts from the CPU at token " << p
                              << " where the CPU's draw holds for every error within the bf16 budget";
  EXPECT_TRUE(audit.possible(p, b.tokens[p]))
      << what << ": the device drew " << b.tokens[p] << " at token " << p
      << ", which no error within the bf16 budget draws";
  return r;
}

// The premise the audits rest on, checked on the model and sequences in use: the device's paged
// decode (forward_cached_cuda, what rollout runs on CUDA) replayed along the CPU's trajectories
// gives every logit within the budget of the CPU's. Fed as the rollout feeds a trajectory: the
// prompt whole, then a chunk ending at each token whose successor is sampled (a sampled token
// alone, or with the observation injected after it), all trajectories side by side in one batch
// per step, every position's logits returned. Returns the largest error over its budget (<= 1
// holds). A decode step that reads the wrong cache slots, skips a K/V write or rotates at the wrong
// position fails here even where it moves the rollout's tokens too little to show.
inline double device_decode_budget_ratio(const Policy& device, const std::vector<Trajectory>& trajs,
                                         const std::vector<DrawAudit>& audits, int64_t block_size) {
  const int64_t V = device.config().vocab_size;
  std::vector<std::vector<std::pair<size_t, size_t>>> chunks(trajs.size());  // [begin, end) per step
  int64_t blocks = 0;
  size_t steps = 0;
  for (size_t i = 0; i < trajs.size(); ++i) {
    const Trajectory& t = trajs[i];
    size_t begin = 0;
    for (size_t q = 0; q < t.tokens.size(); ++q)
      if (q + 1 == t.tokens.size() || t.policy_mask[q + 1]) {
        chunks[i].push_back({begin, q + 1});
        begin = q + 1;
      }
    blocks += (static_cast<int64_t>(t.tokens.size()) + block_size - 1) / block_size;
    steps = std::max(steps, chunks[i].size());
  }
  CudaKVCache cache = make_cuda_kv_cache(device.cuda, blocks, block_size);
  std::vector<int64_t> handles;
  for (size_t i = 0; i < trajs.size(); ++i) handles.push_back(kv_new_sequence(cache.book));
  Tensor logits;
  double worst = 0;
  for (size_t step = 0; step < steps; ++step) {
    std::vector<CachedInput> inputs;
    std::vector<size_t> who;
    for (size_t i = 0; i < trajs.size(); ++i) {
      if (step >= chunks[i].size()) continue;
      const auto [begin, end] = chunks[i][step];
      inputs.push_back({handles[i], std::vector<int32_t>(trajs[i].tokens.begin() + static_cast<ptrdiff_t>(begin),
                                                         trajs[i].tokens.begin() + static_cast<ptrdiff_t>(end))});
      who.push_back(i);
    }
    forward_cached_cuda(device.cuda, cache, inputs, logits, true);
    const std::vector<float> rows = to_floats(logits);
    size_t r = 0;
    for (size_t k = 0; k < who.size(); ++k) {
      const auto [begin, end] = chunks[who[k]][step];
      const sqlrl::testing::LogitsAndBudget& want = audits[who[k]].cpu;
      for (size_t q = begin; q < end; ++q, ++r) {
        const int64_t row = static_cast<int64_t>(q);
        worst = std::max(worst, sqlrl::testing::budget_ratio(rows.data() + r * V, want.logit_row(row),
                                                             want.budget_row(row), V));
      }
    }
  }
  return worst;
}

}  // namespace sqlrl::rl::testing
