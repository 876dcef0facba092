#include "runtime/utf8.h"

namespace sqlrl {

int utf8_sequence_length(std::string_view text, size_t pos, int* prefix_len) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size();
  unsigned char b = s[pos];
  if (prefix_len) *prefix_len = 0;
  if (b < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte (Unicode table 3-7)
  if (b >= 0xC2 && b <= 0xDF) need = 2;
  else if (b >= 0xE0 && b <= 0xEF) { need = 3; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
  else if (b >= 0xF0 && b <= 0xF4) { need = 4; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
  else return 0;
  int have = 1;
  for (; have < need; ++have) {
    if (pos + have >= n) break;
    unsigned char c = s[pos + have];
    unsigned char l = have == 1 ? lo : 0x80, h = have == 1 ? hi : 0xBF;
    if (c < l || c > h) break;
  }
  if (have == need) return need;
  if (prefix_len) *prefix_len = have;
  return 0;
}

bool utf8_is_valid(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const int len = utf8_sequence_length(text, i);
    if (len == 0) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

}  // namespace sqlrl
