// grpo_step() on the CUDA policy: the loss and entropy against the CPU step, the gradient norm
// within bf16 tolerance, and the device AdamW and moment download against a host AdamW applied
// to the device's own gradients (exact up to f32 rounding); then a step whose ratios leave the
// clip range and whose reference differs, against the CPU branch for branch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <utility>

#include "model/train.h"
#include "rl/grpo/grpo.h"
#include "tests/model_cuda/model_cuda_util.h"
#include "tests/rl_cuda/rl_cuda_fixture.h"
#include "tests/rl_grpo/grpo_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

using sqlrl::testing::make_trajectory;
using sqlrl::testing::trajectory_logprobs;

std::vector<Trajectory> batch_of_two_groups() {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> id(0, 511);
  auto tokens = [&](int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(id(rng));
    return t;
  };
  std::vector<Trajectory> batch;
  const double rewards[2][3] = {{1.0, 0.0, 0.5}, {0.2, 1.0, -1.0}};
  for (int g = 0; g < 2; ++g)
    for (int s = 0; s < 3; ++s)
      batch.push_back(make_trajectory(g, s, tokens(9 + g), {tokens(12 + 3 * s), tokens(6), tokens(5)}, rewards[g][s]));
  return batch;
}

GrpoConfig config(float kl) {
  GrpoConfig c;
  c.kl_coef = kl;
  c.adamw = {0.9f, 0.999f, 1e-8f, 0.01f};
  c.schedule.lr = 1e-3f;
  c.max_grad_norm = 0.5f;  // below the norm seen here: the clip coefficient is exercised
  c.temperature = 0.6f;    // the recipes' rollout temperature: log-probs of softmax(logits / 0.6) on both devices
  return c;
}

TEST(GrpoCuda, StepMatchesTheCpuWithinBf16AndAdamWIsExact) {
  const QwenModel initial = bf16_model(512, 7);
  std::vector<Trajectory> batch = batch_of_two_groups();
  GrpoConfig cfg = config(0.1f);  // with a reference: the KL path runs on both devices
  TrainOptions to;
  to.max_tokens = 128;

  QwenModel cpu = initial, cpu_ref = initial;
  alloc_grads(cpu);
  TrainState state = make_train_state(cpu.config, to);
  OptimizerState cpu_opt = make_optimizer_state(cpu.num_params);
  GrpoStepStats want = grpo_step(cpu, &cpu_ref, cpu_opt, state, batch, cfg);
  // The CPU half (runs without a device): what the device step is compared against holds here.
  // One update at ratio 1 against an identical reference (no KL, nothing clipped), and a norm above
  // max_grad_norm, so the clip coefficient below is not 1.
  ASSERT_EQ(want.updates, 1);
  EXPECT_EQ(want.ref_kl, 0.0);
  EXPECT_EQ(want.clip_fraction, 0.0);
  EXPECT_GT(want.grad_norm, cfg.max_grad_norm) << "the case must exercise the gradient clip";

  SQLRL_REQUIRE_CUDA();
  QwenModel dev_host = initial, ref_host = initial;
  Policy dev = cuda_policy(dev_host), ref = cuda_frozen_policy(ref_host);
  PolicyActivations acts = policy_init_training(dev, to, cfg.adamw);
  OptimizerState dev_opt;
  GrpoStepStats got = grpo_step(dev, &ref, dev_opt, acts, batch, cfg);
  std::printf("loss cpu %.6g cuda %.6g, grad norm cpu %.6g cuda %.6g, entropy cpu %.6g cuda %.6g\n", want.loss,
              got.loss, want.grad_norm, got.grad_norm, want.entropy, got.entropy);
  ASSERT_EQ(got.updates, 1);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(dev_opt.adam_step, 1);
  // One epoch: old log-probs and the trained ones come from the same deterministic forward on
  // each device, so the ratio is exactly 1 and the reference (same weights) gives k3 = 0: the
  // loss is -sum(mask * A) / tokens on both, whatever the precision.
  EXPECT_NEAR(got.loss, want.loss, 1e-6);
  EXPECT_EQ(got.ref_kl, 0.0);
  EXPECT_EQ(got.clip_fraction, 0.0);
  // Gradients: tests/model_cuda measures <= 2.6% relative L2 between the bf16 and f32 backward;
  // the norm differs by at most that (triangle inequality). Entropy: logits within ~1% of max
  // |logit| move a near-uniform row's entropy by well under 2%.
  EXPECT_NEAR(got.grad_norm, want.grad_norm, 0.05 * want.grad_norm);
  EXPECT_NEAR(got.entropy, want.entropy, 0.02 * want.entropy);

  // The device update against a host AdamW on the device's gradients (still in place).
  std::vector<float> grads = download_grads(dev.cuda);
  double sq = grad_sq_sum_cpu(grads.data(), initial.num_params);
  EXPECT_NEAR(std::sqrt(sq), got.grad_norm, 1e-5 * got.grad_norm);
  std::vector<float> params = initial.params;
  OptimizerState host = make_optimizer_state(initial.num_params);
  adamw_cpu(params.data(), host.m.data(), host.v.data(), grads.data(), initial.num_params, cfg.adamw, 1, want.lr,
            clip_coefficient(sq, cfg.max_grad_norm));
  QwenModel downloaded = initial;
  policy_download(dev, downloaded);
  policy_download_optimizer(dev, dev_opt);
  // f32 element-wise updates on both sides; params are O(1) and the step ~lr, so a few ulps.
  EXPECT_LE(sqlrl::testing::max_abs_diff(downloaded.params.data(), params.data(), initial.num_params), 1e-6);
  EXPECT_LE(sqlrl::testing::max_abs_diff(dev_opt.m.data(), host.m.data(), initial.num_params), 1e-9);
  EXPECT_LE(sqlrl::testing::max_abs_diff(dev_opt.v.data(), host.v.data(), initial.num_params), 1e-12);
  EXPECT_NE(downloaded.params, initial.params);

  // Moments round-trip through the host (resume).
  OptimizerState zeros = make_optimizer_state(initial.num_params), back;
  zeros.m[3] = 0.25f, zeros.v[5] = 2.0f;
  policy_upload_optimizer(dev, zeros);
  policy_download_optimizer(dev, back);
  EXPECT_EQ(back.m, zeros.m);
  EXPECT_EQ(back.v, zeros.v);
}

// The entropy bonus (entropy_coef) through policy_backward_logprobs' dentropy on each device:
// the CUDA step's gradient, and what the bonus adds to it (the step with the coefficient minus
// the step without), against the CPU's. Catches a CUDA path that drops dentropy (the added part
// would be 0) or scales it differently from the CPU.
//
// Budget: tests/model_cuda holds every bf16 gradient within 5e-2 relative L2 of the f32 one (it
// measured <= 2.6%); the bonus's part is the difference of two such gradients, so its error is
// at most 5e-2 (|g_on| + |g_off|) in L2 (triangle inequality), asserted to be well below its own
// size. The loss differs by the bonus's entropy (within 2%, as above) times C.
TEST(GrpoCuda, EntropyBonusMatchesTheCpu) {
  const QwenModel initial = bf16_model(512, 7);
  const std::vector<Trajectory> batch = batch_of_two_groups();
  TrainOptions to;
  to.max_tokens = 128;
  auto step = [&](bool cuda, float coef, GrpoStepStats& stats) {
    GrpoConfig cfg = config(0.0f);
    cfg.entropy_coef = coef;
    QwenModel host = initial;
    if (!cuda) {
      alloc_grads(host);
      TrainState state = make_train_state(host.config, to);
      OptimizerState opt = make_optimizer_state(host.num_params);
      stats = grpo_step(host, nullptr, opt, state, batch, cfg);
      return host.grads;
    }
    Policy dev = cuda_policy(host);
    PolicyActivations acts = policy_init_training(dev, to, cfg.adamw);
    OptimizerState opt;
    stats = grpo_step(dev, nullptr, opt, acts, batch, cfg);
    return download_grads(dev.cuda);
  };
  // Large enough that the bonus is most of the gradient (on the CPU: |bonus| 13.3 against 6.4
  // for the policy term on this near-uniform model), so the budget below is meaningful.
  const float C = 5.0f;
  GrpoStepStats cpu_off, cpu_on, dev_off, dev_on;
  const std::vector<float> g_cpu_off = step(false, 0.0f, cpu_off), g_cpu_on = step(false, C, cpu_on);
  auto norm = [](const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += static_cast<double>(x) * x;
    return std::sqrt(s);
  };
  std::vector<float> bonus_cpu(g_cpu_on.size()), bonus_dev(g_cpu_on.size());
  for (size_t k = 0; k < bonus_cpu.size(); ++k) bonus_cpu[k] = g_cpu_on[k] - g_cpu_off[k];
  const double budget = 5e-2 * (norm(g_cpu_on) + norm(g_cpu_off));
  // The CPU half (runs without a device): the premise that gives the comparison its teeth.
  ASSERT_GT(norm(bonus_cpu), 4 * budget) << "the bonus is too small a part of the gradient to check";

  SQLRL_REQUIRE_CUDA();
  const std::vector<float> g_dev_off = step(true, 0.0f, dev_off), g_dev_on = step(true, C, dev_on);
  for (size_t k = 0; k < bonus_cpu.size(); ++k) bonus_dev[k] = g_dev_on[k] - g_dev_off[k];
  double diff = 0;
  for (size_t k = 0; k < bonus_cpu.size(); ++k)
    diff += (static_cast<double>(bonus_dev[k]) - bonus_cpu[k]) * (static_cast<double>(bonus_dev[k]) - bonus_cpu[k]);
  diff = std::sqrt(diff);
  std::printf("entropy bonus: |bonus grad| cpu %.4g, |cuda - cpu| %.3g (budget %.3g); gradient rel L2 %.3g; loss cpu "
              "%.6g cuda %.6g\n", norm(bonus_cpu), diff, budget, sqlrl::testing::relative_l2(g_dev_on, g_cpu_on), cpu_on.loss,
              dev_on.loss);
  EXPECT_LE(diff, budget);
  EXPECT_LE(sqlrl::testing::relative_l2(g_dev_on, g_cpu_on), 5e-2);
  EXPECT_NEAR(dev_on.loss - dev_off.loss, cpu_on.loss - cpu_off.loss,
              0.02 * std::fabs(cpu_on.loss - cpu_off.loss) + 1e-6);
}

// Per-token log-probs of tokens[1..n) of each trajectory under softmax(logits / temperature) on
// a device policy, one trajectory per forward (the CPU's: grpo_fixture.h trajectory_logprobs).
std::vector<std::vector<float>> device_logprobs(const Policy& policy, PolicyActivations& acts,
                                                const std::vector<Trajectory>& batch, float temperature) {
  std::vector<std::vector<float>> out;
  for (const Trajectory& t : batch) {
    std::vector<int32_t> in(t.tokens.begin(), t.tokens.end() - 1), tg(t.tokens.begin() + 1, t.tokens.end());
    std::vector<float> lp(tg.size());
    policy_forward_logprobs(policy, acts, pack_sequences({in}), tg, lp.data(), nullptr, 1.0f / temperature);
    out.push_back(lp);
  }
  return out;
}

// The step with the ratio away from 1 and a reference that differs from the policy, so the clip
// and KL branches run on both devices (the test above has ratio = 1 and KL = 0 by construction).
// Catches a CUDA step that ignores the old log-probs (no clipping, ratio 1) or the reference
// (KL 0), or takes a clip branch the CPU does not.
//
// Budget: the premise, checked first, is that the device's bf16 forward gives each log-prob
// within eps = 0.1 nats of the CPU's f32 one (the CPU emulator of the CUDA kernels measured 0.056
// on this batch: bf16 logits divided by the temperature 0.6). The old log-probs are the CPU
// policy's shifted by ±0.05 / ±0.6 nats, so every ratio is e^{±0.05} or e^{±0.6}: at least 0.17
// nats from a clip edge (ln 0.8, ln 1.28) > eps, and the two devices take the same branch at
// every token (the clip fraction is equal exactly). Per token, a
// log-prob error of at most eps moves the ratio by r (e^eps - 1), the old-minus-new term by eps,
// and k3(d) = e^d - d - 1 (d = ref - logp, both off by eps) by at most e^d (e^{2 eps} - 1) + 2 eps;
// the loss is their token mean with |A| <= (G - 1) / sqrt(G) (a standardised score with the
// unbiased std).
TEST(GrpoCuda, ClipAndKlBranchesMatchTheCpuWithRatioAwayFromOne) {
  const QwenModel initial = bf16_model(512, 7), reference = bf16_model(512, 8);
  const float temperature = 0.6f;
  const double eps = 0.1, offsets[4] = {0.6, -0.05, 0.05, -0.6};
  std::vector<Trajectory> batch = batch_of_two_groups();
  const std::vector<std::vector<float>> lp = trajectory_logprobs(initial, batch, nullptr, temperature),
                                        ref_lp = trajectory_logprobs(reference, batch, nullptr, temperature);
  double tokens = 0, clipped = 0, ratio_budget = 0, kl_budget = 0, loss_budget = 0;
  const double a_max = 2.0 / std::sqrt(3.0), kl_coef = 0.1;
  for (size_t i = 0; i < batch.size(); ++i)
    for (size_t p = 0; p < lp[i].size(); ++p) {
      if (!batch[i].policy_mask[p + 1]) continue;
      const double off = offsets[(i + p) % 4], r = std::exp(off), d = ref_lp[i][p] - lp[i][p];
      batch[i].sampler_logprobs[p + 1] = static_cast<float>(lp[i][p] - off);
      const bool inside = r > 0.8 && r < 1.28;
      tokens += 1, clipped += !inside;
      ratio_budget += r * std::expm1(eps);
      const double dk3 = std::exp(d) * std::expm1(2 * eps) + 2 * eps;
      kl_budget += dk3;
      loss_budget += (inside ? a_max * r * std::expm1(eps) : 0.0) + kl_coef * dk3;
    }
  GrpoConfig cfg = config(static_cast<float>(kl_coef));
  cfg.clip_high = 0.28f;
  cfg.use_sampler_logprobs = true;
  cfg.temperature = temperature;
  TrainOptions to;
  to.max_tokens = 128;
  // The CPU step first (it runs without a device too): every planned branch is taken there.
  QwenModel cpu = initial, cpu_ref = reference;
  alloc_grads(cpu);
  TrainState state = make_train_state(cpu.config, to);
  OptimizerState cpu_opt = make_optimizer_state(cpu.num_params);
  GrpoStepStats want = grpo_step(cpu, &cpu_ref, cpu_opt, state, batch, cfg);
  ASSERT_EQ(want.tokens, static_cast<int64_t>(tokens));
  ASSERT_GT(clipped, 0) << "the case must put ratios outside the clip range";
  // A token counts as clipped only where the clipped branch is the larger loss: ratios above the
  // range with A > 0, below it with A < 0 (A = 0 tokens never), so at most the planned count.
  EXPECT_GT(want.clip_fraction, 0.0);
  EXPECT_LE(want.clip_fraction, clipped / tokens);
  EXPECT_GT(want.ref_kl, 0.0);

  SQLRL_REQUIRE_CUDA();
  QwenModel dev_host = initial, ref_host = reference;
  Policy dev = cuda_policy(dev_host), ref = cuda_frozen_policy(ref_host);
  PolicyActivations acts = policy_init_training(dev, to, cfg.adamw);
  // The premise: device log-probs within eps of the CPU's, policy and reference.
  for (const auto& [policy, expected] : {std::pair<const Policy*, const std::vector<std::vector<float>>*>{&dev, &lp},
                                         {&ref, &ref_lp}}) {
    const std::vector<std::vector<float>> got = device_logprobs(*policy, acts, batch, temperature);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
      for (size_t p = 0; p < got[i].size(); ++p)
        worst = std::max(worst, std::fabs(static_cast<double>(got[i][p]) - (*expected)[i][p]));
    ASSERT_LE(worst, eps) << "device log-probs are further from the CPU's than the budget assumes";
  }
  OptimizerState dev_opt;
  GrpoStepStats got = grpo_step(dev, &ref, dev_opt, acts, batch, cfg);
  std::printf("clip %.4f / %.4f, ref_kl %.5g / %.5g, loss %.6g / %.6g (cpu / cuda)\n", want.clip_fraction,
              got.clip_fraction, want.ref_kl, got.ref_kl, want.loss, got.loss);
  ASSERT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.clip_fraction, want.clip_fraction);  // the same branch at every token
  EXPECT_NEAR(got.ratio_mean, want.ratio_mean, ratio_budget / tokens + 1e-6);
  EXPECT_NEAR(got.approx_kl, want.approx_kl, eps + 1e-6);
  EXPECT_NEAR(got.ref_kl, want.ref_kl, kl_budget / tokens + 1e-6);
  EXPECT_NEAR(got.loss, want.loss, loss_budget / tokens + 1e-6);
  // Gradients: within the bf16 backward's ~2.6% relative L2 (tests/model_cuda), as above.
  EXPECT_NEAR(got.grad_norm, want.grad_norm, 0.05 * want.grad_norm);
}

// GRPO of a LoRA adapter on the CUDA policy (the base uploaded frozen, the adapter attached; the
// KL reference the same device weights with the adapter off: policy_base) against the CPU's LoRA
// step on the same fixture, for 2 steps. The adapter has a non-zero B (bf16_adapter), so the
// policy and its reference differ from the first step: an adapter the device forward ignored
// gives ref_kl 0, a reference that applied it too gives ref_kl 0, and one whose gradients or
// update went to the wrong buffer leaves the adapter unchanged or the base changed.
//
// Budgets, those of StepMatchesTheCpuWithinBf16AndAdamWIsExact scaled to the adapter's extra
// roundings where they depend on them:
//  - loss: the policy term is exact at ratio 1 (one epoch, as there); the KL term is kl_coef
//    times a token mean of k3(d) ~ d^2 / 2 with d = ref - logp, the adapter's effect on a
//    log-prob. test_lora_cuda.cpp holds the device's effect within 0.4 of the effect's norm in L2
//    with a 12-sigma budget (an expected error of a sixth of it); at an error share e <= 0.2 the
//    mean of d^2 moves by a factor in [(1 - e)^2, (1 + e)^2] = [0.64, 1.44]: ref_kl within 50%,
//    and the loss within kl_coef * 0.5 * ref_kl;
//  - grad norm: the adapter's gradients within kGradSigmas sqrt(2R) u relative L2
//    (test_lora_cuda.cpp, R = bf16_lora_roundings), so the norm too (triangle inequality);
//  - entropy: the existing 2%, scaled by sqrt(R_lora / R_base) (the logits' error grows so);
//  - the first update, parameter by parameter: as SftCuda's FirstUpdateMovesEachParameter (from
//    zero moments AdamW moves each parameter by ~lr sign(g) plus the same weight decay on both
//    devices; they differ only where bf16 flips a near-zero gradient's sign): 0.5 relative L2.
TEST(GrpoCuda, LoraStepsTrainTheAdapterAloneAsTheCpuDoes) {
  const QwenModel initial = bf16_model(512, 7);
  const LoraAdapter start = bf16_adapter(initial.config, 5);
  const std::vector<Trajectory> batch = batch_of_two_groups();
  const float kl_coef = 0.1f;
  GrpoConfig cfg = config(kl_coef);
  TrainOptions to;
  to.max_tokens = 128;

  // CPU: the adapter on the policy, the base alone as the reference (what train_loop builds).
  QwenModel cpu = initial;
  LoraAdapter cpu_ad = start;
  Policy cp = cpu_policy(cpu);
  policy_attach_lora(cp, &cpu_ad);
  Policy cpu_ref = policy_base(cp);
  PolicyActivations cpu_acts = policy_init_training(cp, to, cfg.adamw);
  OptimizerState cpu_opt = make_optimizer_state(cpu_ad.num_params);
  const GrpoStepStats want = grpo_step(cp, &cpu_ref, cpu_opt, cpu_acts, batch, cfg);
  const std::vector<float> cpu_after1 = cpu_ad.params;
  ASSERT_GT(want.ref_kl, 0.0) << "the adapter must move the policy away from its base";
  ASSERT_NE(cpu_after1, start.params);

  SQLRL_REQUIRE_CUDA();

  QwenModel dev_host = initial;
  LoraAdapter dev_ad = start;
  Policy dev = cuda_frozen_policy(dev_host);
  policy_attach_lora(dev, &dev_ad);
  Policy ref = policy_base(dev);
  EXPECT_EQ(ref.cuda.weights.data(), dev.cuda.weights.data()) << "the reference must share the base, not copy it";
  EXPECT_EQ(policy_num_trainable(dev), start.num_params);
  const std::vector<uint16_t> base_bits = device_weight_bits(dev);
  PolicyActivations acts = policy_init_training(dev, to, cfg.adamw);
  OptimizerState dev_opt;
  const GrpoStepStats got = grpo_step(dev, &ref, dev_opt, acts, batch, cfg);
  std::printf("LoRA step 1: loss cpu %.6g cuda %.6g, grad norm cpu %.6g cuda %.6g, entropy cpu %.6g cuda %.6g, "
              "ref_kl cpu %.5g cuda %.5g\n", want.loss, got.loss, want.grad_norm, got.grad_norm, want.entropy, got.entropy,
              want.ref_kl, got.ref_kl);
  ASSERT_EQ(got.updates, 1);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_NEAR(got.ref_kl, want.ref_kl, 0.5 * want.ref_kl);
  EXPECT_NEAR(got.loss, want.loss, kl_coef * 0.5 * want.ref_kl + 1e-6);
  const double R = bf16_lora_roundings(initial.config), R0 = sqlrl::testing::bf16_roundings(initial.config);
  const double grad_budget = 4 * std::sqrt(2 * R) * sqlrl::testing::kBf16Roundoff;
  EXPECT_NEAR(got.grad_norm, want.grad_norm, grad_budget * want.grad_norm);
  EXPECT_NEAR(got.entropy, want.entropy, 0.02 * std::sqrt(R / R0) * want.entropy);

  // The first update of each adapter parameter against the CPU's.
  policy_download(dev, dev_host);
  double diff = 0, norm = 0;
  int64_t moved = 0;
  for (size_t i = 0; i < start.params.size(); ++i) {
    const double dc = double(cpu_after1[i]) - start.params[i], dd = double(dev_ad.params[i]) - start.params[i];
    diff += (dd - dc) * (dd - dc), norm += dc * dc;
    moved += dc != 0;
  }
  std::printf("LoRA first update: %lld of %lld adapter parameters moved on the CPU; ||d_cuda - d_cpu|| / ||d_cpu|| = "
              "%.3f\n", static_cast<long long>(moved), static_cast<long long>(start.num_params), std::sqrt(diff / norm));
  ASSERT_GT(moved, start.num_params / 4);
  EXPECT_LE(std::sqrt(diff / norm), 0.5);

  // A second step: the adapter moves on, the base stays bit for bit (on the device and the host).
  const std::vector<float> after1 = dev_ad.params;
  const GrpoStepStats got2 = grpo_step(dev, &ref, dev_opt, acts, batch, cfg);
  EXPECT_EQ(got2.updates, 1);
  EXPECT_EQ(dev_opt.adam_step, 2);
  EXPECT_TRUE(std::isfinite(got2.loss));
  policy_download(dev, dev_host);
  EXPECT_NE(dev_ad.params, after1);
  EXPECT_EQ(device_weight_bits(dev), base_bits);
  EXPECT_EQ(dev_host.params, initial.params);

  // The adapter's moments round-trip through the host (resume), sized to the adapter.
  OptimizerState moments;
  policy_download_optimizer(dev, moments);
  ASSERT_EQ(moments_size(moments), start.num_params);
  OptimizerState zeros = make_optimizer_state(start.num_params), back;
  zeros.m[3] = 0.25f, zeros.v[5] = 2.0f;
  policy_upload_optimizer(dev, zeros);
  policy_download_optimizer(dev, back);
  EXPECT_EQ(back.m, zeros.m);
  EXPECT_EQ(back.v, zeros.v);
}

TEST(GrpoCuda, WithoutADeviceTheCudaPolicyFailsNamingIt) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  QwenModel m = bf16_model(64, 1);
  try {
    cuda_policy(m);
    FAIL() << "cuda_policy succeeded without a device";
  } catch (const std::exception& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("device cuda"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace sqlrl::rl::testing
