// `llm_sqlrl generate --device cuda` end to end (GPU only): the CLI wiring of generate_cuda,
// whose tokens and log-probs test_infer.cpp holds against the CPU. This test alone would also
// pass if the flag were ignored; GenerateCli.DeviceCudaFailsInOneLineNamingWhy shows the branch
// is taken (on a GPU it must refuse the fixture's head_dim 16, which the CPU path accepts).
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "model_cuda_util.h"

namespace sqlrl::testing {
namespace {

std::vector<int64_t> parse_ids(const std::string& line) {
  std::istringstream in(line);
  std::vector<int64_t> ids;
  for (int64_t id; in >> id;) ids.push_back(id);
  return ids;
}

TEST(GenerateCliCuda, SampledRunIsReproducibleAndStaysInTheVocabulary) {
  SQLRL_REQUIRE_CUDA();
  QwenModel host = random_model(QwenArch::Qwen3, 31);
  host.config.eos_token_ids.clear();  // every run is max-new-tokens long
  const std::string dir = (std::filesystem::temp_directory_path() / "sqlrl_generate_cli_cuda").string();
  std::filesystem::remove_all(dir);
  save_model(host, dir);
  const std::string cmd = std::string(SQLRL_BINARY) + " generate --device cuda --weights " + dir +
                          " --prompt-ids 5,6,7,8 --print-ids --temperature 1 --max-new-tokens 16";
  CommandResult a = run_command(cmd + " --seed 3"), b = run_command(cmd + " --seed 3"), c = run_command(cmd + " --seed 4");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  std::vector<int64_t> ids = parse_ids(a.output);
  ASSERT_EQ(ids.size(), 16u) << a.output;
  for (int64_t id : ids) EXPECT_TRUE(id >= 0 && id < host.config.vocab_size) << id;
  EXPECT_EQ(a.output, b.output) << "one seed, two different runs";
  EXPECT_NE(a.output, c.output) << "seeds 3 and 4 drew the same 16 tokens";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sqlrl::testing
