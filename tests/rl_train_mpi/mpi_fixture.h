// What the multi-process test executables of this area share: the job's communicator, a folder
// every rank names the same, and a main that joins the job and fails it when any rank failed.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rl/optimizer.h"
#include "rl/sft/sft.h"
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

// `count` toy SFT sequences of min_len + [0, span) tokens, the same draws on every rank and platform
// (a fixed LCG): an untrained prompt (the first third), then trained tokens.
inline std::vector<SftSequence> toy_sft_data(int64_t vocab, int count, int64_t min_len, int64_t span) {
  std::vector<SftSequence> data;
  uint32_t x = 11;
  auto next = [&x] { return x = x * 1664525u + 1013904223u, x >> 8; };
  for (int i = 0; i < count; ++i) {
    SftSequence s;
    const int64_t len = min_len + static_cast<int64_t>(next() % static_cast<uint32_t>(span));
    for (int64_t t = 0; t < len; ++t) {
      s.tokens.push_back(static_cast<int32_t>(next() % static_cast<uint32_t>(vocab)));
      s.mask.push_back(t >= len / 3);
    }
    s.source = "toy:" + std::to_string(i);
    data.push_back(std::move(s));
  }
  return data;
}

// One SFT run of `model` (a copy) into `out` (comm null: one process), with grad_accum micro-batch
// shards per update. Returns this rank's moment count and the parameter count.
inline std::pair<int64_t, int64_t> run_toy_sft(QwenModel model, const std::vector<SftSequence>& data, SftConfig c,
                                               int64_t grad_accum, const std::string& out, const Comm* comm,
                                               int64_t zero_stage, DeviceType device = DeviceType::CPU) {
  OptimizerState opt;
  c.grad_accum = grad_accum;
  SftRunOptions ro;
  ro.out_dir = out;
  ro.comm = comm;
  ro.zero_stage = zero_stage;
  ro.device = device;
  ro.tensorboard = false;
  run_sft(model, opt, data, c, ro);
  return {moments_size(opt), model.num_params};
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
