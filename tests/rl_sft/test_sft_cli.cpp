// `llm_sqlrl sft` end to end: synth-demos -> sft on a tiny random model, and one-line errors.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/rl_sft/sft_fixture.h"

namespace sqlrl {
namespace {

std::string run(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  *status = pclose(pipe);
  return out;
}

TEST(SftCli, SynthDemosThenSftWritesACheckpoint) {
  namespace fs = std::filesystem;
  const std::string dir = testing::sft_temp_dir() + "/cli";
  fs::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json", std::ios::binary) << testing::sft_tokenizer_json();
  save_model(testing::sft_model(static_cast<int64_t>(testing::sft_tokenizer().size())), dir + "/model");
  int status = 0;
  std::string out = run(std::string(SQLRL_BINARY) + " sft synth-demos --protocol skyrl --data " + testing::small_bench() +
                            " --out " + dir + "/demos.jsonl",
                        &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("demonstrations"), std::string::npos) << out;
  out = run(std::string(SQLRL_BINARY) + " sft --data " + dir + "/demos.jsonl --weights " + dir + "/model --tokenizer " +
                dir + "/tokenizer.json --out " + dir + "/run --max-steps 2 --micro-batch-tokens 4096 --lr 1e-3",
            &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(fs::exists(dir + "/run/checkpoints/step-2/model.safetensors")) << out;
  std::ifstream metrics(dir + "/run/metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(metrics, line)) {
    ++lines;
    EXPECT_GT(nlohmann::json::parse(line)["tokens"].get<int64_t>(), 0) << line;  // demos fit: targets are trained
  }
  EXPECT_EQ(lines, 2);
}

TEST(SftCli, BadInputIsOneLineNamingFileLineAndField) {
  const std::string dir = testing::sft_temp_dir() + "/cli_bad";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json", std::ios::binary) << testing::sft_tokenizer_json();
  save_model(testing::sft_model(static_cast<int64_t>(testing::sft_tokenizer().size())), dir + "/model");
  std::ofstream(dir + "/bad.jsonl") << "{\"tokens\": [1, 2], \"mask\": [0, 1]}\n{\"tokens\": [1, 2], \"mask\": [1]}\n";
  int status = 0;
  std::string out = run(std::string(SQLRL_BINARY) + " sft --data " + dir + "/bad.jsonl --weights " + dir +
                            "/model --tokenizer " + dir + "/tokenizer.json --out " + dir + "/run",
                        &status);
  EXPECT_NE(status, 0);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_NE(out.find("bad.jsonl:2"), std::string::npos) << out;
  EXPECT_NE(out.find("'mask'"), std::string::npos) << out;
  out = run(std::string(SQLRL_BINARY) + " sft --weights " + dir + "/model", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("--data"), std::string::npos) << out;
}

}  // namespace
}  // namespace sqlrl
