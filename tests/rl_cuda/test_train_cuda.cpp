// run_training with device cuda on the toy environment of tests/rl_train (a head_dim-64 model):
// three steps write metrics and an HF checkpoint with the device's master weights and moments;
// a run stopped after two steps and resumed reaches the same weights. Without a device,
// make_train_env refuses --device cuda with one line naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "model/lora.h"
#include "model/model.h"
#include "rl/optimizer.h"
#include "rl/grpo/train_log.h"
#include "runtime/comm.h"
#include "tests/model_cuda/model_cuda_util.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

TrainEnv cuda_env(const TrainConfig& config) { return toy_cuda_env(config); }

TrainConfig cuda_config(const std::string& name, int64_t steps) {
  TrainConfig c = toy_config(fresh_dir(name));
  c.device = "cuda";
  c.max_steps = steps;
  c.batch_size = 2, c.group_size = 4;
  c.filter_zero_variance = false;  // every step updates (weight decay at least), whatever the rewards
  return c;
}

int64_t count_lines(const std::string& path) {
  std::ifstream in(path);
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

TEST(TrainCuda, ThreeStepsWriteMetricsAndACheckpointAndResume) {
  SQLRL_REQUIRE_CUDA();
  TrainConfig full = cuda_config("cuda_train_full", 3);
  std::vector<float> initial;
  {
    TrainEnv env = cuda_env(full);
    initial = env.model.params;
    TrainSummary s = run_training(env, true);
    EXPECT_EQ(s.last_step, 3);
  }
  EXPECT_EQ(count_lines(full.out + "/metrics.jsonl"), 3);
  std::string ckpt = checkpoint_dir(full.out, 3);
  ASSERT_EQ(latest_checkpoint(full.out), ckpt);
  QwenModel trained = load_model(ckpt);
  ASSERT_EQ(trained.params.size(), initial.size());
  EXPECT_NE(trained.params, initial);
  OptimizerState opt = load_optimizer(ckpt + "/optimizer.safetensors", trained.num_params);
  EXPECT_EQ(opt.adam_step, 3);
  EXPECT_EQ(opt.train_step, 3);
  double v_sum = 0;
  for (float x : opt.v) v_sum += x;
  EXPECT_TRUE(std::isfinite(v_sum));

  TrainConfig part = cuda_config("cuda_train_part", 2);
  {
    TrainEnv env = cuda_env(part);
    run_training(env, true);
  }
  TrainConfig again = part;
  again.resume = part.out;
  again.max_steps = 3;
  {
    TrainEnv env = cuda_env(again);
    TrainSummary s = run_training(env, true);
    EXPECT_EQ(s.first_step, 2);
  }
  EXPECT_EQ(count_lines(part.out + "/metrics.jsonl"), 3);
  QwenModel resumed = load_model(checkpoint_dir(part.out, 3));
  // Resume restores the f32 master weights and moments exactly; the device's kernels then run
  // the same inputs. 1e-5 relative allows for float atomics where a kernel uses them.
  double diff = sqlrl::testing::relative_l2(resumed.params, trained.params);
  std::printf("resumed vs uninterrupted weights: relative L2 %.3g\n", diff);
  EXPECT_LE(diff, 1e-5);
}

// The memory plan's modes change where buffers live, never the arithmetic: a run with every
// layer recomputed and bf16 moments offloaded to the host between steps (moved through the
// phase region the KV cache also uses) ends on the weights and moments of a run that stores
// every layer and keeps its bf16 moments on the device. Catches moments lost or stale across
// the offload (the update then differs from the second step on), a region carve that lets the
// KV cache overwrite gradients or activations, and a recomputation that does not restore a
// layer's activations.
TEST(TrainCuda, OffloadAndRecomputationLeaveTheRunUnchanged) {
  SQLRL_REQUIRE_CUDA();
  auto run = [](const std::string& name, const char* offload, const char* recompute) {
    TrainConfig c = cuda_config(name, 3);
    c.bf16_moments = "on";
    c.offload_optimizer = offload;
    c.recompute = recompute;
    TrainEnv env = cuda_env(c);
    TrainSummary s = run_training(env, true);
    EXPECT_TRUE(s.modes.bf16_moments);
    EXPECT_EQ(s.modes.offload_optimizer, std::string(offload) == "on") << s.modes.describe();
    EXPECT_EQ(s.modes.recomputed_layers(), std::string(recompute) == "on" ? 2 : 0) << s.modes.describe();
    return c.out;
  };
  const std::string a = run("cuda_train_offload", "on", "on"), b = run("cuda_train_resident", "off", "off");
  QwenModel wa = load_model(checkpoint_dir(a, 3)), wb = load_model(checkpoint_dir(b, 3));
  OptimizerState oa = load_optimizer(checkpoint_dir(a, 3) + "/optimizer.safetensors", wa.num_params, true);
  OptimizerState ob = load_optimizer(checkpoint_dir(b, 3) + "/optimizer.safetensors", wb.num_params, true);
  double diff = sqlrl::testing::relative_l2(wa.params, wb.params);
  std::printf("offloaded+recomputed vs resident weights: relative L2 %.3g\n", diff);
  EXPECT_LE(diff, 1e-5);  // as the resume test: float atomics are the only freedom
  EXPECT_EQ(oa.adam_step, 3);
  int64_t differ = 0;
  for (size_t i = 0; i < oa.v16.size(); ++i) differ += oa.v16[i] != ob.v16[i];
  EXPECT_LE(differ, static_cast<int64_t>(oa.v16.size() / 1000)) << differ << " of " << oa.v16.size() << " v differ";
}

// `train --device cuda --lora-rank 4` (run_training with an adapter on cuda): the base uploaded
// frozen, the adapter trained through the trainer's phase region (its gradients, offloaded
// moments and the plan's LoRA scratch slot carved before the activations), the KL reference the
// base with the adapter off on the same device weights. Checks the base is untouched and the
// adapter moved, the checkpoint holds PEFT's adapter files and the adapter's moments, and, as
// OffloadAndRecomputationLeaveTheRunUnchanged does for full fine-tuning, that offloading the
// adapter's moments and recomputing layers leave the run's adapter unchanged (1e-5 relative L2:
// float atomics are the only freedom). Catches a region carve sized for the base (the plan's
// train phase holds the adapter's gradients only), adapter moments lost across the offload, and
// a checkpoint that does not download the device's adapter.
TEST(TrainCuda, LoraRunTrainsTheAdapterAloneThroughThePhaseRegion) {
  SQLRL_REQUIRE_CUDA();
  auto run = [](const std::string& name, const char* offload, const char* recompute) {
    TrainConfig c = cuda_config(name, 3);
    c.bf16_moments = "on";
    c.offload_optimizer = offload;
    c.recompute = recompute;
    c.kl_coef = 0.05;
    c.save_every = 3;
    TrainEnv env = cuda_env(c);
    LoraConfig lc;
    lc.rank = 4;
    lc.alpha = 8;
    lc.target_pattern = "all-linear";
    env.adapter = std::make_unique<LoraAdapter>(init_adapter(lc, env.model.config, 11));
    const std::vector<float> base = env.model.params, adapter = env.adapter->params;
    TrainSummary s = run_training(env, true);
    EXPECT_EQ(s.last_step, 3);
    EXPECT_EQ(s.modes.offload_optimizer, std::string(offload) == "on") << s.modes.describe();
    EXPECT_TRUE(env.model.params == base) << "a LoRA step changed the frozen base";
    EXPECT_FALSE(env.adapter->params == adapter) << "three steps left the adapter as it was";
    const std::string ckpt = checkpoint_dir(c.out, 3);
    EXPECT_TRUE(std::filesystem::exists(ckpt + "/adapter_model.safetensors"));
    EXPECT_FALSE(std::filesystem::exists(ckpt + "/model.safetensors")) << "a LoRA checkpoint wrote the frozen base";
    const LoraAdapter saved = load_adapter(ckpt, env.model);
    EXPECT_TRUE(saved.params == env.adapter->params) << "the checkpoint is not the device's adapter";
    const OptimizerState opt = load_optimizer(ckpt + "/optimizer.safetensors", env.adapter->num_params, true);
    EXPECT_EQ(moments_size(opt), env.adapter->num_params);
    EXPECT_EQ(opt.adam_step, 3);
    return saved.params;
  };
  const std::vector<float> a = run("cuda_lora_offload", "on", "on"), b = run("cuda_lora_resident", "off", "off");
  const double diff = sqlrl::testing::relative_l2(a, b);
  std::printf("LoRA offloaded+recomputed vs resident adapter: relative L2 %.3g\n", diff);
  EXPECT_LE(diff, 1e-5);
}

// The data-parallel CUDA path (rl/data_parallel.cpp) on a NCCL communicator of one rank, the
// most a one-GPU machine can run: each step's gradient goes through the ordered all-reduce (an
// all-to-all by NCCL send/recv into a receive buffer, the rank-order sum kernel writing it back,
// the all-gather) on the communicator's own stream, ordered after the backward and before AdamW
// by events. With one rank the sum is the gradient itself, so the run must end where the run
// without a communicator ends (float atomics: 1e-5). Catches a reduce that reads the gradient
// before the backward finished or that AdamW reads before the sum is written back (stream
// ordering), a wrong pointer, length or chunking (a partial gradient), and --zero-stage or
// grad-accum paths that reach NCCL when they must not.
TEST(TrainCuda, OneRankNcclCommunicatorLeavesTheRunUnchanged) {
  SQLRL_REQUIRE_CUDA();
  Comm one;
  comm_init_nccl(one, 0);
  auto run = [&](const std::string& name, const Comm* comm) {
    TrainConfig c = cuda_config(name, 3);
    TrainEnv env = cuda_env(c);
    env.comm = comm;
    TrainSummary s = run_training(env, true);
    EXPECT_EQ(s.last_step, 3);
    return c.out;
  };
  const std::string a = run("cuda_train_nccl", &one), b = run("cuda_train_plain", nullptr);
  nccl_destroy(one);
  QwenModel wa = load_model(checkpoint_dir(a, 3)), wb = load_model(checkpoint_dir(b, 3));
  const double diff = sqlrl::testing::relative_l2(wa.params, wb.params);
  std::printf("one-rank NCCL vs no communicator: weights relative L2 %.3g\n", diff);
  EXPECT_LE(diff, 1e-5);
  QwenModel initial = cuda_env(cuda_config("cuda_train_nccl_initial", 3)).model;
  EXPECT_GT(sqlrl::testing::relative_l2(wa.params, initial.params), 100 * diff) << "the steps did not train";
}

TEST(TrainCuda, WithoutADeviceDeviceCudaIsAOneLineError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  TrainConfig c = cuda_config("cuda_train_refused", 1);
  c.tiny_head_dim = 64;
  try {
    make_train_env(c);
    FAIL() << "make_train_env accepted --device cuda without a device";
  } catch (const std::exception& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("device cuda: ", 0), 0u) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_FALSE(std::filesystem::exists(c.out)) << "nothing may be written";
}

}  // namespace
}  // namespace sqlrl::rl::testing
