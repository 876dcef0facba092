// tokenizer.json variants the loader must accept or reject, and the `tokenize` CLI end to end.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/error.h"
#include "tests/test_util.h"
#include "tests/tokenizer/tokenizer_test_util.h"
#include "tokenizer/unicode.h"

namespace sqlrl {
namespace {

using testing::fixture_path;

// A small tokenizer.json in the Qwen shape with the given merges. Vocabulary: the 256
// byte-level characters as ids 0..255 in byte order (built in a loop), then "ab" (256) and
// "Ġab" (257); added token <|im_end|> = 258.
std::string tiny_tokenizer_json(const std::string& merges, const std::string& extra = "") {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8_append(ch, byte_level_char(static_cast<uint8_t>(b)));
    vocab[ch] = b;
  }
  vocab["ab"] = 256;
  vocab["Ġab"] = 257;
  std::string pattern = nlohmann::json(std::string("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")).dump();
  return R"({"added_tokens": [{"id": 258, "content": "<|im_end|>", "special": true}],)" + extra +
         R"("normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
     {"type": "Split", "pattern": {"Regex": )" + pattern + R"(}, "behavior": "Isolated", "invert": false},
     {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
  "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
  "model": {"type": "BPE", "vocab": )" + vocab.dump() + R"(, "merges": )" + merges + "}}";
}

TEST(Loader, AcceptsStringMerges) {
  auto tok = load_tokenizer_from_string(tiny_tokenizer_json(R"(["a b", "Ġ ab"])"), "tiny.json");
  EXPECT_EQ(encode(*tok, "ab ab<|im_end|>"), (std::vector<int32_t>{256, 257, 258}));
  auto same = load_tokenizer_from_string(tiny_tokenizer_json(R"([["a", "b"], ["Ġ", "ab"]])"), "tiny.json");
  EXPECT_EQ(encode(*same, "ab ab<|im_end|>"), (std::vector<int32_t>{256, 257, 258}));
}

std::string load_error(const std::string& json_text) {
  try {
    load_tokenizer_from_string(json_text, "bad.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// 100,000 levels in a component the loader quotes in its errors overflowed the stack (the
// parsed value's dump() recursed per level): an error naming the file instead.
TEST(Loader, DeeplyNestedComponentsAreAnErrorNotACrash) {
  const std::string good = tiny_tokenizer_json(R"(["a b"])");
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string field : {"\"normalizer\": ", "\"decoder\": ", "\"added_tokens\": "}) {
    std::string text = good;
    const size_t at = text.find(field);
    ASSERT_NE(at, std::string::npos) << field;
    text.insert(at + field.size(), deep + ", \"x\": ");
    EXPECT_NE(load_error(text).find("bad.json: JSON nests deeper than 256 levels"), std::string::npos) << field;
  }
}

// A field of the wrong type escaped as nlohmann's bare "[json.exception.type_error.302] type must
// be string, but is number", naming neither the file nor the field.
TEST(Loader, FieldsOfTheWrongTypeNameTheFile) {
  const std::string good = tiny_tokenizer_json(R"(["a b"])");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t p = s.find(from);
    EXPECT_NE(p, std::string::npos) << from;
    return p == std::string::npos ? s : s.replace(p, from.size(), to);
  };
  const size_t regex_at = good.find("\"Regex\": ");
  ASSERT_NE(regex_at, std::string::npos);
  const size_t regex_end = good.find("}, \"behavior\"", regex_at);
  std::string numeric_regex = good;
  numeric_regex.replace(regex_at, regex_end - regex_at, "\"Regex\": 5");
  EXPECT_NE(load_error(numeric_regex).find("bad.json: pre_tokenizer Split pattern.Regex is not a string"),
            std::string::npos) << load_error(numeric_regex);
  const std::string numeric_behavior = with(R"("behavior": "Isolated")", R"("behavior": 5)");
  EXPECT_NE(load_error(numeric_behavior).find("bad.json: pre_tokenizer Split with behavior '(not a string)'"),
            std::string::npos) << load_error(numeric_behavior);
}

TEST(Loader, RejectsUnsupportedComponentsByName) {
  std::string good = tiny_tokenizer_json(R"(["a b"])");
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    size_t p = s.find(from);
    EXPECT_NE(p, std::string::npos) << from;
    return s.replace(p, from.size(), to);
  };
  EXPECT_NE(load_error(replace(R"("type": "NFC")", R"("type": "NFKC")")).find("NFKC"), std::string::npos);
  EXPECT_NE(load_error(replace(R"("type": "BPE")", R"("type": "WordPiece")")).find("WordPiece"), std::string::npos);
  EXPECT_NE(load_error(replace(R"("decoder": {"type": "ByteLevel")", R"("decoder": {"type": "Metaspace")")).find("Metaspace"), std::string::npos);
  EXPECT_NE(load_error(replace(R"(["a b"])", R"(["a q"])")).find("merges[0]"), std::string::npos);
  EXPECT_NE(load_error(replace(R"(["a b"])", R"(["a b c"])")).find("merges[0]"), std::string::npos);
  EXPECT_NE(load_error("{\"model\": ").find("bad.json: not valid JSON"), std::string::npos);
  EXPECT_THROW(load_tokenizer(fixture_path("tokenizer/no_such_file.json")), Error);
}

// The binary's output (stdout and stderr together; the JSON commands write nothing to stderr).
std::string run(const std::string& command) { return testing::run_command(command).output; }

TEST(Cli, EncodesDecodesAndRenders) {
  std::string dir = testing::scratch_dir();
  std::string in = dir + "/tokenize_in.jsonl";
  std::ofstream(in) << "{\"text\": \"SELECT 1;<|im_end|>\"}\n";
  std::string tok = fixture_path("tokenizer/qwen3_tokenizer.json");
  std::string out = run(std::string(SQLRL_BINARY) + " tokenize --tokenizer " + tok + " --input " + in);
  auto ids = nlohmann::json::parse(out)["ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(ids, encode(testing::qwen3_tokenizer(), "SELECT 1;<|im_end|>"));
  std::ofstream(in) << nlohmann::json({{"ids", ids}}).dump() << "\n";
  out = run(std::string(SQLRL_BINARY) + " tokenize --decode --skip-special --tokenizer " + tok + " --input " + in);
  EXPECT_EQ(nlohmann::json::parse(out)["text"], "SELECT 1;");
  // An id past int32 was wrapped (4294967297 decoded as id 1): now an error naming the line.
  std::ofstream(in) << R"({"ids": [4294967297]})" << "\n";
  out = run(std::string(SQLRL_BINARY) + " tokenize --decode --tokenizer " + tok + " --input " + in);
  EXPECT_NE(out.find(":1: id 4294967297 is not a token id (0 to 2147483647)"), std::string::npos) << out;
  std::ofstream(in) << R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})" << "\n";
  out = run(std::string(SQLRL_BINARY) + " tokenize --chat --input " + in);
  EXPECT_EQ(nlohmann::json::parse(out)["rendered"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(Cli, ChatTemplateByOptionOrDetectedFromTheTokenizerFolder) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(testing::scratch_dir()) / "tokenize_qwen25";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string in = (dir / "chat.jsonl").string();
  std::ofstream(in) << R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})" << "\n";
  const std::string qwen25 =
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
  std::string out = run(std::string(SQLRL_BINARY) + " tokenize --chat --template qwen2.5 --input " + in);
  EXPECT_EQ(nlohmann::json::parse(out)["rendered"], qwen25);
  // A Qwen2.5 model folder: tokenizer_config.json carries the published template.
  std::ifstream jinja(fixture_path("chat_template/qwen2_5_chat_template.jinja"));
  std::string text((std::istreambuf_iterator<char>(jinja)), std::istreambuf_iterator<char>());
  std::ofstream(dir / "tokenizer_config.json") << nlohmann::json({{"chat_template", text}}).dump();
  out = run(std::string(SQLRL_BINARY) + " tokenize --chat --tokenizer " + dir.string() + " --input " + in);
  EXPECT_EQ(nlohmann::json::parse(out)["rendered"], qwen25);
  // The option wins over detection.
  out = run(std::string(SQLRL_BINARY) + " tokenize --chat --template qwen3 --tokenizer " + dir.string() + " --input " + in);
  EXPECT_EQ(nlohmann::json::parse(out)["rendered"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  auto bad = testing::run_command(std::string(SQLRL_BINARY) + " tokenize --chat --template llama --input " + in);
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  fs::remove_all(dir);
}

TEST(Cli, TrainsATokenizerThatLoads) {
  std::string dir = testing::scratch_dir();
  std::string corpus = dir + "/tokenize_corpus.txt", out = dir + "/tokenize_trained.json";
  std::ofstream(corpus) << "SELECT name FROM singer WHERE age > 20; SELECT name FROM singer;\n";
  run(std::string(SQLRL_BINARY) + " tokenize train --corpus " + corpus + " --vocab-size 300 --out " + out);
  auto tok = load_tokenizer(out);
  EXPECT_LE(tok->size(), 300u);
  EXPECT_EQ(decode(*tok, encode(*tok, "SELECT name FROM singer;")), "SELECT name FROM singer;");
}

TEST(Cli, BadInputExitsWithAnError) {
  std::string dir = testing::scratch_dir();
  std::string in = dir + "/tokenize_bad.jsonl";
  std::ofstream(in) << "{\"text\": 5}\n";
  auto run = testing::run_command(std::string(SQLRL_BINARY) + " tokenize --tokenizer " +
                                  fixture_path("tokenizer/qwen3_tokenizer.json") + " --input " + in);
  EXPECT_NE(run.output.find("error: "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(":1: "), std::string::npos) << run.output;
  EXPECT_EQ(run.exit_code, 1) << run.output;
}

}  // namespace
}  // namespace sqlrl
