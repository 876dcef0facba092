// `llm_sqlrl generate` end to end on the fixture models.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace sqlrl
