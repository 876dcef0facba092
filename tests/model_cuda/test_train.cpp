// The CUDA model's training path against the CPU model (itself held against transformers in
// tests/model) on random bf16-exact Qwen2 (biases, untied) and Qwen3 (q/k norm, tied) models.
//
// Tolerances: the CPU model runs in f32 on the same bf16-exact weights, so every difference comes
// from the GPU's bf16 activations. Each stored activation carries one rounding of relative size
// <= 2^-9 (~2e-3); a 2-layer model stores ~15 of them along any path, and their errors add up
// like a random walk (~4 x 2e-3) with a worst case a few times that. Hence logits within 5e-2 of
// max |logit| and 2e-2 relative L2; a log-prob is a logit minus a log-sum-exp, each off by at most
// the logit bound, so 2x that. Gradients go through about twice as many roundings (plus the bf16
// residual gradient): 5e-2 relative L2 per tensor.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/adamw.h"
#include "model/cuda_ops.h"
#include "model_cuda_util.h"
#include "runtime/tensor.h"
#include "tests/model/fixture.h"

namespace sqlrl {
namespace {

using namespace sqlrl::testing;

class CudaModelTrain : public ::testing::TestWithParam<QwenArch> {};

TEST(CudaModelNoDevice, UploadFailsWithTheReason) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a device is present: nothing to refuse";
  QwenModel m = random_model(QwenArch::Qwen3, 1);
  try {
    upload_model(m);
    FAIL() << "upload_model succeeded without a CUDA device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(cuda_unavailable_reason()), std::string::npos) << e.what();
  }
}

TEST(CudaModelFixture, HeadDim16IsRefusedByName) {
  SQLRL_REQUIRE_CUDA();
  auto f = load_model_fixture("qwen3_tied");
  CudaModel m = upload_model(f.model);
  try {
    make_cuda_train_state(m, options(f.batch.num_tokens()));
    FAIL() << "head_dim " << f.model.config.head_dim << " accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim 16"), std::string::npos) << e.what();
  }
}

TEST_P(CudaModelTrain, UploadDownloadRoundTrip) {
  SQLRL_REQUIRE_CUDA();
  QwenModel host = random_model(GetParam(), 2);
  // Not bf16-exact master values: the bf16 copy must be their rounding, the master exact.
  for (size_t i = 0; i < host.params.size(); i += 3) host.params[i] *= 1.0f + 1e-3f;
  CudaModel m = upload_model(host);
  QwenModel back = make_model(host.config);
  download_model(m, back);
  EXPECT_EQ(0, std::memcmp(back.params.data(), host.params.data(), sizeof(float) * host.params.size()));
  std::vector<float> bf16 = to_floats(m.weights);
  int64_t wrong = 0;
  for (size_t i = 0; i < bf16.size(); ++i) wrong += bf16[i] != bf16_bits_to_f32(f32_to_bf16_bits(host.params[i]));
  EXPECT_EQ(wrong, 0);
  for (float g : download_grads(m)) ASSERT_EQ(g, 0.0f);
}

TEST_P(CudaModelTrain, LogitsLogprobsAndEntropyMatchCpu) {
  SQLRL_REQUIRE_CUDA();
  QwenModel host = random_model(GetParam(), 3);
  RandomBatch b = random_batch(host.config.vocab_size, 4);
  int64_t T = b.batch.num_tokens(), V = host.config.vocab_size;
  TrainState cpu = make_train_state(host.config, options(T));
  std::vector<float> want(static_cast<size_t>(T * V)), got(static_cast<size_t>(T * V), NAN);
  forward_logits(host, cpu, b.batch, want.data());
  CudaModel m = upload_model(host);
  CudaTrainState gpu = make_cuda_train_state(m, options(T, 16));  // several log-prob chunks
  forward_logits_cuda(m, gpu, b.batch, got.data());
  double scale = 0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  double logit_err = scaled_max_error(got, want);
  std::printf("logits: max error / max |logit| = %.3g (budget 5e-2), relative L2 %.3g (budget 2e-2)\n", logit_err,
              relative_l2(got, want));
  EXPECT_LE(logit_err, 5e-2);
  EXPECT_LE(relative_l2(got, want), 2e-2);

  std::vector<float> lp(static_cast<size_t>(T), NAN), ent(static_cast<size_t>(T), NAN);
  forward_logprobs_cuda(m, gpu, b.batch, b.targets, lp.data(), ent.data());
  // log p = logit - lse and lse moves by at most max |d logit|: so each token's log-prob error is
  // bounded by twice its own row's measured logit error (plus f32 summation slack), sharper
  // than the global budget.
  double lp_budget = 2 * 5e-2 * scale, worst_lp = 0, worst_ent = 0, worst_row_ratio = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* row = want.data() + t * V;
    double row_err = max_abs_diff(got.data() + t * V, row, V);
    double mx = *std::max_element(row, row + V), sum = 0, plogp = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    double lse = mx + std::log(sum);
    for (int64_t v = 0; v < V; ++v) {
      double logp = row[v] - lse;
      plogp += std::exp(logp) * logp;
    }
    double lp_err = std::fabs(lp[t] - (row[b.targets[t]] - lse));
    worst_lp = std::max(worst_lp, lp_err);
    worst_row_ratio = std::max(worst_row_ratio, lp_err / (2 * row_err + 1e-4 * (1 + std::fabs(lse))));
    worst_ent = std::max(worst_ent, std::fabs(ent[t] + plogp));
    ASSERT_FALSE(std::isnan(lp[t]) || std::isnan(ent[t])) << "token " << t;
  }
  std::printf("log-probs: max |error| %.3g, entropy %.3g (budget %.3g nats); worst log-prob error / (2 x its row's "
              "logit error) %.3g (budget 1)\n", worst_lp, worst_ent, lp_budget, worst_row_ratio);
  EXPECT_LE(worst_lp, lp_budget);
  EXPECT_LE(worst_row_ratio, 1.0);
  // Entropy = lse - E_p[logit]: off by at most the same two logit errors.
  EXPECT_LE(worst_ent, lp_budget);
}

// A GRPO group's prompt packed once (shared prefixes): the sharers' queries attend to the
// prefix's keys in the owner's rows and their gradients flow back into those rows. Same batch,
// same budgets as the plain batches above.
RandomBatch shared_prefix_batch(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab) - 1);
  auto tokens = [&](const std::vector<int32_t>& start, int more) {
    std::vector<int32_t> t = start;
    for (int i = 0; i < more; ++i) t.push_back(token(rng));
    return t;
  };
  std::vector<int32_t> prompt = tokens({}, 40);
  std::vector<int32_t> part(prompt.begin(), prompt.begin() + 23);
  std::vector<std::vector<int32_t>> seqs = {prompt, tokens(prompt, 12), tokens(prompt, 1), tokens(part, 9),
                                            tokens({}, 17)};
  RandomBatch b;
  b.batch = pack_with_prefixes({{&seqs[0], 40, -1, 0},
                                {&seqs[1], 52, 0, 40},
                                {&seqs[2], 41, 0, 40},
                                {&seqs[3], 32, 0, 23},
                                {&seqs[4], 17, -1, 0}});
  random_targets(b, rng, vocab);
  return b;
}

// Gradients of the masked token-mean log-prob for every parameter tensor.
std::vector<float> gpu_gradients(const QwenModel& host, const RandomBatch& b, std::vector<bool> recompute,
                                 float logit_scale = 1.0f) {
  CudaModel m = upload_model(host);
  int64_t T = b.batch.num_tokens();
  CudaTrainState s = make_cuda_train_state(m, options(T, 16, std::move(recompute)));
  std::vector<float> lp(static_cast<size_t>(T));
  forward_logprobs_cuda(m, s, b.batch, b.targets, lp.data(), nullptr, logit_scale);
  backward_logprobs_cuda(m, s, b.batch, b.targets, b.dlogprobs.data());
  return download_grads(m);
}

// logit_scale != 1: GRPO's log-probs at the sampling temperature (softmax(logits / T)).
// shared: the batch shares prefixes (shared_prefix_batch); its log-probs are checked too.
void expect_gradients_match_cpu(QwenArch arch, float logit_scale, bool shared = false) {
  QwenModel host = random_model(arch, 5);
  RandomBatch b = shared ? shared_prefix_batch(host.config.vocab_size, 6) : random_batch(host.config.vocab_size, 6);
  ASSERT_EQ(shared, b.batch.has_prefixes());
  int64_t T = b.batch.num_tokens();
  TrainState cpu = make_train_state(host.config, options(T));
  std::vector<float> lp(static_cast<size_t>(T));
  forward_logprobs(host, cpu, b.batch, b.targets, lp.data(), nullptr, logit_scale);
  alloc_grads(host);
  backward_logprobs(host, cpu, b.batch, b.targets, b.dlogprobs.data());
  if (shared) {  // log p = logit - lse: off by at most twice the logits' 5e-2 of max |logit| (above)
    CudaModel m = upload_model(host);
    CudaTrainState s = make_cuda_train_state(m, options(T));
    std::vector<float> glp(static_cast<size_t>(T), NAN), want(static_cast<size_t>(T * host.config.vocab_size));
    forward_logprobs_cuda(m, s, b.batch, b.targets, glp.data(), nullptr, logit_scale);
    TrainState again = make_train_state(host.config, options(T));
    forward_logits(host, again, b.batch, want.data());
    double scale = 0, worst_lp = 0;
    for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
    for (int64_t t = 0; t < T; ++t) worst_lp = std::max(worst_lp, std::fabs(static_cast<double>(glp[t]) - lp[t]));
    std::printf("shared prefixes: log-prob max |error| %.3g (budget %.3g)\n", worst_lp, 2 * 5e-2 * scale * logit_scale);
    EXPECT_LE(worst_lp, 2 * 5e-2 * scale * logit_scale);
  }
  std::vector<float> got = gpu_gradients(host, b, {}, logit_scale);
  double worst = 0;
  std::string worst_name;
  for (const ParamView& view : host.table) {
    auto at = [&](const std::vector<float>& g) {
      return std::vector<float>(g.begin() + view.offset, g.begin() + view.offset + view.spec.numel());
    };
    double err = relative_l2(at(got), at(host.grads));
    EXPECT_LE(err, 5e-2) << "gradient of " << view.spec.hf_name;
    if (err > worst) worst = err, worst_name = view.spec.hf_name;
  }
  std::printf("%zu gradients at logit scale %g: worst relative L2 %.3g (%s), budget 5e-2\n", host.table.size(),
              logit_scale, worst, worst_name.c_str());
}

TEST_P(CudaModelTrain, EveryParameterGradientMatchesCpu) {
  SQLRL_REQUIRE_CUDA();
  expect_gradients_match_cpu(GetParam(), 1.0f);
}

TEST_P(CudaModelTrain, GradientsAtSamplingTemperatureMatchCpu) {
  SQLRL_REQUIRE_CUDA();
  expect_gradients_match_cpu(GetParam(), 1.0f / 0.6f);
}

TEST_P(CudaModelTrain, SharedPrefixBatchLogprobsAndGradientsMatchCpu) {
  SQLRL_REQUIRE_CUDA();
  expect_gradients_match_cpu(GetParam(), 1.0f / 0.6f, /*shared=*/true);
}

TEST_P(CudaModelTrain, RecomputationGivesTheSameGradientBytes) {
  SQLRL_REQUIRE_CUDA();
  QwenModel host = random_model(GetParam(), 7);
  RandomBatch b = random_batch(host.config.vocab_size, 8);
  std::vector<float> stored = gpu_gradients(host, b, {});
  std::vector<float> again = gpu_gradients(host, b, {});
  std::vector<float> recomputed = gpu_gradients(host, b, std::vector<bool>(2, true));
  // Deterministic kernels (no atomics in reductions) and the same GEMM plans: bitwise equal.
  EXPECT_EQ(0, std::memcmp(stored.data(), again.data(), sizeof(float) * stored.size())) << "run to run";
  EXPECT_EQ(0, std::memcmp(stored.data(), recomputed.data(), sizeof(float) * stored.size())) << "recomputed";
}

TEST_P(CudaModelTrain, AdamWStepMatchesCpuAndRefreshesBf16) {
  SQLRL_REQUIRE_CUDA();
  QwenModel host = random_model(GetParam(), 9);
  RandomBatch b = random_batch(host.config.vocab_size, 10);
  CudaModel m = upload_model(host);
  int64_t T = b.batch.num_tokens();
  CudaTrainState s = make_cuda_train_state(m, options(T));
  std::vector<float> lp(static_cast<size_t>(T));
  forward_logprobs_cuda(m, s, b.batch, b.targets, lp.data());
  backward_logprobs_cuda(m, s, b.batch, b.targets, b.dlogprobs.data());
  std::vector<float> grads = download_grads(m);
  AdamWConfig config;
  CudaAdamW opt = make_cuda_adamw(m, config);
  float max_norm = 0.5f * static_cast<float>(std::sqrt(grad_sq_sum_cpu(grads.data(), m.num_params())));  // clips
  adamw_step_cuda(m, opt, 1e-3f, max_norm);
  std::vector<float> mom(grads.size(), 0.0f), vel(grads.size(), 0.0f), params = host.params;
  double sq = grad_sq_sum_cpu(grads.data(), m.num_params());
  adamw_cpu(params.data(), mom.data(), vel.data(), grads.data(), m.num_params(), config, 1, 1e-3f,
            clip_coefficient(sq, max_norm));
  QwenModel back = make_model(host.config);
  download_model(m, back);
  // f32 element-wise update, same formula: within a few f32 ulps of the parameter.
  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i)
    worst = std::max(worst, std::fabs(back.params[i] - params[i]) / (std::fabs(params[i]) + 1e-3));
  EXPECT_LE(worst, 1e-5);
  std::vector<float> bf16 = to_floats(m.weights);
  int64_t wrong = 0;
  for (size_t i = 0; i < bf16.size(); ++i) wrong += bf16[i] != bf16_bits_to_f32(f32_to_bf16_bits(back.params[i]));
  EXPECT_EQ(wrong, 0) << "bf16 copy is not the rounding of the updated master";
}

// The GRPO step reads the grad norm first (for its metrics), then steps with the device sum it
// left: that must clip exactly as a step that sums the squares itself, and it must really use
// the sum it was given (a planted zero sum means no clipping: a step that summed again would
// clip and come out the same as the first).
TEST_P(CudaModelTrain, AdamWStepReusesTheGradNormSum) {
  SQLRL_REQUIRE_CUDA();
  QwenModel host = random_model(GetParam(), 10);
  RandomBatch b = random_batch(host.config.vocab_size, 11);
  int64_t T = b.batch.num_tokens();
  std::vector<float> lp(static_cast<size_t>(T));
  enum Run { SumsItself, ReusesTheNorm, ReusesAPlantedZero };
  std::vector<std::vector<float>> after;
  for (Run run : {SumsItself, ReusesTheNorm, ReusesAPlantedZero}) {
    CudaModel m = upload_model(host);
    CudaTrainState s = make_cuda_train_state(m, options(T));
    forward_logprobs_cuda(m, s, b.batch, b.targets, lp.data());
    backward_logprobs_cuda(m, s, b.batch, b.targets, b.dlogprobs.data());
    CudaAdamW opt = make_cuda_adamw(m, AdamWConfig{});
    double norm = grad_norm_cuda(m, opt);
    ASSERT_GT(norm, 0.0);
    if (run != ReusesTheNorm) model_zero(opt.sq_sum.data(), sizeof(double), m.stream);
    adamw_step_cuda(m, opt, 1e-3f, static_cast<float>(0.5 * norm), /*sq_sum_ready=*/run != SumsItself);
    QwenModel back = make_model(host.config);
    download_model(m, back);
    after.push_back(back.params);
  }
  ASSERT_EQ(after[0].size(), after[1].size());
  EXPECT_EQ(0, std::memcmp(after[0].data(), after[1].data(), sizeof(float) * after[0].size()));
  int64_t moved = 0, unclipped = 0;
  for (size_t i = 0; i < after[0].size(); ++i) {
    moved += after[0][i] != host.params[i];
    unclipped += after[2][i] != after[0][i];
  }
  EXPECT_GT(moved, 0);
  EXPECT_GT(unclipped, 0) << "the step did not read the sum it was given";
}

INSTANTIATE_TEST_SUITE_P(Arch, CudaModelTrain, ::testing::Values(QwenArch::Qwen2, QwenArch::Qwen3),
                         [](const auto& info) { return info.param == QwenArch::Qwen2 ? "Qwen2" : "Qwen3"; });

// The training path at a shape where real checkpoints' bugs live (qwen_sized_config: head_dim
// 128, GQA 8 on 2, hidden 512) with 8 layers and 2,110 tokens in sequences of 1031, 1, 777 and
// 301: several flash-attention tiles per sequence, each ending inside a tile, a 1-token sequence
// between two long ones, log-prob chunks that cross sequences.
//
// Budgets. Logits element by element against the CPU's, within the bf16 budget of
// cpu_logits_and_budget (12 sqrt(R) u ||g W[v]||_2; R = 129 roundings here). Log-probs at the
// sampling temperature T 0.6: a log-prob of softmax(l / T) moves by at most (b[target] + max_v
// b[v]) / T. Gradients: a gradient element is a sum of products of forward activations and
// backward activation gradients, each stored in bf16 along about R roundings of the forward and
// as many of the backward; independent errors add in quadrature, so a gradient tensor's relative
// L2 error is ~ sqrt(2R) u, and the budget is kGradSigmas of that: 4 sqrt(258) 2^-9 = 0.125 for
// Qwen3 (0.122 for Qwen2). The 2-layer tests' 5e-2 is 3.1 of them.
//
// A bug confined to a few tokens (the tail of a sequence past its last full tile, the 1-token
// sequence) moves a whole-batch gradient by only ~sqrt(their share): ~10% for 1% of the tokens,
// inside that budget. So the gradients are also taken with only those tokens trained (the last
// 5 of each long sequence and the 1-token one), where such a bug is the whole gradient.
//
// Catches: a D 128 offset or GQA mapping (a group of 4) wrong in the flash forward or backward,
// K/V gradients of a group summed into the wrong KV head, a tile's tail rows masked wrongly in
// forward or backward, a log-prob chunk boundary that drops or repeats a row, a layer's saved
// activations overwritten by another's (8 layers, half of them recomputed), recomputation that
// does not replay the forward bit for bit.
constexpr double kGradSigmas = 4;

class CudaModelTrainLarge : public ::testing::TestWithParam<QwenArch> {};

TEST_P(CudaModelTrainLarge, EightLayersOfTwoThousandTokensMatchTheCpu) {
  SQLRL_REQUIRE_CUDA();
  QwenModel host = random_model(qwen_sized_config(GetParam(), 8), 31);
  const QwenConfig& c = host.config;
  const int64_t V = c.vocab_size;
  const std::vector<int> lengths = {1031, 1, 777, 301};
  RandomBatch b = random_batch(V, 32, lengths);
  const int64_t T = b.batch.num_tokens();
  const float inv_t = 1.0f / 0.6f;
  const double grad_budget = kGradSigmas * std::sqrt(2.0 * bf16_roundings(c)) * kBf16Roundoff;

  LogitsAndBudget want = cpu_logits_and_budget(host, b.batch);
  CudaModel m = upload_model(host);
  CudaTrainState s = make_cuda_train_state(m, options(T, 256));
  std::vector<float> got(static_cast<size_t>(T * V), NAN);
  forward_logits_cuda(m, s, b.batch, got.data());
  const double r_logits = budget_ratio(got.data(), want.logits.data(), want.budget.data(), T * V);

  std::vector<float> lp(static_cast<size_t>(T), NAN), glp(static_cast<size_t>(T), NAN);
  TrainState cpu = make_train_state(c, options(T));
  forward_logprobs(host, cpu, b.batch, b.targets, lp.data(), nullptr, inv_t);
  forward_logprobs_cuda(m, s, b.batch, b.targets, glp.data(), nullptr, inv_t);
  double r_lp = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* bud = want.budget_row(t);
    const double budget = (bud[b.targets[t]] + *std::max_element(bud, bud + V)) * inv_t + 1e-4;
    r_lp = std::max(r_lp, std::isnan(glp[t]) ? INFINITY : std::fabs(static_cast<double>(glp[t]) - lp[t]) / budget);
  }

  // Whole batch, then only the tokens where tiles and sequences end.
  RandomBatch tail = b;
  std::fill(tail.dlogprobs.begin(), tail.dlogprobs.end(), 0.0f);
  std::vector<int64_t> ends;
  int64_t at = 0;
  for (int n : lengths) {
    at += n;
    for (int64_t k = std::max<int64_t>(at - n, at - 5); k < at; ++k) ends.push_back(k);
  }
  for (int64_t k : ends) tail.dlogprobs[static_cast<size_t>(k)] = -1.0f / static_cast<float>(ends.size());
  double worst = 0, worst_tail = 0;
  std::string worst_name, worst_tail_name;
  for (const RandomBatch* batch : {&b, &tail}) {
    alloc_grads(host);
    backward_logprobs(host, cpu, batch->batch, batch->targets, batch->dlogprobs.data());
    std::vector<bool> half(static_cast<size_t>(c.num_hidden_layers), false);
    for (size_t l = 0; l < half.size(); l += 2) half[l] = true;
    std::vector<float> dev = gpu_gradients(host, *batch, {}, inv_t);
    std::vector<float> recomputed = gpu_gradients(host, *batch, half, inv_t);
    EXPECT_EQ(0, std::memcmp(dev.data(), recomputed.data(), sizeof(float) * dev.size()))
        << "recomputing layers 0, 2, 4, 6 changed the gradients";
    for (const ParamView& view : host.table) {
      auto at_view = [&](const std::vector<float>& g) {
        return std::vector<float>(g.begin() + view.offset, g.begin() + view.offset + view.spec.numel());
      };
      double err = relative_l2(at_view(dev), at_view(host.grads));
      EXPECT_LE(err, grad_budget) << (batch == &b ? "whole batch" : "tail tokens") << ": gradient of "
                                  << view.spec.hf_name;
      double& w = batch == &b ? worst : worst_tail;
      if (err > w) w = err, (batch == &b ? worst_name : worst_tail_name) = view.spec.hf_name;
    }
    // forward_logprobs left the CPU state for this batch's backward; the next pass redoes it.
    forward_logprobs(host, cpu, b.batch, b.targets, lp.data(), nullptr, inv_t);
  }
  std::printf("8 layers, D 128, GQA 8/2, hidden 512, %lld tokens: logits %.3g and log-probs (T 0.6) %.3g of the bf16 "
              "budget (budget 1); gradients worst relative L2 %.3g (%s), tail tokens only %.3g (%s), budget %.3g\n",
              static_cast<long long>(T), r_logits, r_lp, worst, worst_name.c_str(), worst_tail, worst_tail_name.c_str(),
              grad_budget);
  EXPECT_LE(r_logits, 1.0);
  EXPECT_LE(r_lp, 1.0);
}

INSTANTIATE_TEST_SUITE_P(Arch, CudaModelTrainLarge, ::testing::Values(QwenArch::Qwen2, QwenArch::Qwen3),
                         [](const auto& info) { return info.param == QwenArch::Qwen2 ? "Qwen2" : "Qwen3"; });

}  // namespace
}  // namespace sqlrl
