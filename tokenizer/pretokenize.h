// The Qwen2/Qwen3 pre-tokenizer: the Split regex of their tokenizer.json
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// written out by hand over code points: each alternative is tried in order at the current
// position, with the backtracking a regex engine would do spelled out (see pretokenize.cpp).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace sqlrl {

// The regex string as it appears in tokenizer.json; the loader accepts only this pattern.
extern const char* const kQwenPretokenizerPattern;

struct Piece {
  uint32_t begin, end;  // byte offsets into the text
};

// Splits valid UTF-8 `text` into consecutive pieces covering it (appended to `pieces`).
void pretokenize_qwen(std::string_view text, std::vector<Piece>& pieces);

}  // namespace sqlrl
