// UTF-8 well-formedness (Unicode 15, table 3-7: no overlong forms, no surrogates, nothing past
// U+10FFFF), shared by the tokenizer (lossy decoding, validation with a position) and the SQL
// evaluation (Python's strict decoding of TEXT values). Plain bytes in, no allocation.
#pragma once
#include <cstddef>
#include <string_view>

namespace sqlrl {

// Length of the well-formed UTF-8 sequence at text[pos] (1..4), 0 when the bytes there are not
// one. With `prefix_len` it also reports how many bytes form a valid but unfinished start of a
// sequence (the "maximal subpart" that a lossy decoder replaces with one U+FFFD).
int utf8_sequence_length(std::string_view text, size_t pos, int* prefix_len = nullptr);

// Whether all of `text` is well-formed UTF-8 (what Python's bytes.decode("utf-8") accepts).
bool utf8_is_valid(std::string_view text);

}  // namespace sqlrl
