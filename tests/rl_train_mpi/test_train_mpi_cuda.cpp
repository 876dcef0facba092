// ZeRO 0-3 on the device path under `mpirun -np N` (ctest TrainMpiCuda.np2 and .np4): N ranks
// train GRPO (and SFT) together, then rank 0 trains alone with --grad-accum N, and the two must
// agree, on both devices with one test body:
//   - cpu: the same bytes. This is the test's CPU half: it runs in CI and checks the test's own
//     structure (the steps, the checkpoints, one optimizer shard per rank holding its slice) on
//     the head_dim-64 model the CUDA half trains, so the CUDA half cannot rot unseen;
//   - cuda (skipped without a GPU): within the budget below. On one GPU the N ranks share it and
//     exchange through host memory (runtime/comm.h comm_bind_gpu: comm.host_staged).
// What the CUDA half catches: a slice updated with another slice's gradient or moments (ZeRO
// 1-3), a bf16 copy or master not gathered after the update (the other ranks' slices stale: the
// weights of a run that trained 1/N of the model), a reduce-scatter into the wrong offset, a
// norm summed over one slice only (another clip), a ZeRO-3 master slice gathered into the wrong
// place at a checkpoint, and grad-accum shards that overwrite instead of adding on the device.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "rl/data_parallel.h"
#include "rl/grpo/grpo.h"
#include "rl/grpo/train.h"
#include "rl/run_folder.h"
#include "rl/sft/sft.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "tests/model_cuda/model_cuda_util.h"
#include "tests/rl_grpo/grpo_fixture.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/rl_train_mpi/mpi_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {


TrainConfig device_config(const std::string& out, const std::string& device) {
  TrainConfig c = toy_config(out);
  c.device = device;
  return c;
}

// Both devices' expectations of one comparison. cpu: bit for bit. cuda: N ranks add their
// gradients in another fp32 order than one rank adding its shards into one buffer (and the
// float atomics of the backward differ run to run: TrainCuda's 1e-5 between identical runs);
// the updates must agree to 1% of their size (relative L2 of the difference over the distance
// trained) and the moments to 1e-3, far below what a stale or misplaced slice gives (a whole
// slice's update missing or doubled: >= 1/N of it).
struct Agreement {
  bool exact;
  void weights(const std::vector<float>& dp, const std::vector<float>& one, const std::vector<float>& initial,
               const std::string& what) {
    ASSERT_EQ(dp.size(), one.size()) << what;
    const double moved = sqlrl::testing::relative_l2(one, initial);
    ASSERT_GT(moved, 0.0) << what << ": the steps did not train";
    if (exact) {
      EXPECT_TRUE(dp == one) << what << ": weights differ";
      return;
    }
    // relative_l2(a, b) = |a - b| / |b|: the difference over the update, both against |initial|.
    const double diff = sqlrl::testing::relative_l2(dp, one) / moved;
    std::printf("%s: ranks vs one rank with grad-accum: difference / update %.3g\n", what.c_str(), diff);
    EXPECT_LE(diff, 1e-2) << what;
  }
  void moments(const OptimizerState& dp, const OptimizerState& one, const std::string& what) {
    ASSERT_EQ(moments_size(dp), moments_size(one)) << what;
    ASSERT_GT(moments_size(one), 0) << what;
    if (exact) {
      EXPECT_TRUE(dp.m == one.m && dp.v == one.v && dp.m16 == one.m16 && dp.v16 == one.v16) << what;
      return;
    }
    const double dm = sqlrl::testing::relative_l2(dp.m, one.m), dv = sqlrl::testing::relative_l2(dp.v, one.v);
    std::printf("%s: moments relative L2 m %.3g v %.3g\n", what.c_str(), dm, dv);
    EXPECT_LE(dm, 1e-3) << what;
    EXPECT_LE(dv, 1e-3) << what;
  }
};

// Each rank wrote one shard of the checkpoint's moments, holding exactly its ZeRO slice
// (shard_bounds(n, N): grad-accum 1), or (ZeRO 0) one file of every moment.
void expect_shards(const std::string& ckpt, int zero, int64_t n) {
  if (zero == 0) {
    EXPECT_TRUE(std::filesystem::exists(ckpt + "/optimizer.safetensors")) << ckpt;
    return;
  }
  const std::vector<int64_t> b = shard_bounds(n, g_comm.world_size);
  for (int r = 0; r < g_comm.world_size; ++r) {
    const std::string shard = ckpt + "/" + optimizer_shard_name(r, g_comm.world_size);
    ASSERT_TRUE(std::filesystem::exists(shard)) << shard;
    const OptimizerState s = load_optimizer_range(ckpt, n, b[r], b[r + 1]);
    EXPECT_EQ(moments_size(s), b[r + 1] - b[r]) << shard;
  }
}

struct DeviceCase {
  const char* device;
  int zero;
};
std::string case_name(const ::testing::TestParamInfo<DeviceCase>& info) {
  return str_cat(info.param.device, "_zero", info.param.zero);
}

// GRPO at the step: the same fixed batch on both sides (a rollout's samples depend on the batch's
// shape on CUDA, so whole runs would compare different trajectories), 4 prompts of 3 samples
// with reward variance in every group; rank r takes prompts [rP/N, (r+1)P/N), the ranges one
// rank's --grad-accum N splits its batch into (rl/grpo/grpo.cpp split_by_prompt).
std::vector<Trajectory> fixed_batch(int64_t vocab) {
  uint32_t x = 5;
  auto tokens = [&](int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((x = x * 1664525u + 1013904223u) >> 8) % vocab);
    return t;
  };
  std::vector<Trajectory> batch;
  const double rewards[4][3] = {{1.0, 0.0, 0.5}, {0.2, 1.0, -1.0}, {0.0, 0.0, 1.0}, {0.7, -0.3, 0.1}};
  for (int g = 0; g < 4; ++g)
    for (int s = 0; s < 3; ++s)
      batch.push_back(sqlrl::testing::make_trajectory(g, s, tokens(9 + g), {tokens(12 + 3 * s), tokens(6), tokens(5)},
                                                      rewards[g][s]));
  return batch;
}

struct StepResult {
  std::vector<float> weights;  // every parameter, gathered
  OptimizerState moments;      // this rank's slice [lo, hi) (every moment with dp.zero_stage 0)
};

// Two GRPO steps on `batch` from `model`, on the device, with the data-parallel layout `dp`.
StepResult two_steps(const std::string& device, QwenModel model, const std::vector<Trajectory>& batch,
                     const DataParallel& dp) {
  GrpoConfig cfg;
  cfg.adamw = {0.9f, 0.999f, 1e-8f, 0.01f};
  cfg.schedule.lr = 1e-3f;
  cfg.max_grad_norm = 0.5f;  // the clip is exercised: its norm must be the whole gradient's
  TrainOptions to;
  to.max_tokens = 128;  // several micro-batches per shard
  const int64_t n = model.num_params;
  const auto [lo, hi] = optimizer_slice(dp, n);
  const bool cuda = device == "cuda";
  Policy p = !cuda ? cpu_policy(model)
             : dp.zero_stage == 3 && dp.distributed() ? cuda_policy_sharded(model, lo, hi)
                                                      : cuda_policy(model);
  if (cuda) policy_shard_moments(p, lo, hi);
  PolicyActivations acts = policy_init_training(p, to, cfg.adamw);
  OptimizerState opt = cuda ? OptimizerState{} : make_optimizer_state(hi - lo);
  for (int step = 0; step < 2; ++step) {
    const GrpoStepStats st = grpo_step(p, nullptr, opt, acts, batch, cfg, dp);
    EXPECT_EQ(st.updates, 1);
    EXPECT_GT(st.grad_norm, cfg.max_grad_norm);
  }
  StepResult r;
  QwenModel out = model;
  data_parallel_download(p, dp, out);
  r.weights = out.params;
  if (cuda) policy_download_optimizer(p, opt);
  r.moments = opt;
  return r;
}

class GrpoRanksOnDevice : public ::testing::TestWithParam<DeviceCase> {};

TEST_P(GrpoRanksOnDevice, MatchOneRankWithGradAccum) {
  const auto [device, zero] = GetParam();
  const bool cuda = std::string(device) == "cuda";
  if (cuda) SQLRL_REQUIRE_CUDA();
  const std::string name = str_cat("grpo_", device, "_zero", zero);
  const TrainEnv env = toy_cuda_env(device_config(fresh_dir(name + "_model"), device));
  const std::vector<Trajectory> all = fixed_batch(static_cast<int64_t>(env.tokenizer->size()));
  const int N = g_comm.world_size, P = 4;
  std::vector<Trajectory> mine;
  for (const Trajectory& t : all)
    if (t.example_index >= g_comm.rank * P / N && t.example_index < (g_comm.rank + 1) * P / N) mine.push_back(t);
  const StepResult dp = two_steps(device, env.model, mine, DataParallel{&g_comm, 1, true, zero});
  // Every rank its own one-rank reference, to compare its slice of the moments with.
  const StepResult one = two_steps(device, env.model, all, DataParallel{nullptr, N, true, 0});
  const int64_t n = env.model.num_params;
  const auto [lo, hi] = optimizer_slice(DataParallel{&g_comm, 1, true, zero}, n);
  EXPECT_EQ(moments_size(dp.moments), hi - lo) << "this rank's moments are not its slice";
  Agreement agree{!cuda};
  agree.weights(dp.weights, one.weights, env.model.params, str_cat(name, " rank ", g_comm.rank));
  agree.moments(dp.moments, optimizer_slice_of(one.moments, lo, hi), str_cat(name, " rank ", g_comm.rank));
}

INSTANTIATE_TEST_SUITE_P(Zero, GrpoRanksOnDevice,
                         ::testing::Values(DeviceCase{"cpu", 0}, DeviceCase{"cpu", 3}, DeviceCase{"cuda", 0},
                                           DeviceCase{"cuda", 1}, DeviceCase{"cuda", 2}, DeviceCase{"cuda", 3}),
                         case_name);

// SFT: one micro-batch per rank per update against one rank's N micro-batches per update.
class SftRanksOnDevice : public ::testing::TestWithParam<DeviceCase> {};

TEST_P(SftRanksOnDevice, MatchOneRankWithGradAccum) {
  const auto [device, zero] = GetParam();
  const bool cuda = std::string(device) == "cuda";
  if (cuda) SQLRL_REQUIRE_CUDA();
  const std::string name = str_cat("sft_", device, "_zero", zero);
  const TrainEnv base = toy_cuda_env(device_config(fresh_dir(name + "_model"), device));
  SftConfig cfg;
  cfg.lr = 1e-3f;
  cfg.max_steps = 2;
  cfg.micro_batch_tokens = 64;
  cfg.save_every = 1;
  const std::vector<SftSequence> data = toy_sft_data(base.model.config.vocab_size, 16, 16, 24);
  auto run = [&](const std::string& out, const Comm* comm, int64_t grad_accum) {
    run_toy_sft(base.model, data, cfg, grad_accum, out, comm, zero, parse_device_type(device));
  };
  const std::string dp = shared_dir(name + "_dp");
  run(dp, &g_comm, 1);
  if (g_comm.is_root()) {
    const std::string one = fresh_dir(name + "_one");
    run(one, nullptr, g_comm.world_size);
    Agreement agree{!cuda};
    for (int64_t step = 1; step <= 2; ++step) {
      const std::string a = checkpoint_dir(dp, step), b = checkpoint_dir(one, step);
      const QwenModel wa = load_model(a), wb = load_model(b);
      agree.weights(wa.params, wb.params, base.model.params, str_cat(name, " step ", step));
      const int64_t n = wb.num_params;
      expect_shards(a, zero, n);
      agree.moments(load_optimizer_range(a, n, 0, n), load_optimizer_range(b, n, 0, n), str_cat(name, " moments"));
    }
  }
  comm_barrier(g_comm);
}

INSTANTIATE_TEST_SUITE_P(Zero, SftRanksOnDevice,
                         ::testing::Values(DeviceCase{"cpu", 3}, DeviceCase{"cuda", 0}, DeviceCase{"cuda", 1},
                                           DeviceCase{"cuda", 2}, DeviceCase{"cuda", 3}),
                         case_name);

}  // namespace
}  // namespace sqlrl::rl::testing

int main(int argc, char** argv) { return sqlrl::rl::testing::run_mpi_tests(argc, argv, /*bind_gpu=*/true); }
