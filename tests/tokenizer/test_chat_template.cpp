// The C++ chat templates against the renders of the Jinja templates (golden files: 200 Qwen3,
// 107 Qwen2.5), template detection, plus the pieces they are built from.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

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

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TEST(ChatTemplate, ReproducesEveryQwen25GoldenRender) {
  // Made by tools/make_qwen25_chat_fixtures.py with jinja2 from the published Qwen2.5 template.
  auto rows = read_jsonl(fixture_path("chat_template/qwen25_chat_golden.jsonl"));
  ASSERT_EQ(rows.size(), 107u);
  size_t failures = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<ChatMessage> messages;
    ChatOptions options;
    options.chat_template = ChatTemplate::qwen2_5;
    chat_request_from_json(rows[i], &messages, &options);
    ASSERT_EQ(options.chat_template, ChatTemplate::qwen2_5);
    std::string got = render_chat(messages, options);
    std::string want = rows[i]["rendered"].get<std::string>();
    if (got != want && ++failures <= 3) ADD_FAILURE() << "case " << i << "\n--- got\n" << got << "\n--- want\n" << want;
  }
  EXPECT_EQ(failures, 0u) << "of " << rows.size();
}

TEST(ChatTemplate, Qwen25DefaultSystemAndQuotedStringArguments) {
  // Written out from qwen2_5_chat_template.jinja: no system message -> the default one; a
  // JSON-string argument goes through tojson and is quoted; empty content puts the first
  // <tool_call> right after the role line; reasoning is not separated out.
  std::vector<ChatMessage> messages = {{"user", "q", {}, {}},
                                       {"assistant", "", {}, {{"execute_sql", "{\"sql\": \"SELECT 1\"}", true}}},
                                       {"tool", "1", {}, {}},
                                       {"assistant", "<think>\nr\n</think>\n\na", std::string("ignored"), {}}};
  ChatOptions options;
  options.chat_template = ChatTemplate::qwen2_5;
  options.add_generation_prompt = true;
  options.enable_thinking = false;
  EXPECT_EQ(render_chat(messages, options),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nq<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"execute_sql\", \"arguments\": \"{\\\"sql\\\": \\\"SELECT 1\\\"}\"}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n1\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n<think>\nr\n</think>\n\na<|im_end|>\n"
            "<|im_start|>assistant\n");
  // The same string argument under Qwen3 is written verbatim.
  options.chat_template = ChatTemplate::qwen3;
  EXPECT_NE(render_chat(messages, options).find("\"arguments\": {\"sql\": \"SELECT 1\"}}"), std::string::npos);
}

TEST(ChatTemplate, DetectsTheTemplateFromItsJinjaText) {
  EXPECT_EQ(detect_chat_template(read_text(fixture_path("chat_template/qwen2_5_chat_template.jinja"))), ChatTemplate::qwen2_5);
  auto config = nlohmann::json::parse(read_text(fixture_path("tokenizer/qwen3_tokenizer_config.json")));
  EXPECT_EQ(detect_chat_template(config["chat_template"].get<std::string>()), ChatTemplate::qwen3);
  EXPECT_EQ(detect_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}"), std::nullopt);
  EXPECT_EQ(chat_template_from_name("qwen2.5"), ChatTemplate::qwen2_5);
  EXPECT_EQ(chat_template_from_name("qwen3"), ChatTemplate::qwen3);
  EXPECT_THROW(chat_template_from_name("llama3"), Error);
}

TEST(ChatTemplate, DetectsTheTemplateOfATokenizerFolder) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(testing::scratch_dir()) / "chat_template_detect";
  fs::remove_all(dir);
  fs::create_directories(dir);
  EXPECT_EQ(detect_chat_template_for_tokenizer(dir.string()), std::nullopt);  // no config at all
  nlohmann::json config = {{"tokenizer_class", "Qwen2Tokenizer"},
                           {"chat_template", read_text(fixture_path("chat_template/qwen2_5_chat_template.jinja"))}};
  std::ofstream(dir / "tokenizer_config.json") << config.dump(2);
  EXPECT_EQ(detect_chat_template_for_tokenizer(dir.string()), ChatTemplate::qwen2_5);
  // Given the tokenizer.json path, the folder it sits in is used.
  EXPECT_EQ(detect_chat_template_for_tokenizer((dir / "tokenizer.json").string()), ChatTemplate::qwen2_5);
  // The list form of chat_template: the "default" entry counts.
  config["chat_template"] = nlohmann::json::array(
      {{{"name", "tool_use"}, {"template", "x"}},
       {{"name", "default"},
        {"template", nlohmann::json::parse(read_text(fixture_path("tokenizer/qwen3_tokenizer_config.json")))["chat_template"]}}});
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  EXPECT_EQ(detect_chat_template_for_tokenizer(dir.string()), ChatTemplate::qwen3);
  // chat_template.jinja, when present, wins over tokenizer_config.json.
  std::ofstream(dir / "chat_template.jinja") << read_text(fixture_path("chat_template/qwen2_5_chat_template.jinja"));
  EXPECT_EQ(detect_chat_template_for_tokenizer(dir.string()), ChatTemplate::qwen2_5);
  fs::remove(dir / "chat_template.jinja");
  std::ofstream(dir / "tokenizer_config.json") << "{\"chat_template\": ";
  EXPECT_THROW(detect_chat_template_for_tokenizer(dir.string()), Error);
  fs::remove_all(dir);
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
