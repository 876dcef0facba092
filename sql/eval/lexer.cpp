// Each step below is one regular expression of NLTK 3.8's NLTKWordTokenizer, applied in the
// same order to the whole string, written out as a scan. Rules that need a quote character are
// left out: spider_tokenize replaces every quote before tokenising, so they can never fire.
#include "sql/eval/lexer.h"

#include <cctype>
#include <cstdint>
#include <cstring>

#include "runtime/error.h"

namespace sqlrl::sql {
namespace {

bool is_word_byte(unsigned char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
// Python's \s and str.split() on ASCII: \t \n \v \f \r, 0x1c-0x1f and space.
bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

bool starts_with_at(std::string_view t, size_t i, std::string_view what) { return t.substr(i, what.size()) == what; }

// Length of a UTF-8 opening quote « “ ‘ „ at i, 0 if none.
size_t open_quote_at(std::string_view t, size_t i) {
  for (std::string_view q : {"\xC2\xAB", "\xE2\x80\x9C", "\xE2\x80\x98", "\xE2\x80\x9E"})
    if (starts_with_at(t, i, q)) return q.size();
  return 0;
}
// Length of a UTF-8 closing quote » ” ’ at i, 0 if none.
size_t close_quote_at(std::string_view t, size_t i) {
  for (std::string_view q : {"\xC2\xBB", "\xE2\x80\x9D", "\xE2\x80\x99"})
    if (starts_with_at(t, i, q)) return q.size();
  return 0;
}

// re.sub(pattern, r" \g<0> ", t) for a pattern given as "match length at position i".
template <typename Matcher>
std::string pad_matches(std::string_view t, Matcher match_at) {
  std::string out;
  out.reserve(t.size() + 16);
  size_t i = 0;
  while (i < t.size()) {
    size_t len = match_at(t, i);
    if (len == 0) {
      out.push_back(t[i++]);
      continue;
    }
    out.push_back(' ');
    out.append(t.substr(i, len));
    out.push_back(' ');
    i += len;
  }
  return out;
}

std::string pad_chars(std::string_view t, const char* chars) {
  return pad_matches(t, [chars](std::string_view s, size_t i) -> size_t { return std::strchr(chars, s[i]) && s[i] ? 1 : 0; });
}

// ([^\.])(\.)(CLASS*)\s*$ -> "\1 \2 \3 " (wide) or "\1 \2\3 " (narrow): the sentence-final
// period. The wide class is ]})>"' plus space and » ” ’; the narrow one has no space or unicode.
std::string final_period(std::string_view t, bool wide) {
  auto class_len = [wide](std::string_view s, size_t j) -> size_t {
    char c = s[j];
    if (c == ']' || c == ')' || c == '}' || c == '>' || c == '"' || c == '\'') return 1;
    if (!wide) return 0;
    if (c == ' ') return 1;
    return close_quote_at(s, j);
  };
  for (size_t p = 1; p < t.size(); ++p) {
    if (t[p] != '.' || t[p - 1] == '.') continue;
    size_t j = p + 1;
    while (j < t.size()) {
      size_t len = class_len(t, j);
      if (len == 0) break;
      j += len;
    }
    size_t k = j;
    while (k < t.size() && is_space(t[k])) ++k;
    if (k != t.size()) continue;
    std::string out(t.substr(0, p));
    out += wide ? " . " : " .";
    out.append(t.substr(p + 1, j - p - 1));
    out.push_back(' ');
    return out;
  }
  return std::string(t);
}

// ([:,])([^\d]) -> " \1 \2", then ([:,])$ -> " \1 ".
std::string colon_comma(std::string_view t) {
  std::string out;
  out.reserve(t.size() + 16);
  size_t i = 0;
  while (i < t.size()) {
    char c = t[i];
    if ((c == ':' || c == ',') && i + 1 < t.size() && !is_digit(t[i + 1])) {
      out += ' ';
      out += c;
      out += ' ';
      out += t[i + 1];
      i += 2;
    } else {
      out.push_back(t[i++]);
    }
  }
  if (!out.empty() && (out.back() == ':' || out.back() == ',')) {
    char c = out.back();
    out.pop_back();
    out += ' ';
    out += c;
    out += ' ';
  }
  return out;
}

// MacIntyre contractions that contain no quote: (?i)\b(can)(not)\b and friends -> " \1 \2 ".
std::string split_contractions(std::string_view text) {
  struct Rule {
    const char* first;
    const char* second;
    bool needs_space_after;  // (wan)(na)(?=\s) instead of \b
  };
  static const Rule rules[] = {{"can", "not", false}, {"gim", "me", false}, {"gon", "na", false},
                               {"got", "ta", false},  {"lem", "me", false}, {"wan", "na", true}};
  std::string t(text);
  for (const Rule& rule : rules) {
    size_t n1 = std::strlen(rule.first), n2 = std::strlen(rule.second), n = n1 + n2;
    std::string word = std::string(rule.first) + rule.second;
    std::string out;
    size_t i = 0;
    while (i < t.size()) {
      bool match = i + n <= t.size() && (i == 0 || !is_word_byte(t[i - 1]));
      for (size_t k = 0; match && k < n; ++k)
        match = (t[i + k] | 0x20) == word[k] && std::isalpha(static_cast<unsigned char>(t[i + k]));
      if (match) {
        bool at_end = i + n == t.size();
        match = rule.needs_space_after ? (!at_end && is_space(t[i + n])) : (at_end || !is_word_byte(t[i + n]));
      }
      if (!match) {
        out.push_back(t[i++]);
        continue;
      }
      out += ' ';
      out.append(t, i, n1);
      out += ' ';
      out.append(t, i + n1, n2);
      out += ' ';
      i += n;
    }
    t.swap(out);
  }
  return t;
}

}  // namespace

std::vector<std::string> nltk_word_tokenize(std::string_view text) {
  // STARTING_QUOTES: ([«“‘„]|[`]+) -> " \1 ", then (``) -> " \1 ".
  std::string t = pad_matches(text, [](std::string_view s, size_t i) -> size_t {
    if (s[i] == '`') {
      size_t j = i;
      while (j < s.size() && s[j] == '`') ++j;
      return j - i;
    }
    return open_quote_at(s, i);
  });
  t = pad_matches(t, [](std::string_view s, size_t i) -> size_t { return starts_with_at(s, i, "``") ? 2 : 0; });
  // PUNCTUATION, in NLTK's order.
  t = final_period(t, true);
  t = colon_comma(t);
  t = pad_matches(t, [](std::string_view s, size_t i) -> size_t {
    if (s[i] != '.' || i + 1 >= s.size() || s[i + 1] != '.') return 0;
    size_t j = i;
    while (j < s.size() && s[j] == '.') ++j;
    return j - i;
  });
  t = pad_chars(t, ";@#$%&");
  t = final_period(t, false);
  t = pad_chars(t, "?!");
  t = pad_chars(t, "*");
  // PARENS_BRACKETS, DOUBLE_DASHES.
  t = pad_chars(t, "[](){}<>");
  t = pad_matches(t, [](std::string_view s, size_t i) -> size_t { return starts_with_at(s, i, "--") ? 2 : 0; });
  // ENDING_QUOTES: only ([»”’]) can fire without quote characters.
  t = pad_matches(" " + t + " ", [](std::string_view s, size_t i) { return close_quote_at(s, i); });
  t = split_contractions(t);

  std::vector<std::string> tokens;
  size_t i = 0;
  while (i < t.size()) {
    while (i < t.size() && is_space(t[i])) ++i;
    size_t j = i;
    while (j < t.size() && !is_space(t[j])) ++j;
    if (j > i) tokens.emplace_back(t, i, j - i);
    i = j;
  }
  return tokens;
}

// Python's str.lower() for ASCII and the common alphabets (Latin-1, Latin Extended-A, Greek,
// Cyrillic); other code points are kept. Identifiers outside those never differ by case in the
// Spider/BIRD schemas, and quoted values are not lower-cased at all.
static uint32_t lower_code_point(uint32_t cp) {
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 0x20;
  if (cp >= 0x100 && cp <= 0x17F) {
    if (cp == 0x130 || cp == 0x138 || cp == 0x149 || cp == 0x17F) return cp;
    if (cp == 0x178) return 0xFF;
    bool odd_upper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    if (odd_upper) return (cp % 2 == 1) ? cp + 1 : cp;
    return (cp % 2 == 0) ? cp + 1 : cp;
  }
  if (cp >= 0x391 && cp <= 0x3AB && cp != 0x3A2) return cp + 0x20;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 0x20;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 0x50;
  return cp;
}

std::string python_lower(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    unsigned char c = text[i];
    if (c < 0x80) {
      out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
      ++i;
      continue;
    }
    // Two-byte sequences cover every range lower_code_point changes; keep anything else as is.
    if ((c & 0xE0) == 0xC0 && i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80) {
      uint32_t cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
      uint32_t lo = lower_code_point(cp);
      out.push_back(static_cast<char>(0xC0 | (lo >> 6)));
      out.push_back(static_cast<char>(0x80 | (lo & 0x3F)));
      i += 2;
      continue;
    }
    out.push_back(static_cast<char>(c));
    ++i;
  }
  return out;
}

std::vector<std::string> spider_tokenize(std::string_view query) {
  std::string s(query);
  std::vector<size_t> quotes;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\'') s[i] = '"';
    if (s[i] == '"') quotes.push_back(i);
  }
  if (quotes.size() % 2 != 0) fail("Unexpected quote: ", quotes.size(), " quote characters in: ", query);

  // Quoted values become one placeholder word each; they come back after tokenising.
  std::vector<std::pair<std::string, std::string>> values;  // placeholder -> "quoted text"
  std::string replaced;
  replaced.reserve(s.size());
  size_t from = 0;
  for (size_t q = 0; q < quotes.size(); q += 2) {
    size_t a = quotes[q], b = quotes[q + 1];
    replaced.append(s, from, a - from);
    std::string key = str_cat("__val_", a, "_", b, "__");
    replaced += key;
    values.emplace_back(std::move(key), s.substr(a, b - a + 1));
    from = b + 1;
  }
  replaced.append(s, from, std::string::npos);

  std::vector<std::string> toks = nltk_word_tokenize(replaced);
  for (std::string& tok : toks) {
    tok = python_lower(tok);
    if (tok.size() > 6 && tok.compare(0, 6, "__val_") == 0) {
      for (const auto& [key, value] : values)
        if (key == tok) {
          tok = value;
          break;
        }
    }
  }

  // "!" "=" -> "!=", likewise ">" "<", scanning the "=" tokens from the last one back. An "=" at
  // index 0 looks at toks[-1] as Python does.
  std::vector<size_t> eq_idxs;
  for (size_t i = 0; i < toks.size(); ++i)
    if (toks[i] == "=") eq_idxs.push_back(i);
  for (size_t k = eq_idxs.size(); k-- > 0;) {
    size_t eq = eq_idxs[k];
    size_t n = toks.size();
    const std::string& pre = eq == 0 ? toks[n - 1] : toks[eq - 1];
    if (pre != "!" && pre != ">" && pre != "<") continue;
    std::vector<std::string> merged;
    size_t head_end = eq == 0 ? n - 1 : eq - 1;  // toks[:eq-1]
    merged.assign(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(head_end));
    merged.push_back(pre + "=");
    merged.insert(merged.end(), toks.begin() + static_cast<std::ptrdiff_t>(eq + 1), toks.end());
    toks.swap(merged);
  }
  return toks;
}

}  // namespace sqlrl::sql
