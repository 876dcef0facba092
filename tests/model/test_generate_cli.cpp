// `llm_sqlrl generate` end to end on the fixture models.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <sstream>

#include "fixture.h"

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

TEST(GenerateCli, GreedyIdsMatchTransformers) {
  for (const char* name : {"qwen3_tied", "qwen2_untied"}) {
    auto f = testing::load_model_fixture(name);
    std::string ids, want;
    for (int32_t t : f.ints("greedy_prompt")) ids += (ids.empty() ? "" : ",") + std::to_string(t);
    for (int32_t t : f.ints("greedy_tokens")) want += (want.empty() ? "" : " ") + std::to_string(t);
    int status = 0;
    std::string out = run(std::string(SQLRL_BINARY) + " generate --weights " + f.folder + " --prompt-ids " + ids +
                              " --print-ids --temperature 0 --max-new-tokens 20",
                          &status);
    EXPECT_EQ(status, 0) << out;
    EXPECT_EQ(out, want + "\n") << name;
  }
}

TEST(GenerateCli, SampledRunsAreReproducible) {
  std::string cmd = std::string(SQLRL_BINARY) + " generate --weights " + testing::fixture_path("model/qwen2_untied") +
                    " --prompt-ids 5,6,7 --print-ids --temperature 0.9 --top-p 0.95 --top-k 40 --max-new-tokens 16";
  int s1 = 0, s2 = 0, s3 = 0;
  std::string a = run(cmd + " --seed 11", &s1), b = run(cmd + " --seed 11", &s2), c = run(cmd + " --seed 12", &s3);
  EXPECT_EQ(s1, 0) << a;
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(GenerateCli, PromptOutsideTheVocabularyIsAnError) {
  int status = 0;
  std::string out = run(std::string(SQLRL_BINARY) + " generate --weights " + testing::fixture_path("model/qwen3_tied") +
                            " --prompt-ids 5,300 --print-ids",
                        &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("prompt token 300 at 1 is outside the model's vocabulary of 256"), std::string::npos) << out;
}

}  // namespace
}  // namespace sqlrl
