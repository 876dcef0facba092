// Data-parallel GRPO under `mpirun -np N` (ctest: N = 2 and 4). The toy environment of
// tests/rl_train (a random tiny Qwen3 whose groups have reward variance from the first step, so
// every update has a non-zero gradient) is trained for a few steps by all N ranks together; rank 0
// then trains it alone with --grad-accum N, and the two runs' checkpoints must be the same bytes:
// weights and AdamW moments, for ZeRO 0 to 3. SFT likewise (one micro-batch per rank per update
// against --grad-accum N). Resume across world sizes: N ranks stop after 2 steps, one process
// resumes with --grad-accum N and must reach the same step-3 bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "rl/grpo/train.h"
#include "rl/sft/sft.h"
#include "runtime/comm.h"
#include "tests/rl_grpo/grpo_fixture.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/rl_train_mpi/mpi_fixture.h"

namespace sqlrl::rl::testing {
namespace {


TrainConfig mpi_config(const std::string& out) {
  TrainConfig c = toy_config(out);
  c.batch_size = 4;  // 2 or 1 prompts of 8 samples per rank
  c.max_steps = 3;
  c.mini_batches = 2;
  c.save_every = 1;
  return c;
}

std::string bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<nlohmann::json> metrics(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The grpo_step figures are reduced in shard order on both sides: equal bits. (The trajectory
// means are sums in another grouping, so they may differ in the last bit; they are not compared.)
void expect_same_training(const std::string& dp, const std::string& one, int64_t step, int sharded_world = 1) {
  const std::string ck = "/checkpoints/step-" + std::to_string(step);
  EXPECT_TRUE(bytes(dp + ck + "/model.safetensors") == bytes(one + ck + "/model.safetensors"))
      << "weights differ at step " << step;
  expect_same_optimizer(dp + ck, one + ck, sharded_world, str_cat("AdamW moments at step ", step));
  std::vector<nlohmann::json> a = metrics(dp), b = metrics(one);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    for (const char* k : {"loss", "grad_norm", "clip_fraction", "entropy", "updates", "trained_tokens", "trajectories"})
      EXPECT_EQ(a[i][k], b[i][k]) << k << " at step " << i + 1;
  // Not a vacuous comparison: every step trained on something.
  for (const auto& m : a) {
    EXPECT_GT(m["grad_norm"].get<double>(), 0.0);
    EXPECT_GT(m["filtered"]["kept"].get<int64_t>(), 0);
  }
}

class RanksVsGradAccum : public ::testing::TestWithParam<int> {};

TEST_P(RanksVsGradAccum, BitIdenticalCheckpoints) {
  const int zero = GetParam();
  const std::string dp = shared_dir("dp_zero" + std::to_string(zero));
  {
    TrainConfig c = mpi_config(dp);
    c.zero_stage = zero;
    TrainEnv env = toy_env(c);
    env.comm = &g_comm;
    run_training(env, true);
  }
  if (g_comm.is_root()) {
    const std::string one = fresh_dir("accum_zero" + std::to_string(zero));
    TrainConfig c = mpi_config(one);
    c.grad_accum = g_comm.world_size;
    TrainEnv env = toy_env(c);
    run_training(env, true);
    for (int64_t step = 1; step <= 3; ++step) expect_same_training(dp, one, step, zero > 0 ? g_comm.world_size : 1);
  }
  comm_barrier(g_comm);
}

INSTANTIATE_TEST_SUITE_P(Zero, RanksVsGradAccum, ::testing::Values(0, 1, 2, 3));

// N ranks with --grad-accum 2 hold two shards each: 2N shards added in shard order, the bits of
// one process with --grad-accum 2N (so a run resumed on half the ranks with twice the grad-accum
// continues bit for bit). ZeRO 0 and 3: the norm's slices, the reduce-scatter of two parts per
// rank and the optimizer slices of grouped shard bounds all take part.
class RanksTimesGradAccum : public ::testing::TestWithParam<int> {};

TEST_P(RanksTimesGradAccum, BitIdenticalToOneProcessWithEveryShard) {
  const int zero = GetParam(), W = g_comm.world_size;
  auto config = [&](const std::string& out) {
    TrainConfig c = mpi_config(out);
    c.batch_size = 2 * W;  // one prompt per shard
    c.zero_stage = zero;
    return c;
  };
  const std::string dp = shared_dir("dpx2_zero" + std::to_string(zero));
  {
    TrainConfig c = config(dp);
    c.grad_accum = 2;
    TrainEnv env = toy_env(c);
    env.comm = &g_comm;
    run_training(env, true);
  }
  if (g_comm.is_root()) {
    const std::string one = fresh_dir("accumx2_zero" + std::to_string(zero));
    TrainConfig c = config(one);
    c.grad_accum = 2 * W;
    TrainEnv env = toy_env(c);
    run_training(env, true);
    for (int64_t step = 1; step <= 3; ++step) expect_same_training(dp, one, step, zero > 0 ? W : 1);
  }
  comm_barrier(g_comm);
}

INSTANTIATE_TEST_SUITE_P(Zero, RanksTimesGradAccum, ::testing::Values(0, 3));

// SFT on N ranks (one micro-batch each per update) writes the bytes of one process with
// --grad-accum N, whatever the ZeRO stage: a slice updated with the wrong gradient, moments or
// offsets, or a gather that misplaces a slice, changes the weights or the moments file.
// With --grad-accum A on every rank: N x A micro-batches per update against one process's N x A.
class SftRanksVsGradAccum : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(SftRanksVsGradAccum, BitIdenticalCheckpoints) {
  const auto [zero, accum] = GetParam();
  QwenConfig qc;
  qc.arch = QwenArch::Qwen3;
  qc.vocab_size = 64, qc.hidden_size = 32, qc.intermediate_size = 64, qc.num_hidden_layers = 2;
  qc.num_attention_heads = 4, qc.num_key_value_heads = 2, qc.head_dim = 8, qc.tie_word_embeddings = true;
  qc.rope_theta = 10000.0, qc.max_position_embeddings = 512;
  SftConfig cfg;
  cfg.lr = 1e-2f;
  cfg.max_steps = 3;
  cfg.micro_batch_tokens = 64;  // several micro-batches: each rank gets its own
  cfg.save_every = 1;
  const QwenModel start = sqlrl::testing::random_model(qc, 7, 0.05f);
  const std::vector<SftSequence> data = toy_sft_data(qc.vocab_size, 24, 12, 20);
  auto run = [&](const std::string& out, const Comm* comm, int64_t grad_accum) {
    return run_toy_sft(start, data, cfg, grad_accum, out, comm, zero);
  };
  const std::string name = str_cat(zero, "_x", accum);
  const std::string dp = shared_dir("sft_dp_zero" + name);
  // ZeRO 1-3 keep this rank's slice of the moments (not a vacuous comparison of ZeRO 0 twice).
  const auto [moments, n] = run(dp, &g_comm, accum);
  const std::vector<int64_t> b = shard_bounds(n, g_comm.world_size * accum);
  EXPECT_EQ(moments, zero == 0 ? n : b[(g_comm.rank + 1) * accum] - b[g_comm.rank * accum]);
  if (g_comm.is_root()) {
    const std::string one = fresh_dir("sft_accum_zero" + name);
    run(one, nullptr, g_comm.world_size * accum);
    for (int64_t step = 1; step <= 3; ++step) {
      const std::string ck = "/checkpoints/step-" + std::to_string(step);
      EXPECT_TRUE(bytes(dp + ck + "/model.safetensors") == bytes(one + ck + "/model.safetensors")) << "weights, step "
                                                                                                   << step;
      expect_same_optimizer(dp + ck, one + ck, zero > 0 ? g_comm.world_size : 1, str_cat("moments, step ", step));
    }
    std::vector<nlohmann::json> a = metrics(dp), b = metrics(one);
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(b.size(), 3u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << i;
      EXPECT_EQ(a[i]["grad_norm"], b[i]["grad_norm"]) << i;
      EXPECT_GT(a[i]["grad_norm"].get<double>(), 0.0) << i;
    }
  }
  comm_barrier(g_comm);
}

INSTANTIATE_TEST_SUITE_P(Zero, SftRanksVsGradAccum,
                         ::testing::Values(std::pair{0, 1}, std::pair{1, 1}, std::pair{2, 1}, std::pair{3, 1},
                                           std::pair{0, 2}, std::pair{3, 2}));

// Dynamic sampling on N ranks keeps the groups one process keeps: the first batch-size
// informative groups in draw order (tries, then ranks, then prompts), whatever rank rolled them out.
TEST(TrainMpi, DynamicSamplingKeepsTheGroupsOfOneProcess) {
  const std::string dp = shared_dir("dp_dynamic");
  auto config = [](const std::string& out) {
    TrainConfig c = mpi_config(out);
    c.dynamic_sampling = true;
    return c;
  };
  {
    TrainEnv env = toy_env(config(dp));
    half_flat_scorer(env, nullptr);
    env.comm = &g_comm;
    run_training(env, true);
  }
  if (g_comm.is_root()) {
    const std::string one = fresh_dir("one_dynamic");
    TrainEnv env = toy_env(config(one));
    half_flat_scorer(env, nullptr);
    run_training(env, true);
    std::vector<nlohmann::json> a = metrics(dp), b = metrics(one);
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(b.size(), 3u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i]["dynamic_sampling"], b[i]["dynamic_sampling"]) << "step " << i + 1;
      EXPECT_EQ(a[i]["data_position"], b[i]["data_position"]) << "step " << i + 1;
      EXPECT_EQ(a[i]["filtered"], b[i]["filtered"]) << "step " << i + 1;
      // The same trajectories at step 1; later steps sample from weights that differ in rounding
      // (N shards' gradients are summed in another grouping than one process's).
      if (i == 0) {
        EXPECT_EQ(a[i]["trained_tokens"], b[i]["trained_tokens"]);
      }
      EXPECT_EQ(a[i]["filtered"]["zero_variance_groups"].get<int64_t>(), 0);
      EXPECT_EQ(a[i]["dynamic_sampling"]["kept_groups"].get<int64_t>(), 4);
    }
  }
  comm_barrier(g_comm);
}

TEST(TrainMpi, ResumeOnOneProcessContinuesBitForBit) {
  const std::string dp = shared_dir("dp_resume");
  {
    TrainConfig c = mpi_config(dp);
    c.max_steps = 2;
    c.zero_stage = 3;  // every rank writes its slice: one process reads them all
    TrainEnv env = toy_env(c);
    env.comm = &g_comm;
    run_training(env, true);
  }
  if (g_comm.is_root()) {
    TrainConfig c = mpi_config(dp);
    c.resume = dp;
    c.grad_accum = g_comm.world_size;
    TrainEnv env = toy_env(c);
    run_training(env, true);
    const std::string one = fresh_dir("accum_straight");
    TrainConfig s = mpi_config(one);
    s.grad_accum = g_comm.world_size;
    TrainEnv env2 = toy_env(s);
    run_training(env2, true);
    expect_same_training(dp, one, 3);
  }
  comm_barrier(g_comm);
}

// MPI's own all-reduce (not rank order): the same training up to fp32 rounding of the sums.
TEST(TrainMpi, UnorderedReduceTrainsTheSame) {
  const std::string dp = shared_dir("dp_unordered");
  TrainConfig c = mpi_config(dp);
  c.deterministic_reduce = false;
  c.max_steps = 2;
  TrainEnv env = toy_env(c);
  env.comm = &g_comm;
  run_training(env, true);
  if (g_comm.is_root()) {
    const std::string one = fresh_dir("accum_unordered");
    TrainConfig s = mpi_config(one);
    s.max_steps = 2;
    s.grad_accum = g_comm.world_size;
    TrainEnv env1 = toy_env(s);
    run_training(env1, true);
    std::vector<nlohmann::json> a = metrics(dp), b = metrics(one);
    ASSERT_EQ(a.size(), 2u);
    // The first update's gradient norm: its gradient sums N ranks' fp32 buffers in another
    // order, each element within N ulps; the norm's relative change is far below 1e-5.
    EXPECT_NEAR(a[0]["grad_norm"].get<double>(), b[0]["grad_norm"].get<double>(),
                1e-5 * b[0]["grad_norm"].get<double>());
  }
  comm_barrier(g_comm);
}

}  // namespace
}  // namespace sqlrl::rl::testing

int main(int argc, char** argv) { return sqlrl::rl::testing::run_mpi_tests(argc, argv, /*bind_gpu=*/false); }
