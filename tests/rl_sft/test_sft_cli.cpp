// `llm_sqlrl sft` end to end: synth-demos -> sft on a tiny random model, and one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/file_io.h"
#include "tests/rl_sft/sft_fixture.h"
#include "tests/test_util.h"

namespace sqlrl {
namespace {

TEST(SftCli, SynthDemosThenSftWritesACheckpoint) {
  namespace fs = std::filesystem;
  const std::string dir = testing::sft_temp_dir() + "/cli";
  fs::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json", std::ios::binary) << testing::sft_tokenizer_json();
  save_model(testing::sft_model(static_cast<int64_t>(testing::sft_tokenizer().size())), dir + "/model");
  auto run = testing::run_command(std::string(SQLRL_BINARY) + " sft synth-demos --protocol skyrl --data " +
                                  testing::small_bench() + " --out " + dir + "/demos.jsonl");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("demonstrations"), std::string::npos) << run.output;
  run = testing::run_command(std::string(SQLRL_BINARY) + " sft --data " + dir + "/demos.jsonl --weights " + dir +
                             "/model --tokenizer " + dir + "/tokenizer.json --out " + dir +
                             "/run --max-steps 2 --micro-batch-tokens 4096 --lr 1e-3");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(fs::exists(dir + "/run/checkpoints/step-2/model.safetensors")) << run.output;
  std::ifstream metrics(dir + "/run/metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(metrics, line)) {
    ++lines;
    EXPECT_GT(nlohmann::json::parse(line)["tokens"].get<int64_t>(), 0) << line;  // demos fit: targets are trained
  }
  EXPECT_EQ(lines, 2);

  // The resolved settings read back with --config: the same updates, bit for bit.
  const std::string config = read_file_text(dir + "/run/config.toml");
  EXPECT_NE(config.find("max-steps = 2"), std::string::npos) << config;
  EXPECT_NE(config.find("chat-template = \"qwen3\""), std::string::npos) << "the detected template, resolved: " << config;
  run = testing::run_command(std::string(SQLRL_BINARY) + " sft --config " + dir + "/run/config.toml --out " + dir +
                             "/run_again");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(read_file_text(dir + "/run_again/checkpoints/step-2/model.safetensors"),
            read_file_text(dir + "/run/checkpoints/step-2/model.safetensors"));
  // A fresh run into a folder that holds one is refused, and nothing of it changes.
  run = testing::run_command(std::string(SQLRL_BINARY) + " sft --config " + dir + "/run/config.toml");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("already holds a run; continue it with sft --resume"), std::string::npos) << run.output;
  EXPECT_EQ(read_file_text(dir + "/run/config.toml"), config);
  // Spellings that changed are refused naming the new one.
  for (const auto& [flags, now] : {std::pair<std::string, std::string>{"synth-demos --no-naive", "--naive=false"},
                                   {"synth-demos --enable-thinking false", "--enable-thinking=false"}}) {
    run = testing::run_command(std::string(SQLRL_BINARY) + " sft " + flags + " --protocol skyrl --out " + dir + "/x.jsonl");
    EXPECT_NE(run.exit_code, 0) << flags;
    EXPECT_NE(run.output.find("is now spelled " + now), std::string::npos) << run.output;
  }
}

TEST(SftCli, BadInputIsOneLineNamingFileLineAndField) {
  const std::string dir = testing::sft_temp_dir() + "/cli_bad";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json", std::ios::binary) << testing::sft_tokenizer_json();
  save_model(testing::sft_model(static_cast<int64_t>(testing::sft_tokenizer().size())), dir + "/model");
  std::ofstream(dir + "/bad.jsonl") << "{\"tokens\": [1, 2], \"mask\": [0, 1]}\n{\"tokens\": [1, 2], \"mask\": [1]}\n";
  std::ofstream(dir + "/good.jsonl") << "{\"tokens\": [1, 2, 3], \"mask\": [0, 1, 1]}\n";
  auto run = testing::run_command(std::string(SQLRL_BINARY) + " sft --data " + dir + "/bad.jsonl --weights " + dir +
                                  "/model --tokenizer " + dir + "/tokenizer.json --out " + dir + "/run");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  EXPECT_NE(run.output.find("bad.jsonl:2"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("'mask'"), std::string::npos) << run.output;
  run = testing::run_command(std::string(SQLRL_BINARY) + " sft --weights " + dir + "/model");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("--data"), std::string::npos) << run.output;
  // 10^9 micro-batches per update allocated past 6 GiB before it failed with a bare bad_alloc.
  run = testing::run_command(std::string(SQLRL_BINARY) + " sft --grad-accum 1000000000 --data " + dir +
                             "/good.jsonl --weights " + dir + "/model --tokenizer " + dir + "/tokenizer.json --out " +
                             dir + "/run_accum");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  EXPECT_NE(run.output.find("sft: grad-accum 1000000000 is above 65536 micro-batches per update"), std::string::npos)
      << run.output;
  run = testing::run_command(std::string(SQLRL_BINARY) + " sft --device tpu --weights " + dir + "/model");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("sft: device 'tpu' is not cpu or cuda"), std::string::npos) << run.output;
  // Without a GPU --device cuda stops before the model is read; with one, this model's head_dim
  // (not 64 or 128) is refused by name. Either way one line, and no run folder.
  run = testing::run_command(std::string(SQLRL_BINARY) + " sft --device cuda --data " + dir + "/good.jsonl --weights " +
                             dir + "/model --tokenizer " + dir + "/tokenizer.json --out " + dir + "/run_cuda");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  EXPECT_NE(run.output.find(cuda_device_count() == 0 ? "sft: --device cuda: " : "head_dim"), std::string::npos)
      << run.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/run_cuda/checkpoints"));
  // sft self-taught refuses alike (its rollouts would run on the device too), before any round.
  const std::string self_taught = std::string(SQLRL_BINARY) + " sft self-taught --protocol skyrl --data " +
                                  testing::small_bench() + " --weights " + dir + "/model --tokenizer " + dir +
                                  "/tokenizer.json --out " + dir + "/st --limit 2 --device ";
  run = testing::run_command(self_taught + "tpu");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("sft self-taught: device 'tpu' is not cpu or cuda"), std::string::npos) << run.output;
  run = testing::run_command(self_taught + "cuda");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  EXPECT_NE(run.output.find(cuda_device_count() == 0 ? "sft self-taught: --device cuda: " : "head_dim"),
            std::string::npos)
      << run.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/st/round-1"));
}

}  // namespace
}  // namespace sqlrl
