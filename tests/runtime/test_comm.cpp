// runtime/comm.h in one process: where the launcher put us, the ZeRO partition, the rank-order
// sum, world-1 collectives, and the rendezvous (TCP and file) between threads standing in for
// ranks. The collectives across processes are tests/comm_mpi (under mpirun).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "runtime/comm.h"
#include "runtime/error.h"
#include "runtime/rendezvous.h"
#include "runtime/tensor.h"
#include "tests/test_util.h"

namespace sqlrl {
namespace {

using testing::error_of;

// detect_launch reads through a plain function pointer: the fake environment is a global map.
std::map<std::string, std::string> g_env;
const char* fake_env(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}
Launch launch_with(std::map<std::string, std::string> env) {
  g_env = std::move(env);
  return detect_launch(fake_env);
}

TEST(Launch, NothingSetIsOneProcess) {
  Launch l = launch_with({});
  EXPECT_EQ(l.rank, 0);
  EXPECT_EQ(l.world_size, 1);
  EXPECT_FALSE(l.under_mpi);
  EXPECT_EQ(l.source, "single process");
}

TEST(Launch, OpenMpiComesFirst) {
  Launch l = launch_with({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"SLURM_PROCID", "0"},
                          {"SLURM_STEP_NUM_TASKS", "8"}, {"RANK", "5"}, {"WORLD_SIZE", "6"}});
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_TRUE(l.under_mpi);
  EXPECT_EQ(l.source, "mpirun");
}

TEST(Launch, SrunWithPmixIsMpi) {
  Launch l = launch_with({{"PMIX_RANK", "2"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_LOCALID", "0"},
                          {"SLURM_PROCID", "2"}, {"SLURM_STEP_ID", "0"}});
  EXPECT_EQ(l.rank, 2);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_TRUE(l.under_mpi);
}

TEST(Launch, SrunStepWithoutPmi) {
  Launch l = launch_with({{"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_LOCALID", "1"},
                          {"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.world_size, 2);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_FALSE(l.under_mpi);
  EXPECT_EQ(l.source, "srun");
}

// A batch script has SLURM_PROCID=0 and the allocation's SLURM_NTASKS, but it is one process:
// reading it as a job of 8 would hang at the first collective.
TEST(Launch, BatchScriptItselfIsOneProcess) {
  Launch l = launch_with({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_JOB_ID", "77"}});
  EXPECT_EQ(l.world_size, 1);
}

TEST(Launch, TorchrunVariables) {
  Launch l = launch_with({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}});
  EXPECT_EQ(l.rank, 5);
  EXPECT_EQ(l.world_size, 8);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.source, "RANK/WORLD_SIZE");
  EXPECT_EQ(launch_with({{"RANK", "2"}, {"WORLD_SIZE", "4"}}).local_rank, 2);  // one node assumed
}

TEST(Launch, BadVariablesAreNamed) {
  EXPECT_NE(error_of([] { launch_with({{"RANK", "x1"}, {"WORLD_SIZE", "2"}}); }).find("RANK='x1'"), std::string::npos);
  EXPECT_NE(error_of([] { launch_with({{"RANK", "2"}, {"WORLD_SIZE", "2"}}); }).find("not below the world size 2"),
            std::string::npos);
  EXPECT_NE(error_of([] { launch_with({{"RANK", "1"}}); }).find("WORLD_SIZE is not"), std::string::npos);
  EXPECT_NE(error_of([] { launch_with({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "0"}}); })
                .find("OMPI_COMM_WORLD_SIZE='0'"),
            std::string::npos);
}

TEST(ShardBounds, CoverEveryElementOnceAligned) {
  for (int64_t n : {0, 1, 63, 64, 65, 1000, 4097, 123457})
    for (int world : {1, 2, 3, 4, 7}) {
      std::vector<int64_t> b = shard_bounds(n, world);
      ASSERT_EQ(b.size(), static_cast<size_t>(world + 1));
      EXPECT_EQ(b.front(), 0);
      EXPECT_EQ(b.back(), n);
      for (int r = 0; r < world; ++r) {
        EXPECT_LE(b[r], b[r + 1]) << n << " " << world;
        if (b[r] < n) {
          EXPECT_EQ(b[r] % 64, 0) << n << " " << world << " " << r;
        }
      }
      // near-equal: no shard is more than one 64-block above the even split
      for (int r = 0; r < world; ++r) EXPECT_LE(b[r + 1] - b[r], (n + world - 1) / world + 64);
    }
}

TEST(AddInRankOrder, SumsLeftToRight) {
  // 1e8 + 1 - 1e8 is 0 in fp32 left to right ((1e8 + 1) rounds to 1e8), 1 in any other order that
  // cancels the big terms first: the test fails if the order changes.
  std::vector<float> a{1e8f, 2}, b{1, 3}, c{-1e8f, 4};
  std::vector<float> out(2);
  add_in_rank_order(out.data(), {a.data(), b.data(), c.data()}, 2);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 9.0f);
  add_in_rank_order(a.data(), {a.data(), b.data(), c.data()}, 2);  // acc may be the first part
  EXPECT_EQ(a[0], 0.0f);
}

TEST(CommWorldOne, CollectivesAreIdentity) {
  Comm c;  // one process, no transport
  std::vector<float> f{1.5f, -2};
  comm_all_reduce_sum(c, f.data(), 2);
  EXPECT_EQ(f, (std::vector<float>{1.5f, -2}));
  std::vector<float> shard(2);
  comm_reduce_scatter_sum(c, f.data(), shard.data(), 2, true);
  EXPECT_EQ(shard, f);
  EXPECT_EQ(comm_all_gather_bytes(c, "abc"), (std::vector<std::string>{"abc"}));
  comm_barrier(c);
}

TEST(CommWorldOne, SeveralRanksWithoutTransportFailClearly) {
  Comm c;
  c.world_size = 2, c.rank = 1, c.source = "srun";
  int64_t x = 1;
  std::string e = error_of([&] { comm_all_reduce_sum(c, &x, 1); });
  EXPECT_NE(e.find("rank 1 of 2 (srun): no transport"), std::string::npos) << e;
}

void rendezvous_threads(const Rendezvous& r, int world) {
  std::vector<std::string> got(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      errors[rank] = error_of([&] {
        got[rank] = rendezvous_broadcast(r, rank, world, rank == 0 ? std::string("id\0with nul", 11) : "ignored");
      });
    });
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
    EXPECT_EQ(got[rank], std::string("id\0with nul", 11)) << "rank " << rank;
  }
}

TEST(Rendezvous, TcpHandsRankZerosBytesToAll) {
  Rendezvous r;
  r.addr = "127.0.0.1";
  r.port = 29400 + static_cast<int>(::getpid() % 500);
  r.timeout_s = 20;
  rendezvous_threads(r, 4);
}

TEST(Rendezvous, FileWithJobKey) {
  const std::string dir = ::testing::TempDir() + "/rdv_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  Rendezvous stale;
  stale.file = dir + "/id", stale.job_key = "old";
  rendezvous_broadcast(stale, 0, 2, "stale payload");  // an earlier job's file is left behind
  Rendezvous r = stale;
  r.job_key = "77.0", r.timeout_s = 20;
  rendezvous_threads(r, 3);
  // Alone, a peer does not take the stale file: it times out naming the key.
  Rendezvous lone = stale;
  lone.job_key = "78.0", lone.timeout_s = 0.3;
  std::string e = error_of([&] { rendezvous_broadcast(lone, 1, 2, ""); });
  EXPECT_NE(e.find("job key '78.0'"), std::string::npos) << e;
  std::filesystem::remove_all(dir);
}

TEST(Rendezvous, PeerGivesUpNamingTheAddress) {
  Rendezvous r;
  r.addr = "127.0.0.1", r.port = 1, r.timeout_s = 0.3;  // nobody listens on port 1
  std::string e = error_of([&] { rendezvous_broadcast(r, 1, 2, ""); });
  EXPECT_NE(e.find("rendezvous with 127.0.0.1:1 (rank 1)"), std::string::npos) << e;
}

// The NCCL communicator of a one-rank job (the GPU path of `train --device cuda` without
// mpirun): every device collective must give back exactly its input, and must respect the
// caller's stream order (the buffer is written on the default stream just before).
TEST(CommCuda, OneRankNcclCollectivesOnTheDevice) {
  SQLRL_REQUIRE_CUDA();
  Comm c;
  comm_init_nccl(c, 0);
  ASSERT_NE(c.nccl, nullptr);
  const int64_t n = 100003;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 977) * 0.37f - 100.0f;
  Tensor full = from_floats(x, {n}, DType::F32, cuda_device(0));
  Tensor shard = zeros({n}, DType::F32, cuda_device(0));
  const CudaStream def{};
  comm_all_reduce_sum_device(c, static_cast<float*>(full.data()), n, def);
  comm_reduce_scatter_sum_device(c, static_cast<float*>(full.data()), static_cast<float*>(shard.data()), n, true, def);
  EXPECT_EQ(to_floats(shard), x);
  fill(shard, 0.0f);
  comm_reduce_scatter_sum_device(c, static_cast<float*>(full.data()), static_cast<float*>(shard.data()), n, false, def);
  EXPECT_EQ(to_floats(shard), x);
  comm_all_gather_device(c, static_cast<float*>(full.data()), n, def);
  EXPECT_EQ(to_floats(full), x);
  int64_t k = 41;
  comm_all_reduce_sum(c, &k, 1);  // world 1: nothing to do, whatever the transport
  EXPECT_EQ(k, 41);
  comm_finalize(c);
  EXPECT_EQ(c.nccl, nullptr);
}

}  // namespace
}  // namespace sqlrl
