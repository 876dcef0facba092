// Every golden case of tests/fixtures/tokenizer/qwen3_golden.jsonl (ids and decoded text made by
// an independent implementation of the Qwen3 tokenizer, see tests/fixtures/README.md).
#include <gtest/gtest.h>

#include "tests/tokenizer/tokenizer_test_util.h"

namespace sqlrl {
namespace {

using testing::fixture_path;
using testing::qwen3_tokenizer;
using testing::read_jsonl;

TEST(Qwen3Golden, LoadsTheVocabulary) {
  const Tokenizer& tok = qwen3_tokenizer();
  EXPECT_EQ(tok.vocab_size, 151643u);
  EXPECT_EQ(tok.merge_count, 151387u);
  EXPECT_EQ(tok.size(), 151669u);  // 26 added tokens, ids up to 151,668
  EXPECT_EQ(tok.token_id("<|im_end|>"), 151645);
  EXPECT_EQ(tok.token_id("</think>"), 151668);
}

TEST(Qwen3Golden, EncodesEveryCase) {
  const Tokenizer& tok = qwen3_tokenizer();
  auto rows = read_jsonl(fixture_path("tokenizer/qwen3_golden.jsonl"));
  ASSERT_GE(rows.size(), 470u);
  size_t failures = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string text = rows[i]["text"].get<std::string>();
    std::vector<int32_t> want = rows[i]["ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> got = encode(tok, text);
    if (got != want && ++failures <= 5) ADD_FAILURE() << "case " << i << ": " << text;
  }
  EXPECT_EQ(failures, 0u) << "of " << rows.size();
}

TEST(Qwen3Golden, DecodesEveryCase) {
  const Tokenizer& tok = qwen3_tokenizer();
  auto rows = read_jsonl(fixture_path("tokenizer/qwen3_golden.jsonl"));
  size_t failures = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<int32_t> ids = rows[i]["ids"].get<std::vector<int32_t>>();
    std::string want = rows[i]["decoded"].get<std::string>();
    if (decode(tok, ids) != want && ++failures <= 5) ADD_FAILURE() << "case " << i << ": " << want;
  }
  EXPECT_EQ(failures, 0u) << "of " << rows.size();
}

TEST(Qwen3Golden, EncodingIsTheSameWithAWarmCache) {
  // The second pass is served from the per-thread piece cache; it must agree with the first.
  const Tokenizer& tok = qwen3_tokenizer();
  auto rows = read_jsonl(fixture_path("tokenizer/qwen3_golden.jsonl"));
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string text = rows[i]["text"].get<std::string>();
    EXPECT_EQ(encode(tok, text), encode(tok, text)) << "case " << i;
  }
}

}  // namespace
}  // namespace sqlrl
