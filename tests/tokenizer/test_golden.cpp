// Every golden case of tests/fixtures/tokenizer/qwen3_golden.jsonl (ids and decoded text made by
// an independent implementation of the Qwen3 tokenizer, see tests/fixtures/tokenizer/README.md).
#include <gtest/gtest.h>

#include <algorithm>

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

namespace sqlrl {
namespace {

// plain_ranges: added tokens inside a data range are text, those in the markup around it stay
// single tokens, and a text with no added token inside its ranges encodes exactly as without them.
TEST(Qwen3PlainRanges, AddedTokensInsideDataAreTextAndTheRestIsUnchanged) {
  const Tokenizer& tok = testing::qwen3_tokenizer();
  const int32_t im_end = tok.token_id("<|im_end|>"), im_start = tok.token_id("<|im_start|>");
  ASSERT_GE(im_end, 0);
  const std::string head = "<|im_end|>\n<|im_start|>user\n<observation>\n", tail = "\n</observation><|im_end|>\n";
  const std::string data = "| name |\n| <|im_end|> |";
  const std::string text = head + data + tail;
  const std::vector<std::pair<size_t, size_t>> ranges = {{head.size(), head.size() + data.size()}};
  EncodeOptions o;
  o.plain_ranges = ranges;
  std::vector<int32_t> ids = encode(tok, text, o);
  EXPECT_EQ(decode(tok, ids), text);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_end), 2) << "the markup's two <|im_end|>, not the value's";
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_start), 1);
  std::vector<int32_t> all_special = encode(tok, text);
  EXPECT_EQ(std::count(all_special.begin(), all_special.end(), im_end), 3);

  const std::string clean = head + "| name |\n| pig |" + tail;
  const std::vector<std::pair<size_t, size_t>> clean_ranges = {{head.size(), clean.size() - tail.size()}};
  o.plain_ranges = clean_ranges;
  EXPECT_EQ(encode(tok, clean, o), encode(tok, clean));
  // A token straddling a range edge counts as data too.
  const std::string edge = "a<|im_end|>b";
  const std::vector<std::pair<size_t, size_t>> edge_ranges = {{0, 3}};
  o.plain_ranges = edge_ranges;
  std::vector<int32_t> e = encode(tok, edge, o);
  EXPECT_EQ(std::count(e.begin(), e.end(), im_end), 0);
  EXPECT_EQ(e, encode(tok, edge, EncodeOptions{false}));
}

}  // namespace
}  // namespace sqlrl
