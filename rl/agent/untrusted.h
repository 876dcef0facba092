// Text from outside the protocol (database values and column names, SQLite error messages, the
// question, evidence, schema sample values, the model's own SQL echoed back) must not turn into
// control tokens: a value "<|im_end|>" encoded with added-token parsing on would end the turn.
// The protocols build prompts and observations as plain strings, so such text travels wrapped
// in two marker bytes that never occur in UTF-8 (0xFE opens, 0xFF closes). encode_marked() drops
// the markers and encodes the wrapped spans with added-token parsing off, the rest (the chat
// markup, the protocol's own tags) as before, in one pass: text with no added-token text in its
// data encodes exactly as the unmarked string did. Marked strings are for encoding only;
// strip_marks() gives the text to show or store.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace sqlrl::rl {

// `text` wrapped as data. Marker bytes already inside it are dropped (nested marks, or invalid
// UTF-8 that encode would refuse anyway).
std::string untrusted(std::string_view text);

struct Unmarked {
  std::string text;                                // the markers removed
  std::vector<std::pair<size_t, size_t>> plain;    // byte ranges of `text` that were wrapped
};
Unmarked unmark(std::string_view marked);
std::string strip_marks(std::string_view marked);

std::vector<int32_t> encode_marked(const Tokenizer& tok, std::string_view marked);

}  // namespace sqlrl::rl
