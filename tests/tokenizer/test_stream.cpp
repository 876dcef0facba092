// Streaming decode and stop strings, and the encode/decode properties on random text.
#include <gtest/gtest.h>

#include <random>

#include "runtime/error.h"
#include "tests/tokenizer/tokenizer_test_util.h"
#include "tokenizer/stream.h"
#include "tokenizer/unicode.h"

namespace sqlrl {
namespace {

using testing::fixture_path;
using testing::qwen3_tokenizer;
using testing::read_jsonl;

// Random valid UTF-8 drawn from ranges the tokenizer must handle: ASCII (with SQL-ish
// punctuation and white space), Latin with combining marks, CJK, Hangul jamo, emoji, and
// white-space oddities.
std::string random_text(std::mt19937& rng, size_t code_points) {
  static const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0x20, 0x7E}, {0x20, 0x7E}, {0x20, 0x7E}, {0x09, 0x0D}, {0xC0, 0x17F}, {0x300, 0x36F}, {0x4E00, 0x4FFF},
      {0x1100, 0x11FF}, {0xAC00, 0xAC40}, {0x1F600, 0x1F64F}, {0x2000, 0x200D}, {0x0600, 0x06FF}, {0x3000, 0x3003}};
  std::string s;
  for (size_t i = 0; i < code_points; ++i) {
    auto [lo, hi] = ranges[rng() % ranges.size()];
    utf8_append(s, lo + rng() % (hi - lo + 1));
  }
  return s;
}

TEST(Properties, DecodeOfEncodeIsNfc) {
  const Tokenizer& tok = qwen3_tokenizer();
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text = random_text(rng, 1 + rng() % 60);
    EXPECT_EQ(decode(tok, encode(tok, text)), nfc(text)) << "trial " << trial;
  }
}

TEST(Properties, InvalidUtf8IsAnErrorNamingTheOffset) {
  const Tokenizer& tok = qwen3_tokenizer();
  try {
    encode(tok, std::string("SELECT \xE2\x82 x", 10));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte offset 7"), std::string::npos) << e.what();
  }
  EXPECT_THROW(encode(tok, "\xED\xA0\x80"), Error);  // a UTF-16 surrogate
  EXPECT_THROW(encode(tok, "\xC0\xAF"), Error);      // overlong '/'
}

TEST(Properties, AddedTokensCanBeTreatedAsText) {
  const Tokenizer& tok = qwen3_tokenizer();
  std::vector<int32_t> as_special = encode(tok, "a<|im_end|>");
  ASSERT_EQ(as_special.size(), 2u);
  EXPECT_EQ(as_special[1], tok.token_id("<|im_end|>"));
  std::vector<int32_t> as_text = encode(tok, "a<|im_end|>", EncodeOptions{false});
  EXPECT_GT(as_text.size(), 2u);
  EXPECT_EQ(decode(tok, as_text), "a<|im_end|>");
}

TEST(Decode, SkipsSpecialTokensOnly) {
  const Tokenizer& tok = qwen3_tokenizer();
  std::vector<int32_t> ids = encode(tok, "<|im_start|>assistant\n<tool_call>x</tool_call><|im_end|>");
  // <tool_call> is an added token but not special in the Qwen3 file: it stays.
  EXPECT_EQ(decode(tok, ids, true), "assistant\n<tool_call>x</tool_call>");
  EXPECT_THROW(decode(tok, std::vector<int32_t>{5, 999999}), Error);
}

TEST(Utf8Stream, MatchesLossyDecodingForEverySplit) {
  // A 4-byte emoji, a 3-byte CJK character, an invalid byte and a truncated sequence.
  std::string bytes = "a\xF0\x9F\x98\x80" "b\xE4\xB8\xAD\xFF" "c\xE4\xB8" "d\xE4";
  std::string want = utf8_lossy(bytes);
  for (size_t i = 0; i <= bytes.size(); ++i) {
    for (size_t j = i; j <= bytes.size(); ++j) {
      Utf8Stream s;
      std::string got = s.push(bytes.substr(0, i));
      got += s.push(bytes.substr(i, j - i));
      got += s.push(bytes.substr(j));
      got += s.finish();
      EXPECT_EQ(got, want) << "split at " << i << ", " << j;
    }
  }
}

TEST(TokenStream, EqualsBatchDecodeTokenByToken) {
  const Tokenizer& tok = qwen3_tokenizer();
  auto rows = read_jsonl(fixture_path("tokenizer/qwen3_golden.jsonl"));
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<int32_t> ids = rows[i]["ids"].get<std::vector<int32_t>>();
    TokenStream stream(tok, {});
    std::string got;
    for (size_t k = 0; k < ids.size(); ++k) {
      std::string piece = stream.push(ids[k]).text;
      // Every piece is whole characters.
      ASSERT_NO_THROW(utf8_validate(piece, "stream piece")) << "case " << i << " token " << k;
      got += piece;
    }
    got += stream.finish().text;
    EXPECT_EQ(got, decode(tok, ids)) << "case " << i;
  }
}

TEST(TokenStream, FindsStopStringsSpanningTokens) {
  const Tokenizer& tok = qwen3_tokenizer();
  std::string text = "<think>ok</think>\n<sql>SELECT name FROM singer</sql>\n\nmore text";
  std::vector<int32_t> ids = encode(tok, text);
  TokenStream stream(tok, {"</solution>", "</sql>", "<|im_end|>"});
  std::string got;
  int stopped_at = -1;
  for (size_t k = 0; k < ids.size(); ++k) {
    TokenStream::Step step = stream.push(ids[k]);
    got += step.text;
    if (step.stop >= 0) {
      EXPECT_EQ(step.stop, 1);
      stopped_at = static_cast<int>(k);
      break;
    }
  }
  ASSERT_GE(stopped_at, 0);
  EXPECT_EQ(got, "<think>ok</think>\n<sql>SELECT name FROM singer</sql>");
  // The token that completed the stop is the first whose decoded prefix contains it.
  std::vector<int32_t> prefix(ids.begin(), ids.begin() + stopped_at);
  EXPECT_EQ(decode(tok, prefix).find("</sql>"), std::string::npos);
  EXPECT_THROW(stream.push(ids[0]), Error);
}

TEST(TokenStream, StopsOnASpecialToken) {
  const Tokenizer& tok = qwen3_tokenizer();
  TokenStream stream(tok, {"<|im_end|>"});
  std::vector<int32_t> ids = encode(tok, "done<|im_end|>");
  EXPECT_EQ(stream.push(ids[0]).stop, -1);
  TokenStream::Step step = stream.push(ids[1]);
  EXPECT_EQ(step.stop, 0);
  EXPECT_EQ(stream.text, "done<|im_end|>");
}

TEST(StopMatcher, EveryChunkingFindsTheSameOffset) {
  std::string text = "abc </so</sql> x </solution>";
  size_t want = text.find("</sql>");
  for (size_t i = 1; i < text.size(); ++i) {
    StopMatcher m({"</solution>", "</sql>"});
    StopMatcher::Hit a = m.feed(text.substr(0, i));
    StopMatcher::Hit hit = a.stop >= 0 ? a : m.feed(text.substr(i));
    ASSERT_EQ(hit.stop, 1) << "split at " << i;
    EXPECT_EQ(hit.begin, want) << "split at " << i;
    EXPECT_EQ(hit.end, want + 6);
  }
}

}  // namespace
}  // namespace sqlrl
