// What the multi-process test executables of this area share: the job's communicator, a folder
// every rank names the same, and a main that joins the job and fails it when any rank failed.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "runtime/comm.h"
#include "runtime/device.h"
#include "tests/rl_train/train_fixture.h"

namespace sqlrl::rl::testing {

inline Comm g_comm;

// A folder every rank names the same (rank 0's temp folder).
inline std::string shared_dir(const std::string& name) {
  std::string mine = g_comm.is_root() ? fresh_dir(name) : "";
  return comm_all_gather_bytes(g_comm, mine)[0];
}

// bind_gpu: where a GPU is present, each rank binds one as `train --device cuda` does
// (comm_bind_gpu: on one GPU every rank shares it, through host-staged collectives).
inline int run_mpi_tests(int argc, char** argv, bool bind_gpu) {
  ::testing::InitGoogleTest(&argc, argv);
  g_comm = comm_init();
  if (bind_gpu && cuda_device_count() > 0) comm_bind_gpu(g_comm);
  if (!g_comm.is_root()) GTEST_FLAG_SET(brief, true);
  int failed = RUN_ALL_TESTS();
  int64_t failures = failed ? 1 : 0;
  comm_all_reduce_sum(g_comm, &failures, 1);
  comm_finalize(g_comm);
  return failures ? 1 : 0;
}

}  // namespace sqlrl::rl::testing
