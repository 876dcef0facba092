// The C++ chat template against the 200 renders of the Jinja template (golden file), plus the
// pieces it is built from.
#include <gtest/gtest.h>

#include "tests/tokenizer/tokenizer_test_util.h"
#include "runtime/error.h"
#include "tokenizer/chat_template.h"

namespace sqlrl {
namespace {

using testing::fixture_path;
using testing::read_jsonl;

TEST(ChatTemplate, ReproducesEveryGoldenRender) {
  auto rows = read_jsonl(fixture_path("chat_template/qwen3_chat_golden.jsonl"));
  ASSERT_EQ(rows.size(), 200u);
  size_t failures = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<ChatMessage> messages;
    ChatOptions options;
    chat_request_from_json(rows[i], &messages, &options);
    std::string got = render_chat(messages, options);
    std::string want = rows[i]["rendered"].get<std::string>();
    if (got != want && ++failures <= 3) ADD_FAILURE() << "case " << i << "\n--- got\n" << got << "\n--- want\n" << want;
  }
  EXPECT_EQ(failures, 0u) << "of " << rows.size();
}

TEST(ChatTemplate, JsonDumpsMatchesPython) {
  // Expected strings are what Python 3 prints for json.dumps(value, ensure_ascii=False).
  auto v = nlohmann::ordered_json::parse(R"({"b": 1, "a": [true, null, "x\"y\n", 2.5, 1e-05, 1e16, 3.0], "é": "ü\u0001"})");
  EXPECT_EQ(chat_json_dumps(v), "{\"b\": 1, \"a\": [true, null, \"x\\\"y\\n\", 2.5, 1e-05, 1e+16, 3.0], \"é\": \"ü\\u0001\"}");
}

TEST(ChatTemplate, GenerationPromptWithThinkingDisabled) {
  std::vector<ChatMessage> messages = {{"user", "How many singers?", {}, {}}};
  ChatOptions options;
  options.add_generation_prompt = true;
  options.enable_thinking = false;
  EXPECT_EQ(render_chat(messages, options),
            "<|im_start|>user\nHow many singers?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  options.enable_thinking = true;
  EXPECT_EQ(render_chat(messages, options), "<|im_start|>user\nHow many singers?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, DropsThinkingBeforeTheLastQuery) {
  // The first answer precedes the last user query: its <think> block is removed; the last
  // answer keeps its reasoning.
  std::vector<ChatMessage> messages = {{"user", "q1", {}, {}},
                                       {"assistant", "<think>\nr1\n</think>\n\na1", {}, {}},
                                       {"user", "q2", {}, {}},
                                       {"assistant", "a2", std::string("r2"), {}}};
  EXPECT_EQ(render_chat(messages, {}),
            "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n");
}

TEST(ChatTemplate, RejectsMalformedMessages) {
  EXPECT_THROW(chat_message_from_json(nlohmann::ordered_json::parse(R"({"content": "x"})"), 3), Error);
  EXPECT_THROW(render_chat({}, {}), Error);
}

}  // namespace
}  // namespace sqlrl
