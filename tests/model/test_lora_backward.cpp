// The LoRA backward (backward_logprobs with an adapter, model/lora.h lora_backward_cpu), base
// frozen. Its reference is the base backward, already checked against transformers and finite
// differences: an adapted projection computes x W_eff^T with W_eff = W + s B A, so for the same
// loss dL/dB = s (dL/dW_eff) A^T and dL/dA = s B^T (dL/dW_eff), where dL/dW_eff is the base
// backward's weight gradient on the merged model (merge_adapter). Also: the base's gradients are
// neither needed nor touched, a fresh adapter (B = 0) trains B only, recomputation changes no
// bit, and what the backward refuses. Finite differences of the adapter alone:
// test_finite_difference.cpp (LoraFiniteDifference).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "lora_fixture.h"

namespace sqlrl {
namespace {

using testing::AdapterFixture;
using testing::error_of;

// A loss over the fixture batch: targets and dlogprobs of both signs, a third of the rows zero
// (masked rows, as in GRPO and SFT), so every path of the logprob backward runs.
struct Loss {
  std::vector<int32_t> targets;
  std::vector<float> dlogprobs;
};
Loss loss_for(const PackedBatch& batch, int64_t vocab) {
  const int64_t T = batch.num_tokens();
  Loss l;
  for (int64_t t = 0; t < T; ++t) {
    l.targets.push_back((batch.tokens[t] * 7 + 3) % static_cast<int32_t>(vocab));
    l.dlogprobs.push_back(t % 3 == 0 ? 0.0f : 0.25f * static_cast<float>(t % 5) - 0.6f);
  }
  return l;
}

// The adapter's gradients of the loss (grads allocated here, zeroed first).
std::vector<float> adapter_grads(QwenModel& model, LoraAdapter& adapter, const PackedBatch& batch, const Loss& loss,
                                 std::vector<bool> recompute = {}) {
  const int64_t T = batch.num_tokens();
  TrainState state = make_train_state(model.config, testing::options(T, 5, std::move(recompute)));
  std::vector<float> lp(static_cast<size_t>(T));
  forward_logprobs(model, state, batch, loss.targets, lp.data(), nullptr, 1.0f, &adapter);
  alloc_lora_grads(adapter);
  backward_logprobs(model, state, batch, loss.targets, loss.dlogprobs.data(), nullptr, nullptr, &adapter);
  return adapter.grads;
}

class LoraBackwardPeft : public ::testing::TestWithParam<const char*> {};

// The tolerance: both sides compute the same gradient in f32, in different orders (the merged
// W_eff is rounded once; the unmerged path adds the low-rank product to each projection's output
// and runs its own small GEMMs). The base backward is within 1e-3 of transformers' float64 on
// these fixtures (test_hf_forward_backward.cpp, budget 1e-3, measured 1.2e-6 to 1.8e-6 of the
// largest gradient); contracting dL/dW_eff with A or B over 4 to 128 terms keeps a relative error
// of the same order (measured 1.8e-6 to 5.9e-6, printed). 1e-4 of the tensor's largest |gradient|
// leaves more than a decade of margin, while a dropped scale, a transposed dA or a lost dx path
// moves the gradients by 50% to 160% of it (the test was run against each).
constexpr double kGradBudget = 1e-4;

TEST_P(LoraBackwardPeft, AdapterGradientsAreTheMergedWeightGradientThroughBAndA) {
  AdapterFixture a = testing::load_adapter_fixture(GetParam());
  const PackedBatch& batch = a.f.batch;
  const Loss loss = loss_for(batch, a.f.model.config.vocab_size);
  const std::vector<float> got = adapter_grads(a.f.model, a.adapter, batch, loss);

  // dL/dW_eff: the base backward on the merged model, same batch and loss.
  QwenModel merged = a.f.model;
  merge_adapter(merged, a.adapter);
  const int64_t T = batch.num_tokens();
  TrainState state = make_train_state(merged.config, testing::options(T, 5));
  std::vector<float> lp(static_cast<size_t>(T));
  forward_logprobs(merged, state, batch, loss.targets, lp.data());
  alloc_grads(merged);
  backward_logprobs(merged, state, batch, loss.targets, loss.dlogprobs.data());
  const ModelWeights g = merged.grad_weights();

  const LoraAdapter& ad = a.adapter;
  const double s = lora_scale(ad.config);
  const int64_t r = ad.config.rank;
  double worst = 0;
  std::string worst_name;
  int checked = 0;
  for (size_t v = 0; v + 1 < ad.table.size(); v += 2) {
    const LoraView& va = ad.table[v];
    const LoraView& vb = ad.table[v + 1];
    ASSERT_TRUE(!va.is_b && vb.is_b && va.layer == vb.layer && va.module == vb.module) << va.hf_name;
    const auto [in, out] = lora_module_dims(ad.model, va.module);
    const float* G = lora_base_weight(g.layers[va.layer], va.module);  // [out, in]
    const float* A = ad.params.data() + va.offset;                     // [r, in]
    const float* B = ad.params.data() + vb.offset;                     // [out, r]
    std::vector<double> want_a(static_cast<size_t>(r * in), 0.0), want_b(static_cast<size_t>(out * r), 0.0);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i)
        for (int64_t j = 0; j < r; ++j) {
          want_b[o * r + j] += s * G[o * in + i] * A[j * in + i];
          want_a[j * in + i] += s * B[o * r + j] * G[o * in + i];
        }
    for (const auto& [view, want] : {std::pair{&va, &want_a}, {&vb, &want_b}}) {
      double err = 0, scale = 0;
      for (int64_t k = 0; k < view->numel(); ++k) {
        err = std::max(err, std::fabs(got[view->offset + k] - (*want)[k]));
        scale = std::max(scale, std::fabs((*want)[k]));
      }
      ASSERT_GT(scale, 0.0) << view->hf_name << ": the fixture's adapter must give it a gradient";
      EXPECT_LE(err / scale, kGradBudget) << view->hf_name;
      if (err / scale > worst) worst = err / scale, worst_name = view->hf_name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(ad.table.size()));
  std::printf("%s: %d adapter gradients against the merged model's, worst max error / max |grad| = %.3g (%s), "
              "budget %g\n",
              GetParam(), checked, worst, worst_name.c_str(), kGradBudget);
}

// Gradient checkpointing re-runs each recomputed layer's forward, with the adapter, inside the
// backward: the same products on the same inputs, so the same bits.
TEST_P(LoraBackwardPeft, RecomputedLayersGiveTheSameBits) {
  AdapterFixture a = testing::load_adapter_fixture(GetParam());
  const Loss loss = loss_for(a.f.batch, a.f.model.config.vocab_size);
  const std::vector<float> stored = adapter_grads(a.f.model, a.adapter, a.f.batch, loss);
  const std::vector<float> recomputed =
      adapter_grads(a.f.model, a.adapter, a.f.batch, loss,
                    std::vector<bool>(static_cast<size_t>(a.f.model.config.num_hidden_layers), true));
  ASSERT_EQ(stored.size(), recomputed.size());
  EXPECT_EQ(std::memcmp(stored.data(), recomputed.data(), sizeof(float) * stored.size()), 0);
}

INSTANTIATE_TEST_SUITE_P(Lora, LoraBackwardPeft, ::testing::Values("qwen3_tied", "qwen2_untied", "qwen3_tied_rslora"));

// A LoRA run allocates no base gradients: the backward runs without them, and when they exist it
// leaves them (and the weights) as they were, bit for bit.
TEST(LoraBackward, FrozenBaseNeedsNoGradientsAndKeepsItsBits) {
  AdapterFixture a = testing::load_adapter_fixture("qwen2_untied");  // biases and an lm_head of its own
  const Loss loss = loss_for(a.f.batch, a.f.model.config.vocab_size);
  const std::vector<float> params = a.f.model.params;
  ASSERT_TRUE(a.f.model.grads.empty());
  const std::vector<float> without = adapter_grads(a.f.model, a.adapter, a.f.batch, loss);
  EXPECT_TRUE(a.f.model.grads.empty());
  alloc_grads(a.f.model);
  std::fill(a.f.model.grads.begin(), a.f.model.grads.end(), 7.0f);
  const std::vector<float> with = adapter_grads(a.f.model, a.adapter, a.f.batch, loss);
  EXPECT_TRUE(std::all_of(a.f.model.grads.begin(), a.f.model.grads.end(), [](float v) { return v == 7.0f; }));
  EXPECT_EQ(std::memcmp(params.data(), a.f.model.params.data(), sizeof(float) * params.size()), 0);
  EXPECT_EQ(without, with);
}

// PEFT's init (B = 0): du = s dy B is zero, so dA is exactly zero and only B moves on the first
// step, while dB = s dy^T (x A^T) is not.
TEST(LoraBackward, FreshAdapterTrainsBOnly) {
  for (const char* name : {"qwen3_tied", "qwen2_untied"}) {
    auto f = testing::load_model_fixture(name);
    LoraConfig c;
    c.rank = 4;
    c.alpha = 8;
    c.target_pattern = "all-linear";
    LoraAdapter fresh = init_adapter(c, f.model.config, 3);
    const Loss loss = loss_for(f.batch, f.model.config.vocab_size);
    const std::vector<float> g = adapter_grads(f.model, fresh, f.batch, loss);
    for (const LoraView& v : fresh.table) {
      float largest = 0;
      for (int64_t k = 0; k < v.numel(); ++k) largest = std::max(largest, std::fabs(g[v.offset + k]));
      if (v.is_b) EXPECT_GT(largest, 0.0f) << name << ": " << v.hf_name;
      else EXPECT_EQ(largest, 0.0f) << name << ": " << v.hf_name;
    }
  }
}

TEST(LoraBackward, RefusesWhatItCannotDifferentiate) {
  AdapterFixture a = testing::load_adapter_fixture("qwen3_tied");
  QwenModel& model = a.f.model;
  const Loss loss = loss_for(a.f.batch, model.config.vocab_size);
  const int64_t T = a.f.batch.num_tokens();
  TrainState state = make_train_state(model.config, testing::options(T));
  std::vector<float> lp(static_cast<size_t>(T));
  auto forward = [&](const LoraAdapter* lora) {
    forward_logprobs(model, state, a.f.batch, loss.targets, lp.data(), nullptr, 1.0f, lora);
  };
  auto backward_error = [&](LoraAdapter* lora) {
    return error_of([&] { backward_logprobs(model, state, a.f.batch, loss.targets, loss.dlogprobs.data(), nullptr, nullptr, lora); });
  };
  alloc_grads(model);
  forward(&a.adapter);
  EXPECT_NE(backward_error(nullptr).find("the forward ran with a LoRA adapter; pass the same one"), std::string::npos);
  LoraAdapter other = a.adapter;
  alloc_lora_grads(other);
  EXPECT_NE(backward_error(&other).find("the forward ran with another LoRA adapter; pass the same one"), std::string::npos);
  EXPECT_NE(backward_error(&a.adapter).find("call alloc_lora_grads"), std::string::npos);
  forward(nullptr);
  alloc_lora_grads(a.adapter);
  EXPECT_NE(backward_error(&a.adapter).find("the forward ran without a LoRA adapter; pass none"), std::string::npos);
  a.adapter.config.dropout = 0.05;
  forward(&a.adapter);
  const std::string err = backward_error(&a.adapter);
  EXPECT_NE(err.find("lora_dropout = 0.05: training with LoRA dropout is not implemented"), std::string::npos) << err;
}

}  // namespace
}  // namespace sqlrl
