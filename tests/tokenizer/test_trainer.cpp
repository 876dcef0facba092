// The small-vocabulary BPE trainer: merges on a hand-checked corpus, the Qwen3 added tokens,
// and a round trip of its own corpus through the tokenizer it writes.
#include <gtest/gtest.h>

#include "runtime/error.h"
#include "tests/tokenizer/tokenizer_test_util.h"
#include "tokenizer/trainer.h"
#include "tokenizer/unicode.h"

namespace sqlrl {
namespace {

using testing::fixture_path;
using testing::qwen3_tokenizer;
using testing::read_jsonl;

TEST(Trainer, MergesTheMostFrequentPairFirst) {
  // "ab ab ab cd" pre-tokenises to "ab", " ab", " ab", " cd". Pair counts: (a,b)=3, (' ',a)=2,
  // (' ',c)=1, (c,d)=1 -> merge a+b. Then (' ',ab)=2 -> merge ' '+ab. Everything else is seen
  // once, below min_frequency=2, so training stops with 2 merges.
  BpeTrainOptions options;
  options.vocab_size = 1000;
  BpeTrainResult r = train_bpe("ab ab ab cd", options);
  EXPECT_EQ(r.merges, 2u);
  EXPECT_EQ(r.vocab_size, 256u + 2u + 26u);
  auto j = nlohmann::json::parse(r.tokenizer_json);
  EXPECT_EQ(j["model"]["merges"][0], nlohmann::json::parse(R"(["a", "b"])"));
  EXPECT_EQ(j["model"]["merges"][1], nlohmann::json::parse(R"(["Ġ", "ab"])"));  // Ġ is the byte-level space
  auto tok = load_tokenizer_from_string(r.tokenizer_json, "trained");
  EXPECT_EQ(encode(*tok, " ab"), (std::vector<int32_t>{257}));
  EXPECT_EQ(encode(*tok, "abc"), (std::vector<int32_t>{256, 'c'}));
}

TEST(Trainer, HasTheQwen3AddedTokens) {
  BpeTrainOptions options;
  options.vocab_size = 300;
  auto tok = load_tokenizer_from_string(train_bpe("hello world", options).tokenizer_json, "trained");
  const Tokenizer& qwen = qwen3_tokenizer();
  ASSERT_EQ(tok->added.size(), qwen.added.size());
  for (const AddedToken& a : qwen.added) {
    int32_t id = tok->token_id(a.content);
    ASSERT_GE(id, 0) << a.content;
    EXPECT_EQ(tok->token_special[id] != 0, a.special) << a.content;
  }
  EXPECT_EQ(encode(*tok, "<|im_start|>hi<|im_end|>").front(), tok->token_id("<|im_start|>"));
}

TEST(Trainer, RoundTripsItsCorpusAndStaysWithinTheVocabulary) {
  std::string corpus;
  for (const auto& row : read_jsonl(fixture_path("chat_template/qwen3_chat_golden.jsonl"))) corpus += row["rendered"].get<std::string>();
  BpeTrainOptions options;
  options.vocab_size = 700;  // the renders repeat a lot: about 800 ids exist with count >= 2
  BpeTrainResult r = train_bpe(corpus, options);
  EXPECT_EQ(r.vocab_size, 700u);
  auto tok = load_tokenizer_from_string(r.tokenizer_json, "trained");
  EXPECT_EQ(tok->size(), 700u);
  std::vector<int32_t> ids = encode(*tok, corpus);
  EXPECT_EQ(decode(*tok, ids), nfc(corpus));
  // 418 merges compress the text well below one token per byte.
  EXPECT_LT(ids.size(), corpus.size() / 2);
  // Deterministic: the same corpus gives the same file.
  EXPECT_EQ(train_bpe(corpus, options).tokenizer_json, r.tokenizer_json);
}

TEST(Trainer, RejectsATooSmallVocabulary) {
  BpeTrainOptions options;
  options.vocab_size = 100;
  EXPECT_THROW(train_bpe("abc", options), Error);
}

}  // namespace
}  // namespace sqlrl
