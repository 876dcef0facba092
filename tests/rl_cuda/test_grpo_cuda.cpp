// grpo_step() on the CUDA policy: the loss and entropy against the CPU step, the gradient norm
// within bf16 tolerance, and the device AdamW and moment download against a host AdamW applied
// to the device's own gradients (exact up to f32 rounding).
#include <gtest/gtest.h>

#include <cmath>

#include "rl/grpo/grpo.h"
#include "tests/model_cuda/model_cuda_util.h"
#include "tests/rl_cuda/rl_cuda_fixture.h"
#include "tests/rl_grpo/grpo_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

using sqlrl::testing::make_trajectory;

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
  SQLRL_REQUIRE_CUDA();
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

  QwenModel dev_host = initial, ref_host = initial;
  Policy dev = cuda_policy(dev_host), ref = cuda_reference(ref_host);
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
