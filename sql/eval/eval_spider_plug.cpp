// parse.py's value extraction and plugging (see eval_spider_plug.h). The lexer tries sqlparse
// 0.4.2's SQL_REGEX rules in their order at each position; only token boundaries, whitespace
// and string literals matter here, so keyword classes collapse into "Other". Non-ASCII bytes
// count as word characters and letters (Python's \w and [A-ZÀ-Ü] with re.UNICODE, approximately).
// sqlparse.format(keyword_case='upper') in replace_values is left out: it changes only the case
// of keywords, and every piece is lower-cased afterwards; no value or slot depends on it.
#include "sql/eval/eval_spider_plug.h"

#include <cctype>
#include <utility>

namespace sqlrl::sql {
namespace {

bool py_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }
bool word_char(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }
bool letter(unsigned char c) { return std::isalpha(c) || c >= 0x80; }
bool digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool hex_digit(unsigned char c) { return std::isxdigit(c) != 0; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// Length of q(qq|\\\\|\\q|[^q])*q at i (backslash alternatives only when `backslash`), with the
// regex engine's depth-first backtracking order; 0 when it does not match. A failed star position
// fails on every path, so each is visited once.
size_t quoted_length(std::string_view s, size_t i, char q, bool backslash) {
  const size_t n = s.size();
  std::vector<char> failed(n + 2, 0);
  std::vector<std::pair<size_t, int>> stack{{i + 1, 0}};
  while (!stack.empty()) {
    size_t j = stack.back().first;
    int alt = stack.back().second++;
    if (failed[j] || alt > 4) {
      failed[j] = 1;
      stack.pop_back();
      continue;
    }
    size_t next = 0;
    if (alt == 0 && j + 1 < n && s[j] == q && s[j + 1] == q) next = j + 2;
    if (alt == 1 && backslash && j + 1 < n && s[j] == '\\' && s[j + 1] == '\\') next = j + 2;
    if (alt == 2 && backslash && j + 1 < n && s[j] == '\\' && s[j + 1] == q) next = j + 2;
    if (alt == 3 && j < n && s[j] != q) next = j + 1;
    if (alt == 4 && j < n && s[j] == q) return j + 1 - i;
    if (next) stack.push_back({next, 0});
  }
  return 0;
}

size_t word_run(std::string_view s, size_t i) {
  size_t j = i;
  while (j < s.size() && word_char(s[j])) ++j;
  return j - i;
}

// -?0x[\dA-F]+
size_t match_hex(std::string_view s, size_t i) {
  size_t j = i + (s[i] == '-');
  if (j + 2 >= s.size() || s[j] != '0' || (s[j + 1] != 'x' && s[j + 1] != 'X')) return 0;
  size_t k = j + 2;
  while (k < s.size() && hex_digit(s[k])) ++k;
  return k > j + 2 ? k - i : 0;
}

// -?\d+(\.\d+)?E-?\d+
size_t match_float_exp(std::string_view s, size_t i) {
  size_t j = i + (s[i] == '-');
  size_t k = j;
  while (k < s.size() && digit(s[k])) ++k;
  if (k == j) return 0;
  if (k + 1 < s.size() && s[k] == '.' && digit(s[k + 1])) {
    size_t m = k + 1;
    while (m < s.size() && digit(s[m])) ++m;
    size_t e = m;
    if (e < s.size() && (s[e] == 'e' || s[e] == 'E')) {
      k = m;
    }
  }
  if (k >= s.size() || (s[k] != 'e' && s[k] != 'E')) return 0;
  size_t m = k + 1;
  if (m < s.size() && s[m] == '-') ++m;
  size_t d = m;
  while (m < s.size() && digit(s[m])) ++m;
  return m > d ? m - i : 0;
}

bool letter_or_underscore_at(std::string_view s, size_t k) { return k < s.size() && (letter(s[k]) || s[k] == '_'); }

// (?![_A-ZÀ-Ü])-?(\d+(\.\d*)|\.\d+)(?![_A-ZÀ-Ü]), trying shorter \d* / \d+ as the engine does.
size_t match_float(std::string_view s, size_t i) {
  size_t j = i + (s[i] == '-');
  size_t k = j;
  while (k < s.size() && digit(s[k])) ++k;
  if (k > j) {
    if (k >= s.size() || s[k] != '.') return 0;
    size_t m = k + 1;
    while (m < s.size() && digit(s[m])) ++m;
    for (size_t end = m;; --end) {
      if (!letter_or_underscore_at(s, end)) return end - i;
      if (end == k + 1) return 0;
    }
  }
  if (j >= s.size() || s[j] != '.') return 0;
  size_t m = j + 1;
  while (m < s.size() && digit(s[m])) ++m;
  for (size_t end = m; end > j + 1; --end)
    if (!letter_or_underscore_at(s, end)) return end - i;
  return 0;
}

// (?![_A-ZÀ-Ü])-?\d+(?![_A-ZÀ-Ü])
size_t match_integer(std::string_view s, size_t i) {
  size_t j = i + (s[i] == '-');
  size_t k = j;
  while (k < s.size() && digit(s[k])) ++k;
  for (size_t end = k; end > j; --end)
    if (!letter_or_underscore_at(s, end)) return end - i;
  return 0;
}

// One token at i: its length and kind, following SQL_REGEX's order.
std::pair<size_t, SqlparseTokenKind> next_token(std::string_view s, size_t i) {
  using K = SqlparseTokenKind;
  const size_t n = s.size();
  const unsigned char c = s[i];
  auto at = [&](size_t k) -> unsigned char { return k < n ? static_cast<unsigned char>(s[k]) : 0; };
  // (--|# ).*?(\r\n|\r|\n|$)  (the hint form is a special case of it)
  if ((c == '-' && at(i + 1) == '-') || (c == '#' && at(i + 1) == ' ')) {
    size_t j = i + 2;
    while (j < n && s[j] != '\r' && s[j] != '\n') ++j;
    if (j < n) j += (s[j] == '\r' && at(j + 1) == '\n') ? 2 : 1;
    return {j - i, K::Other};
  }
  if (c == '/' && at(i + 1) == '*') {
    size_t close = s.find("*/", i + 2);
    if (close != std::string_view::npos) return {close + 2 - i, K::Other};
  }
  if (c == '\r' && at(i + 1) == '\n') return {2, K::Whitespace};
  if (py_space(c)) return {1, K::Whitespace};
  if ((c == ':' && at(i + 1) == '=') || (c == ':' && at(i + 1) == ':')) return {2, K::Other};
  if (c == '*') return {1, K::Other};
  if (c == '`') {
    if (size_t len = quoted_length(s, i, '`', false)) return {len, K::Other};
  }
  // ((?<!\S)\$(?:[_A-ZÀ-Ü]\w*)?\$)[\s\S]*?\1
  if (c == '$' && (i == 0 || py_space(s[i - 1]))) {
    size_t j = i + 1;
    if (letter_or_underscore_at(s, j)) j += word_run(s, j);
    if (at(j) == '$') {
      std::string_view tag = s.substr(i, j + 1 - i);
      size_t close = s.find(tag, j + 1);
      if (close != std::string_view::npos) return {close + tag.size() - i, K::Other};
    }
  }
  if (c == '?') return {1, K::Other};
  if (c == '%') {  // %(\(\w+\))?s
    size_t j = i + 1;
    if (at(j) == '(') {
      size_t w = word_run(s, j + 1);
      if (w > 0 && at(j + 1 + w) == ')') j += w + 2;
    }
    if (at(j) == 's') return {j + 1 - i, K::Other};
  }
  if ((c == '$' || c == ':' || c == '?') && (i == 0 || !word_char(s[i - 1])) && word_char(at(i + 1)))
    return {1 + word_run(s, i + 1), K::Other};
  if (c == '\\' && word_char(at(i + 1))) return {1 + word_run(s, i + 1), K::Other};
  // (CASE|IN|VALUES|USING|FROM|AS)\b, then the Name rules: all end where the \w run ends.
  if (word_char(c) && !digit(c)) {
    size_t w = word_run(s, i);
    std::string_view word = s.substr(i, w);
    for (std::string_view kw : {"case", "in", "values", "using", "from", "as"})
      if (iequals(word, kw)) return {w, K::Other};
  }
  if ((c == '@' || c == '#')) {  // (@|##|#)[A-ZÀ-Ü]\w+
    for (size_t p : {size_t(1), size_t(2)}) {
      if (p == 2 && !(c == '#' && at(i + 1) == '#')) continue;
      if (letter(at(i + p)) && word_char(at(i + p + 1))) return {p + word_run(s, i + p), K::Other};
    }
  }
  if (letter(c)) {
    size_t w = word_run(s, i);
    size_t k = i + w;
    while (k < n && py_space(s[k])) ++k;
    if (at(k) == '.' || (i > 0 && s[i - 1] == '.') || at(i + w) == '(') return {w, K::Other};
  }
  if (c == '-' || digit(c) || c == '.') {
    if (size_t len = match_hex(s, i)) return {len, K::Other};
    if (size_t len = match_float_exp(s, i)) return {len, K::Other};
    if (size_t len = match_float(s, i)) return {len, K::Other};
    if (size_t len = match_integer(s, i)) return {len, K::Other};
  }
  if (c == '\'') {
    if (size_t len = quoted_length(s, i, '\'', true)) return {len, K::String};
  }
  if (c == '"') {
    if (size_t len = quoted_length(s, i, '"', true)) return {len, K::String};
  }
  if (c == '[' && (i == 0 || !(word_char(s[i - 1]) || s[i - 1] == ']' || s[i - 1] == ')'))) {
    size_t j = i + 1;
    while (j < n && s[j] != ']' && s[j] != '[') ++j;
    if (j > i + 1 && at(j) == ']') return {j + 1 - i, K::Other};
  }
  // The multi-word keyword rules (GROUP BY, NOT NULL, LEFT JOIN, ...) give the same pieces
  // once whitespace splits them, so words are taken one at a time: \w[$#\w]*.
  if (word_char(c)) {
    size_t j = i + 1;
    while (j < n && (word_char(s[j]) || s[j] == '$' || s[j] == '#')) ++j;
    return {j - i, K::Other};
  }
  if (c == ';' || c == ':' || c == '(' || c == ')' || c == '[' || c == ']' || c == ',' || c == '.') return {1, K::Other};
  auto run_of = [&](std::string_view set) {
    size_t j = i;
    while (j < n && set.find(s[j]) != std::string_view::npos) ++j;
    return j - i;
  };
  if (size_t len = run_of("<>=~!")) return {len, K::Other};
  if (size_t len = run_of("+/@#%^&|-")) return {len, K::Other};
  return {1, K::Other};  // tokens.Error
}

std::string python_strip(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && py_space(s[b])) ++b;
  while (e > b && py_space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> python_split(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && py_space(s[i])) ++i;
    size_t b = i;
    while (i < s.size() && !py_space(s[i])) ++i;
    if (i > b) out.emplace_back(s.substr(b, i - b));
  }
  return out;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0, hit;
  while ((hit = s.find(from, pos)) != std::string_view::npos) {
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

std::string join(const std::vector<std::string>& pieces) {
  std::string out;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i) out += ' ';
    out += pieces[i];
  }
  return out;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// re.findall(r"[-+]?\d*\.\d+", s)
std::vector<std::string> find_floats(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t k = i + ((s[i] == '-' || s[i] == '+') ? 1 : 0);
    while (k < s.size() && digit(s[k])) ++k;
    if (k + 1 < s.size() && s[k] == '.' && digit(s[k + 1])) {
      size_t end = k + 1;
      while (end < s.size() && digit(s[end])) ++end;
      out.emplace_back(s.substr(i, end - i));
      i = end;
    } else {
      ++i;
    }
  }
  return out;
}

// [i.strip() for i in re.findall(r"[^tT]\d+", s)]
std::vector<std::string> find_ints(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i + 1 < s.size()) {
    if (s[i] != 't' && s[i] != 'T' && digit(s[i + 1])) {
      size_t end = i + 1;
      while (end < s.size() && digit(s[end])) ++end;
      out.push_back(python_strip(s.substr(i, end - i)));
      i = end;
    } else {
      ++i;
    }
  }
  return out;
}

bool contains(const std::vector<std::string>& list, const std::string& s) {
  for (const std::string& x : list)
    if (x == s) return true;
  return false;
}

// re.findall(r"[Tt]\d+\.", tok) is not empty
bool has_alias_dot(std::string_view tok) {
  for (size_t i = 0; i + 2 < tok.size(); ++i) {
    if (tok[i] != 't' && tok[i] != 'T') continue;
    size_t k = i + 1;
    while (k < tok.size() && digit(tok[k])) ++k;
    if (k > i + 1 && k < tok.size() && tok[k] == '.') return true;
  }
  return false;
}

// re.sub(r"(T\d+\.)\s", r"\1", s)
std::string glue_alias_dot(std::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == 'T') {
      size_t k = i + 1;
      while (k < s.size() && digit(s[k])) ++k;
      if (k > i + 1 && k + 1 < s.size() && s[k] == '.' && py_space(s[k + 1])) {
        out.append(s.substr(i, k + 1 - i));
        i = k + 2;
        continue;
      }
    }
    out.push_back(s[i++]);
  }
  return out;
}

void add_value(std::vector<std::string>& values, const std::string& v) {
  if (!contains(values, v)) values.push_back(v);
}

}  // namespace

std::vector<SqlparseToken> sqlparse_tokens(std::string_view sql) {
  std::vector<SqlparseToken> out;
  size_t i = 0;
  while (i < sql.size()) {
    auto [len, kind] = next_token(sql, i);
    out.push_back({kind, sql.substr(i, len)});
    i += len;
  }
  return out;
}

QueryValues extract_query_values(std::string_view sql) {
  QueryValues qv;
  // reformat_query
  std::string text;
  for (char ch : python_strip(sql))
    if (ch != ';' && ch != '\t') text.push_back(ch);
  std::vector<std::string> kept;
  for (const SqlparseToken& t : sqlparse_tokens(text))
    if (t.kind != SqlparseTokenKind::Whitespace) kept.emplace_back(t.text);
  std::string query = join(kept);
  for (std::string_view star : {"t1.*", "t2.*", "t3.*", "T1.*", "T2.*", "T3.*"}) query = replace_all(query, star, "*");
  // replace_values
  query = glue_alias_dot(query);
  // strip_query
  std::vector<std::string> strings;
  for (const SqlparseToken& t : sqlparse_tokens(query))
    if (t.kind == SqlparseTokenKind::String) strings.emplace_back(t.text);
  for (const std::string& v : strings) {
    add_value(qv.values, v);
    query = replace_all(query, python_strip(v), "VALUERARE");
  }
  std::vector<std::string> pieces = python_split(query);
  std::vector<std::string> floats = find_floats(query);
  for (std::string& p : pieces)
    if (contains(floats, p)) {
      add_value(qv.values, p);
      p = "VALUERARE";
    }
  std::vector<std::string> ints = find_ints(join(pieces));
  for (std::string& p : pieces)
    if (contains(ints, p)) {
      add_value(qv.values, p);
      p = "VALUERARE";
    }
  for (const std::string& p : pieces) {
    if (p.find('.') != std::string::npos && has_alias_dot(p)) {
      for (const std::string& part : python_split(replace_all(p, ".", " . "))) qv.pieces.push_back(lower(part));
    } else if (!p.empty()) {
      qv.pieces.push_back(lower(p));
    }
  }
  return qv;
}

bool for_each_plugged_prediction(std::string_view gold, std::string_view pred,
                                 const std::function<bool(const std::string&)>& visit) {
  // sqlparse.parse of an empty text has no statement: the official code raises IndexError there;
  // such a side yields no variant here.
  if (python_strip(gold).empty() || python_strip(pred).empty()) return false;
  std::vector<std::string> values = extract_query_values(gold).values;
  std::vector<std::string> pieces = extract_query_values(pred).pieces;
  std::vector<size_t> slots;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (pieces[i] == kValueSlot) slots.push_back(i);
  if (!slots.empty() && values.empty()) return false;
  // itertools.product(values, repeat=len(slots)): the last slot varies fastest.
  std::vector<size_t> choice(slots.size(), 0);
  while (true) {
    for (size_t k = 0; k < slots.size(); ++k) pieces[slots[k]] = values[choice[k]];
    if (visit(join(pieces))) return true;
    size_t k = slots.size();
    while (k > 0 && ++choice[k - 1] == values.size()) choice[--k] = 0;
    if (k == 0) return false;
  }
}

}  // namespace sqlrl::sql
