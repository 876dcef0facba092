// sft's RUN/tb (rl/tb_log.h), read back by the independent reader of tests/tfevents_reader.h:
// every metrics.jsonl number is one scalar at its step and tag, the config is a text summary at
// step 0, and a run resumed from an earlier checkpoint logs each update exactly once.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "rl/sft/sft.h"
#include "tests/rl_sft/sft_fixture.h"
#include "tests/test_util.h"
#include "tests/tfevents_reader.h"

namespace sqlrl::rl {
namespace {
namespace fs = std::filesystem;

std::vector<SftSequence> tb_data() {
  std::vector<SftSequence> out;
  for (const char* sql : {"SELECT count(*) FROM city", "SELECT name FROM city", "SELECT id FROM city ORDER BY id",
                          "SELECT population FROM city"})
    out.push_back(tokenize_segments(
        testing::sft_tokenizer(),
        {{"<|im_start|>user\nHow many cities are there?<|im_end|>\n<|im_start|>assistant\n", false},
         {std::string("<sql>") + sql + "</sql><|im_end|>", true}}));
  return out;
}

// Each number of each metrics.jsonl line is exactly one scalar at (tag, step), equal as float32
// (simple_value is the double rounded once), and no other scalar is there.
void expect_scalars_equal_metrics(const sqlrl::testing::TbContents& tb, const std::string& run, size_t lines) {
  std::ifstream in(run + "/metrics.jsonl");
  size_t numbers = 0, n = 0;
  for (std::string line; std::getline(in, line); ++n) {
    const nlohmann::json j = nlohmann::json::parse(line);
    std::map<std::string, double> flat;
    for (const auto& [k, v] : j.items())
      if (k != "step") sqlrl::testing::tb_flatten(v, k, flat);
    for (const auto& [tag, value] : flat) {
      ++numbers;
      auto it = tb.scalars.find({tag, j["step"].get<int64_t>()});
      ASSERT_NE(it, tb.scalars.end()) << tag << " at step " << j["step"];
      ASSERT_EQ(it->second.size(), 1u) << tag << " at step " << j["step"] << " logged more than once";
      EXPECT_EQ(it->second[0], static_cast<float>(value)) << tag << " at step " << j["step"];
    }
  }
  EXPECT_EQ(n, lines);
  EXPECT_EQ(tb.scalars.size(), numbers);
}

TEST(SftTensorBoard, ScalarsAreTheMetricsAndAResumedRunLogsEachUpdateOnce) {
  const std::string run = testing::sft_temp_dir() + "/tensorboard";
  fs::remove_all(run);
  const int64_t vocab = static_cast<int64_t>(testing::sft_tokenizer().size());
  SftConfig cfg;
  cfg.lr = 3e-3f;
  cfg.epochs = 2;
  cfg.max_steps = 5;
  cfg.micro_batch_tokens = 48;
  cfg.save_every = 2;
  QwenModel model = testing::sft_model(vocab);
  OptimizerState opt;
  SftRunOptions ro;
  ro.out_dir = run, ro.tokenizer_path = "";
  ro.config_toml = "lr = 0.003\nseed = 1\n";
  run_sft(model, opt, tb_data(), cfg, ro);
  sqlrl::testing::TbContents tb = sqlrl::testing::tb_read_dir(run + "/tb");
  EXPECT_EQ(tb.files, 1);
  EXPECT_EQ(tb.file_version_first, 1);
  expect_scalars_equal_metrics(tb, run, 5);
  ASSERT_EQ(tb.texts.size(), 1u);
  EXPECT_EQ(tb.texts.begin()->first, std::make_pair(std::string("config"), int64_t{0}));
  EXPECT_EQ(tb.texts.begin()->second, std::vector<std::string>{"    lr = 0.003\n    seed = 1\n"});

  // Continue from step 2 (the later checkpoints lost): updates 3..5 once, from the new process.
  fs::remove_all(run + "/checkpoints/step-4");
  fs::remove_all(run + "/checkpoints/step-5");
  SftCheckpoint ck = read_sft_checkpoint(run + "/checkpoints/step-2");
  QwenModel resumed = load_model(run + "/checkpoints/step-2");
  OptimizerState resumed_opt = load_optimizer(run + "/checkpoints/step-2/optimizer.safetensors", resumed.num_params);
  SftRunOptions again;
  again.out_dir = run, again.tokenizer_path = "";
  again.resume = &ck;
  run_sft(resumed, resumed_opt, tb_data(), cfg, again);
  tb = sqlrl::testing::tb_read_dir(run + "/tb");
  EXPECT_EQ(tb.files, 2);
  expect_scalars_equal_metrics(tb, run, 5);
  EXPECT_EQ(tb.texts.size(), 1u);  // sft --resume writes no config of its own

  // Off: no tb folder.
  const std::string off = testing::sft_temp_dir() + "/tensorboard_off";
  fs::remove_all(off);
  SftRunOptions no;
  no.out_dir = off, no.tokenizer_path = "";
  no.tensorboard = false;
  QwenModel m2 = testing::sft_model(vocab);
  OptimizerState o2;
  run_sft(m2, o2, tb_data(), cfg, no);
  EXPECT_TRUE(fs::exists(off + "/metrics.jsonl"));
  EXPECT_FALSE(fs::exists(off + "/tb"));
}

}  // namespace
}  // namespace sqlrl::rl
