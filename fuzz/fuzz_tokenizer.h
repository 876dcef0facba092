// A small byte-level BPE tokenizer trained once per process, with Qwen3's added tokens (so the
// chat markup is single tokens, as with a real checkpoint): for the harnesses whose input is
// tokenised (SFT data, protocol observations).
#pragma once
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/trainer.h"

namespace sqlrl::fuzz {

inline const Tokenizer& tiny_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    std::string corpus;
    for (int i = 0; i < 8; ++i)
      corpus += "<|im_start|>system\nYou answer questions with SQL.<|im_end|>\n<|im_start|>user\nHow many singers "
                "are there?<|im_end|>\n<|im_start|>assistant\n<think>\ncount the rows\n</think>\n<sql>SELECT count(*) "
                "FROM singer WHERE age > 30;</sql><|im_end|>\n<tool_response>\ncount 4\n</tool_response>\n";
    BpeTrainOptions options;
    options.vocab_size = 360;
    return load_tokenizer_from_string(train_bpe(corpus, options).tokenizer_json, "fuzz-tiny-bpe");
  }();
  return *tok;
}

}  // namespace sqlrl::fuzz
