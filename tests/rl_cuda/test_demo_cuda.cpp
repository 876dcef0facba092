// `llm_sqlrl demo --device cuda` at the mini size with head_dim 64 (GPU only): every stage runs
// on the device and says so, and SFT starts where the CPU run starts (same init, same data: the
// first loss differs by bf16 rounding alone) and learns as it does.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "rl/demo/demo.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace sqlrl::rl {
namespace {

DemoConfig mini_config(const std::string& name, const std::string& device) {
  DemoConfig c;
  c.out = (fs::temp_directory_path() / name).string();
  fs::remove_all(c.out);
  c.sizes = demo_sizes("mini");
  c.sizes.head_dim = 64;
  c.device = device;
  return c;
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

TEST(DemoCuda, MiniRunTrainsOnTheDeviceAsTheCpuDoes) {
  SQLRL_REQUIRE_CUDA();
  DemoConfig gc = mini_config("sqlrl_test_demo_cuda", "cuda"), cc = mini_config("sqlrl_test_demo_cuda_cpu", "cpu");
  DemoReport gpu = run_demo(gc), cpu = run_demo(cc);
  ASSERT_EQ(gpu.stages.size(), 3u);
  EXPECT_EQ(static_cast<int64_t>(gpu.rl_reward_means.size()), gc.sizes.rl_steps);
  for (const DemoStage& s : gpu.stages) EXPECT_EQ(s.multi.total.n, gpu.dev_questions) << s.name;
  std::printf("SFT loss: cuda %.4f -> %.4f, cpu %.4f -> %.4f\n", gpu.sft_first_loss, gpu.sft_last_loss,
              cpu.sft_first_loss, cpu.sft_last_loss);
  // bf16 weights move a random model's per-token loss by well under 1% (test_sft_cuda.cpp: 2%).
  EXPECT_LE(std::fabs(gpu.sft_first_loss - cpu.sft_first_loss), 0.02 * cpu.sft_first_loss);
  EXPECT_LT(gpu.sft_last_loss, gpu.sft_first_loss);
  EXPECT_EQ(read_json(fs::path(gc.out) / "report.json")["device"], "cuda");
  EXPECT_EQ(read_json(fs::path(gc.out) / "eval/rl-multi/summary.json")["device"], "cuda");
  EXPECT_NE(demo_table(gpu).find("device cuda"), std::string::npos);
  fs::remove_all(gc.out);
  fs::remove_all(cc.out);
}

}  // namespace
}  // namespace sqlrl::rl
