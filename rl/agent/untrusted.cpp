#include "rl/agent/untrusted.h"

namespace sqlrl::rl {

namespace {
constexpr char kOpen = '\xFE', kClose = '\xFF';
bool is_mark(char c) { return c == kOpen || c == kClose; }
}  // namespace

std::string strip_marks(std::string_view marked) {
  std::string out;
  out.reserve(marked.size());
  for (char c : marked)
    if (!is_mark(c)) out += c;
  return out;
}

std::string untrusted(std::string_view text) { return kOpen + strip_marks(text) + kClose; }

Unmarked unmark(std::string_view marked) {
  Unmarked u;
  u.text.reserve(marked.size());
  for (char c : marked) {
    if (c == kOpen) {
      if (u.plain.empty() || u.plain.back().second != u.text.size()) u.plain.push_back({u.text.size(), u.text.size()});
    } else if (c == kClose) {
      if (!u.plain.empty()) u.plain.back().second = u.text.size();
    } else {
      u.text += c;
    }
  }
  // Empty ranges and an opener without its closer (not written by untrusted()) mark nothing.
  std::erase_if(u.plain, [](const std::pair<size_t, size_t>& r) { return r.second <= r.first; });
  return u;
}

std::vector<int32_t> encode_marked(const Tokenizer& tok, std::string_view marked) {
  Unmarked u = unmark(marked);
  EncodeOptions o;
  o.plain_ranges = u.plain;
  return encode(tok, u.text, o);
}

}  // namespace sqlrl::rl
