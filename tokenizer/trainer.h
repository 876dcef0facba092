// Byte-level BPE training for small vocabularies (hundreds to a few thousand tokens), writing a
// tokenizer.json in the Qwen3 format (same normaliser, pre-tokenizer, decoder and the same 26
// added tokens), so a tiny model trained on it uses the same chat template and stop tokens.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sqlrl {

struct QwenAddedToken {
  const char* content;
  bool special;
};
// The added tokens of the Qwen3 tokenizer.json, in id order.
const std::vector<QwenAddedToken>& qwen3_added_tokens();

struct BpeTrainOptions {
  size_t vocab_size = 1024;  // all ids: 256 bytes + merges + the added tokens
  size_t min_frequency = 2;  // a pair seen fewer times is never merged
  bool progress = false;     // a progress line of the tokens learned (runtime/progress.h)
};

struct BpeTrainResult {
  std::string tokenizer_json;
  size_t merges = 0;
  size_t vocab_size = 0;  // all ids, added tokens included (may stop short of the request)
};

// The corpus is UTF-8 text; added-token strings in it (e.g. "<|im_end|>") are kept out of the
// statistics, as encoding splits them out before BPE.
BpeTrainResult train_bpe(std::string_view corpus, const BpeTrainOptions& options);

}  // namespace sqlrl
