// `llm_sqlrl demo --device cuda` at the mini size with head_dim 64: every stage runs on the device
// and says so, and SFT starts where the CPU run starts (same init, same data: the first loss
// differs by bf16 rounding alone) and learns as it does.
//
// The CPU half runs first, without a device (in CI): the same mini run on the CPU must meet every
// expectation the device run is held to (expect_mini_run), so an expectation that stops holding
// for the demo itself (a stage added, a count changed) fails here on every machine, not only on
// the rare one with a GPU. The stage list comes from the demo (demo_stage_names), not a count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "rl/demo/demo.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace sqlrl::rl {
namespace {

DemoConfig mini_config(const std::string& name, const std::string& device) {
  DemoConfig c;
  c.out = sqlrl::testing::process_temp_path(name).string();
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

// What a mini run must show on either device: the demo's stages in its order, each evaluated on
// every dev question; a reward mean per GRPO step; SFT that learns; the device named in the
// report, the evaluation summaries and (off the CPU, where it is the default) the table.
void expect_mini_run(const DemoConfig& c, const DemoReport& r) {
  std::vector<std::string> names;
  for (const DemoStage& s : r.stages) names.push_back(s.name);
  EXPECT_EQ(names, demo_stage_names(c.sizes)) << c.device;
  EXPECT_EQ(static_cast<int64_t>(r.rl_reward_means.size()), c.sizes.rl_steps) << c.device;
  EXPECT_EQ(r.dev_questions, c.sizes.dev_limit) << c.device;
  for (const DemoStage& s : r.stages) {
    // The base stage answers a spread of base_dev_limit questions when that is fewer.
    const int64_t n = s.name == "base" && c.sizes.base_dev_limit > 0
                          ? std::min(c.sizes.base_dev_limit, r.dev_questions)
                          : r.dev_questions;
    EXPECT_EQ(s.multi.total.n, n) << c.device << " " << s.name;
  }
  EXPECT_LT(r.sft_last_loss, r.sft_first_loss) << c.device;
  EXPECT_EQ(read_json(fs::path(c.out) / "report.json")["device"], c.device);
  EXPECT_EQ(read_json(fs::path(c.out) / "eval/rl-multi/summary.json")["device"], c.device);
  EXPECT_EQ(demo_table(r).find("device " + c.device) != std::string::npos, c.device != "cpu") << demo_table(r);
}

TEST(DemoCuda, MiniRunTrainsOnTheDeviceAsTheCpuDoes) {
  // The CPU half.
  const DemoConfig cc = mini_config("sqlrl_test_demo_cuda_cpu", "cpu");
  const DemoReport cpu = run_demo(cc);
  expect_mini_run(cc, cpu);
  fs::remove_all(cc.out);

  SQLRL_REQUIRE_CUDA();
  const DemoConfig gc = mini_config("sqlrl_test_demo_cuda", "cuda");
  const DemoReport gpu = run_demo(gc);
  expect_mini_run(gc, gpu);
  std::printf("SFT loss: cuda %.4f -> %.4f, cpu %.4f -> %.4f\n", gpu.sft_first_loss, gpu.sft_last_loss,
              cpu.sft_first_loss, cpu.sft_last_loss);
  // bf16 weights move a random model's per-token loss by well under 1% (test_sft_cuda.cpp: 2%).
  EXPECT_LE(std::fabs(gpu.sft_first_loss - cpu.sft_first_loss), 0.02 * cpu.sft_first_loss);
  fs::remove_all(gc.out);
}

}  // namespace
}  // namespace sqlrl::rl
