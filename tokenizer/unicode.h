// UTF-8 and Unicode helpers for the tokenizer: validation with byte offsets, code point
// classes for the pre-tokenizer (letter / number / white space), NFC, lossy decoding, and the
// GPT-2 byte <-> printable-character map that byte-level BPE vocabularies are written in.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/utf8.h"  // utf8_sequence_length

namespace sqlrl {

// Bits of char_class(cp). "Unstable" marks code points that NFC may change in context
// (combining marks, composition second halves, non-NFC characters): a text without any of them
// is already NFC, which lets the encoder skip normalisation for most input.
enum : uint8_t { kCharLetter = 1, kCharNumber = 2, kCharSpace = 4, kCharNfcUnstable = 8 };

// One table for all 0x110000 code points, computed on first use from utf8proc.
uint8_t char_class(uint32_t cp);

// Decodes the code point at text[pos] of text that is already known to be valid UTF-8;
// returns its byte length.
inline int utf8_decode_valid(std::string_view text, size_t pos, uint32_t* cp) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  unsigned char b = s[0];
  if (b < 0x80) { *cp = b; return 1; }
  if (b < 0xE0) { *cp = ((b & 0x1Fu) << 6) | (s[1] & 0x3Fu); return 2; }
  if (b < 0xF0) { *cp = ((b & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu); return 3; }
  *cp = ((b & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
  return 4;
}

void utf8_append(std::string& out, uint32_t cp);


// Throws "<what>: invalid UTF-8 at byte offset N (byte 0xXX)" on the first bad sequence.
// Returns true when every code point is NFC-stable (so the text is its own NFC form).
bool utf8_validate(std::string_view text, const char* what);

// NFC of valid UTF-8 text (utf8proc), embedded NUL bytes allowed.
std::string nfc(std::string_view text);

// Valid UTF-8 from arbitrary bytes: each maximal invalid subpart becomes U+FFFD, as Rust's
// String::from_utf8_lossy (used by Hugging Face tokenizers' decoders) does.
std::string utf8_lossy(std::string_view bytes);

// The GPT-2 byte-level alphabet: byte b is written as the code point byte_to_char(b).
uint32_t byte_level_char(uint8_t b);
// Inverse of byte_level_char over a whole string; returns false when a character is not in the
// alphabet (so the string is not byte-level text).
bool byte_level_decode(std::string_view text, std::string* bytes);
std::string byte_level_encode(std::string_view bytes);

}  // namespace sqlrl
