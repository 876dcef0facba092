// Forward and backward of the CPU model against Hugging Face transformers (float64 references
// computed by tools/make_model_fixtures.py from the same bf16-exact weights).
#include <gtest/gtest.h>

#include "fixture.h"

namespace sqlrl {
namespace {

using testing::load_model_fixture;
using testing::scaled_max_error;

class HfFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(HfFixture, LogitsMatchTransformers) {
  auto f = load_model_fixture(GetParam());
  int64_t T = f.batch.num_tokens(), V = f.model.config.vocab_size;
  TrainState state = make_train_state(f.model.config, testing::options(T));
  std::vector<float> logits(static_cast<size_t>(T * V));
  forward_logits(f.model, state, f.batch, logits.data());
  double err = scaled_max_error(logits, f.floats("logits"));
  std::printf("%s: logits max error / max |logit| = %.3g (budget 1e-4)\n", GetParam(), err);
  EXPECT_LE(err, 1e-4);
}

TEST_P(HfFixture, LogprobsMatchTransformers) {
  auto f = load_model_fixture(GetParam());
  int64_t T = f.batch.num_tokens();
  // A chunk smaller than the batch, so the fused path runs several chunks.
  TrainState state = make_train_state(f.model.config, testing::options(T, 7));
  std::vector<float> lp(static_cast<size_t>(T));
  forward_logprobs(f.model, state, f.batch, f.targets, lp.data());
  std::vector<float> want = f.floats("logprobs");
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) worst = std::max(worst, static_cast<double>(std::fabs(lp[t] - want[t]) / std::fabs(want[t])));
  std::printf("%s: log-prob max relative error %.3g (budget 1e-4)\n", GetParam(), worst);
  EXPECT_LE(worst, 1e-4);
}

void check_gradients(const char* name, std::vector<bool> recompute) {
  auto f = load_model_fixture(name);
  int64_t T = f.batch.num_tokens();
  TrainState state = make_train_state(f.model.config, testing::options(T, 5, recompute));
  std::vector<float> lp(static_cast<size_t>(T)), dlp(static_cast<size_t>(T));
  forward_logprobs(f.model, state, f.batch, f.targets, lp.data());
  // loss = -sum_t mask_t logprob_t / sum_t mask_t (as the fixture script defines it).
  float masked = 0;
  for (int32_t m : f.mask) masked += static_cast<float>(m);
  for (int64_t t = 0; t < T; ++t) dlp[t] = -static_cast<float>(f.mask[t]) / masked;
  alloc_grads(f.model);
  backward_logprobs(f.model, state, f.batch, f.targets, dlp.data());
  double worst = 0;
  std::string worst_name;
  for (const ParamView& view : f.model.table) {
    std::vector<float> got(f.model.grads.begin() + view.offset, f.model.grads.begin() + view.offset + view.spec.numel());
    double err = scaled_max_error(got, f.floats("grad." + view.spec.hf_name));
    EXPECT_LE(err, 1e-3) << name << ": gradient of " << view.spec.hf_name;
    if (err > worst) {
      worst = err;
      worst_name = view.spec.hf_name;
    }
  }
  std::printf("%s: %zu parameter gradients, worst max error / max |grad| = %.3g (%s), budget 1e-3\n", name,
              f.model.table.size(), worst, worst_name.c_str());
}

TEST_P(HfFixture, GradientsMatchTransformers) { check_gradients(GetParam(), {}); }

TEST_P(HfFixture, GradientsWithRecomputationMatchTransformers) {
  auto f = load_model_fixture(GetParam());
  check_gradients(GetParam(), std::vector<bool>(static_cast<size_t>(f.model.config.num_hidden_layers), true));
}

TEST_P(HfFixture, PackedBatchEqualsSeparateForwards) {
  auto f = load_model_fixture(GetParam());
  int64_t T = f.batch.num_tokens(), V = f.model.config.vocab_size;
  TrainState state = make_train_state(f.model.config, testing::options(T));
  std::vector<float> packed(static_cast<size_t>(T * V));
  forward_logits(f.model, state, f.batch, packed.data());
  for (int64_t s = 0; s < f.batch.num_seqs(); ++s) {
    int32_t start = f.batch.cu_seqlens[s], end = f.batch.cu_seqlens[s + 1];
    PackedBatch one = pack_sequences({std::vector<int32_t>(f.batch.tokens.begin() + start, f.batch.tokens.begin() + end)});
    std::vector<float> alone(static_cast<size_t>((end - start) * V));
    forward_logits(f.model, state, one, alone.data());
    std::vector<float> slice(packed.begin() + start * V, packed.begin() + end * V);
    // Same kernels, same per-row arithmetic: only BLAS blocking over rows can differ.
    EXPECT_LE(scaled_max_error(slice, alone), 1e-6) << GetParam() << " sequence " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Model, HfFixture, ::testing::Values("qwen3_tied", "qwen2_untied"));

}  // namespace
}  // namespace sqlrl
