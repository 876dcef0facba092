#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/error.h"

namespace sqlrl {
namespace {

constexpr uint32_t kCodePoints = 0x110000;

// White_Space as Oniguruma's and Rust's \s define it (Unicode property), not JavaScript's.
bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::vector<uint8_t> build_class_table() {
  std::vector<uint8_t> table(kCodePoints, 0);
  for (uint32_t cp = 0; cp < kCodePoints; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
    uint8_t c = 0;
    switch (p->category) {
      case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
      case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        c |= kCharLetter;
        break;
      case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        c |= kCharNumber;
        break;
      default:
        break;
    }
    if (is_white_space(cp)) c |= kCharSpace;
    if (p->combining_class != 0) c |= kCharNfcUnstable;
    table[cp] |= c;
  }
  // Canonical decompositions: a character that decomposes is unstable unless NFC maps it to
  // itself; every non-first character of a decomposition may compose with what precedes it.
  utf8proc_int32_t buf[8];
  for (uint32_t cp = 0x80; cp < kCodePoints; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    int boundclass = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 8, UTF8PROC_DECOMPOSE, &boundclass);
    if (n <= 0 || (n == 1 && static_cast<uint32_t>(buf[0]) == cp)) continue;
    for (utf8proc_ssize_t k = 1; k < n && k < 8; ++k) table[static_cast<uint32_t>(buf[k])] |= kCharNfcUnstable;
    std::string one;
    utf8_append(one, cp);
    if (nfc(one) != one) table[cp] |= kCharNfcUnstable;
  }
  // Hangul vowel and trailing jamo compose algorithmically with a preceding syllable.
  for (uint32_t cp = 0x1161; cp <= 0x1175; ++cp) table[cp] |= kCharNfcUnstable;
  for (uint32_t cp = 0x11A8; cp <= 0x11C2; ++cp) table[cp] |= kCharNfcUnstable;
  return table;
}

const uint8_t* class_table() {
  static const std::vector<uint8_t> table = build_class_table();
  return table.data();
}

}  // namespace

uint8_t char_class(uint32_t cp) {
  static const uint8_t* table = class_table();
  return cp < kCodePoints ? table[cp] : 0;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}


bool utf8_validate(std::string_view text, const char* what) {
  bool stable = true;
  size_t i = 0, n = text.size();
  while (i < n) {
    unsigned char b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) { ++i; continue; }
    int len = utf8_sequence_length(text, i);
    if (len == 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      fail(what, ": invalid UTF-8 at byte offset ", i, " (byte ", hex, ")");
    }
    uint32_t cp;
    utf8_decode_valid(text, i, &cp);
    if (char_class(cp) & kCharNfcUnstable) stable = false;
    i += static_cast<size_t>(len);
  }
  return stable;
}

std::string nfc(std::string_view text) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    static_cast<utf8proc_ssize_t>(text.size()), &out,
                                    static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("NFC normalisation failed: ", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0, n = bytes.size();
  while (i < n) {
    unsigned char b = static_cast<unsigned char>(bytes[i]);
    if (b < 0x80) { out.push_back(static_cast<char>(b)); ++i; continue; }
    int prefix = 0;
    int len = utf8_sequence_length(bytes, i, &prefix);
    if (len > 0) {
      out.append(bytes.data() + i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else {
      out.append("\xEF\xBF\xBD");
      i += static_cast<size_t>(prefix > 0 ? prefix : 1);
    }
  }
  return out;
}

namespace {

struct ByteLevelMaps {
  uint32_t to_char[256];
  int16_t from_char[324];  // every alphabet character is below U+0144
};

ByteLevelMaps build_byte_level_maps() {
  ByteLevelMaps m;
  for (auto& v : m.from_char) v = -1;
  // Printable bytes keep their own code point; the others are moved to 256, 257, ... in order.
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    m.to_char[b] = printable ? static_cast<uint32_t>(b) : next++;
    m.from_char[m.to_char[b]] = static_cast<int16_t>(b);
  }
  return m;
}

const ByteLevelMaps& byte_level_maps() {
  static const ByteLevelMaps maps = build_byte_level_maps();
  return maps;
}

}  // namespace

uint32_t byte_level_char(uint8_t b) { return byte_level_maps().to_char[b]; }

bool byte_level_decode(std::string_view text, std::string* bytes) {
  const ByteLevelMaps& m = byte_level_maps();
  bytes->clear();
  size_t i = 0;
  while (i < text.size()) {
    int len = utf8_sequence_length(text, i);
    if (len == 0) return false;
    uint32_t cp;
    utf8_decode_valid(text, i, &cp);
    if (cp >= 324 || m.from_char[cp] < 0) return false;
    bytes->push_back(static_cast<char>(m.from_char[cp]));
    i += static_cast<size_t>(len);
  }
  return true;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) utf8_append(out, byte_level_char(b));
  return out;
}

}  // namespace sqlrl
