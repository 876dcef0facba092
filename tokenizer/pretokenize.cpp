#include "tokenizer/pretokenize.h"

#include "tokenizer/unicode.h"

namespace sqlrl {

const char* const kQwenPretokenizerPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

namespace {

// ASCII is most of the input: one table lookup instead of the full Unicode table.
struct AsciiClasses {
  uint8_t c[128];
  AsciiClasses() {
    for (int i = 0; i < 128; ++i) c[i] = 0;
    for (int i = 'a'; i <= 'z'; ++i) c[i] = kCharLetter;
    for (int i = 'A'; i <= 'Z'; ++i) c[i] = kCharLetter;
    for (int i = '0'; i <= '9'; ++i) c[i] = kCharNumber;
    for (int i = 9; i <= 13; ++i) c[i] = kCharSpace;
    c[static_cast<unsigned char>(' ')] = kCharSpace;
  }
};
const AsciiClasses kAscii;

struct Cursor {
  std::string_view text;
  // Code point and class at byte offset `pos`; at the end, cp = 0xFFFFFFFF and class 0 with len 0.
  inline int at(size_t pos, uint32_t* cp, uint8_t* cls) const {
    if (pos >= text.size()) { *cp = 0xFFFFFFFFu; *cls = 0; return 0; }
    unsigned char b = static_cast<unsigned char>(text[pos]);
    if (b < 0x80) { *cp = b; *cls = kAscii.c[b]; return 1; }
    int len = utf8_decode_valid(text, pos, cp);
    *cls = char_class(*cp) & (kCharLetter | kCharNumber | kCharSpace);
    return len;
  }
};

inline bool is_newline(uint32_t cp) { return cp == '\r' || cp == '\n'; }
// [^\s\p{L}\p{N}]
inline bool is_other(uint32_t cp, uint8_t cls) { return cp != 0xFFFFFFFFu && cls == 0; }

// Case-insensitive match of one ASCII letter; 's' also matches U+017F LATIN SMALL LETTER LONG S,
// whose simple case folding is 's' (Oniguruma and JavaScript both apply it under (?i)).
inline bool folds_to(uint32_t cp, char lower) {
  if (cp == static_cast<uint32_t>(lower) || cp == static_cast<uint32_t>(lower - 'a' + 'A')) return true;
  return lower == 's' && cp == 0x17F;
}

// Alternative 1: (?i:'s|'t|'re|'ve|'m|'ll|'d) at pos (text[pos] == '\''); returns the end or 0.
size_t match_contraction(const Cursor& c, size_t pos) {
  uint32_t a, b;
  uint8_t ca, cb;
  int la = c.at(pos + 1, &a, &ca);
  if (la == 0) return 0;
  if (folds_to(a, 's') || folds_to(a, 't') || folds_to(a, 'm') || folds_to(a, 'd')) return pos + 1 + la;
  int lb = c.at(pos + 1 + la, &b, &cb);
  if (lb == 0) return 0;
  if ((folds_to(a, 'r') && folds_to(b, 'e')) || (folds_to(a, 'v') && folds_to(b, 'e')) ||
      (folds_to(a, 'l') && folds_to(b, 'l')))
    return pos + 1 + la + lb;
  return 0;
}

size_t skip_letters(const Cursor& c, size_t pos) {
  uint32_t cp;
  uint8_t cls;
  for (;;) {
    int len = c.at(pos, &cp, &cls);
    if (len == 0 || !(cls & kCharLetter)) return pos;
    pos += static_cast<size_t>(len);
  }
}

size_t match_at(const Cursor& c, size_t pos) {
  uint32_t cp, next;
  uint8_t cls, next_cls;
  int len = c.at(pos, &cp, &cls);
  if (cp == '\'') {
    size_t end = match_contraction(c, pos);
    if (end) return end;
  }
  // Alternative 2: [^\r\n\p{L}\p{N}]?\p{L}+ (the optional prefix is tried first, greedily).
  if (cls & kCharLetter) return skip_letters(c, pos + len);
  int next_len = c.at(pos + len, &next, &next_cls);
  if (!is_newline(cp) && !(cls & kCharNumber) && (next_cls & kCharLetter)) return skip_letters(c, pos + len + next_len);
  // Alternative 3: \p{N}, one code point at a time.
  if (cls & kCharNumber) return pos + len;
  // Alternative 4: ' ?[^\s\p{L}\p{N}]+[\r\n]*'.
  bool leading_space = cp == ' ' && is_other(next, next_cls);
  if (leading_space || is_other(cp, cls)) {
    size_t run = leading_space ? pos + len : pos;
    uint32_t x;
    uint8_t xc;
    for (;;) {
      int l = c.at(run, &x, &xc);
      if (l == 0 || !is_other(x, xc)) break;
      run += static_cast<size_t>(l);
    }
    while (run < c.text.size() && is_newline(static_cast<unsigned char>(c.text[run]))) ++run;
    return run;
  }
  // Here cp is white space. Scan the whole white-space run once.
  size_t end = pos, last_newline_end = 0, last_char_begin = pos;
  for (;;) {
    uint32_t x;
    uint8_t xc;
    int l = c.at(end, &x, &xc);
    if (l == 0 || !(xc & kCharSpace)) break;
    last_char_begin = end;
    end += static_cast<size_t>(l);
    if (is_newline(x)) last_newline_end = end;
  }
  // Alternative 5: \s*[\r\n]+ -- \s* backs off until [\r\n]+ can match: the match ends after
  // the run's last newline.
  if (last_newline_end) return last_newline_end;
  // Alternative 6: \s+(?!\S) -- at the end of text the whole run; otherwise the run minus its
  // last character, which must stay in front of the following non-space.
  if (end == c.text.size()) return end;
  if (last_char_begin > pos) return last_char_begin;
  // Alternative 7: \s+.
  return end;
}

}  // namespace

void pretokenize_qwen(std::string_view text, std::vector<Piece>& pieces) {
  Cursor c{text};
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = match_at(c, pos);
    pieces.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(end)});
    pos = end;
  }
}

}  // namespace sqlrl
