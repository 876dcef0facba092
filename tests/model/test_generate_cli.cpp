// `llm_sqlrl generate` end to end on the fixture models.
#include <gtest/gtest.h>

#include <algorithm>

#include "fixture.h"
#include "tests/test_util.h"

namespace sqlrl {
namespace {

TEST(GenerateCli, GreedyIdsMatchTransformers) {
  for (const char* name : {"qwen3_tied", "qwen2_untied"}) {
    auto f = testing::load_model_fixture(name);
    std::string ids, want;
    for (int32_t t : f.ints("greedy_prompt")) ids += (ids.empty() ? "" : ",") + std::to_string(t);
    for (int32_t t : f.ints("greedy_tokens")) want += (want.empty() ? "" : " ") + std::to_string(t);
    auto run = testing::run_command(std::string(SQLRL_BINARY) + " generate --weights " + f.folder + " --prompt-ids " +
                                    ids + " --print-ids --temperature 0 --max-new-tokens 20");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_EQ(run.output, want + "\n") << name;
  }
}

TEST(GenerateCli, SampledRunsAreReproducible) {
  std::string cmd = std::string(SQLRL_BINARY) + " generate --weights " + testing::fixture_path("model/qwen2_untied") +
                    " --prompt-ids 5,6,7 --print-ids --temperature 0.9 --top-p 0.95 --top-k 40 --max-new-tokens 16";
  auto a = testing::run_command(cmd + " --seed 11"), b = testing::run_command(cmd + " --seed 11"),
       c = testing::run_command(cmd + " --seed 12");
  EXPECT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_NE(a.output, c.output);
}

TEST(GenerateCli, PromptOutsideTheVocabularyIsAnError) {
  auto run = testing::run_command(std::string(SQLRL_BINARY) + " generate --weights " +
                                  testing::fixture_path("model/qwen3_tied") + " --prompt-ids 5,300 --print-ids");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("prompt token 300 at 1 is outside the model's vocabulary of 256"), std::string::npos)
      << run.output;
}

// The fixture's context is 128 positions. A prompt that fills it, or a max-new-tokens past it
// (2e9 was a std::bad_alloc sizing the KV cache), is an error saying how much fits.
TEST(GenerateCli, PromptAndNewTokensMustFitTheContext) {
  const std::string base =
      std::string(SQLRL_BINARY) + " generate --weights " + testing::fixture_path("model/qwen3_tied") + " --print-ids";
  std::string ids;
  for (int i = 0; i < 128; ++i) ids += (i ? "," : "") + std::to_string(5 + i % 50);
  auto full = testing::run_command(base + " --prompt-ids " + ids + " --max-new-tokens 1");
  EXPECT_NE(full.exit_code, 0);
  EXPECT_NE(full.output.find("the prompt is 128 tokens, the model's context (max_position_embeddings) 128"),
            std::string::npos)
      << full.output;
  auto huge = testing::run_command(base + " --prompt-ids 5,6 --max-new-tokens 2000000000");
  EXPECT_NE(huge.exit_code, 0);
  EXPECT_NE(huge.output.find("max-new-tokens 2000000000 past a prompt of 2 tokens exceeds the model's context of 128 "
                             "(at most 126)"),
            std::string::npos)
      << huge.output;
  auto fits = testing::run_command(base + " --prompt-ids 5,6 --max-new-tokens 126 --temperature 0");
  EXPECT_EQ(fits.exit_code, 0) << fits.output;
}

TEST(GenerateCli, DeviceCudaFailsInOneLineNamingWhy) {
  auto run = testing::run_command(std::string(SQLRL_BINARY) + " generate --device cuda --weights " +
                                  testing::fixture_path("model/qwen3_tied") + " --prompt-ids 5,6 --print-ids --max-new-tokens 20");
  EXPECT_NE(run.exit_code, 0);
  // Without a GPU the reason it is missing; with one, the fixture's head_dim 16 (kernels: 64, 128).
  const std::string expected = cuda_device_count() == 0 ? "device cuda: " : "head_dim is 16";
  EXPECT_NE(run.output.find(expected), std::string::npos) << run.output;
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
}

TEST(GenerateCli, UnknownDeviceIsRefusedByName) {
  auto run = testing::run_command(std::string(SQLRL_BINARY) + " generate --device tpu --weights " +
                                  testing::fixture_path("model/qwen3_tied") + " --prompt-ids 5 --print-ids");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("generate: device 'tpu' is not cpu or cuda"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace sqlrl
