#include "tokenizer/stream.h"

#include <algorithm>

#include "runtime/error.h"
#include "tokenizer/unicode.h"

namespace sqlrl {

std::string Utf8Stream::push(std::string_view bytes) {
  pending.append(bytes);
  // Everything up to the start of a trailing partial character (one that more bytes could still
  // complete) is final; lossy-decoding it on its own gives the same as decoding it later in full.
  size_t keep_from = pending.size();
  size_t back = 0;
  while (back < 3 && back < pending.size()) {
    size_t pos = pending.size() - 1 - back;
    unsigned char b = static_cast<unsigned char>(pending[pos]);
    if ((b & 0xC0) != 0x80) {  // a lead byte (or ASCII): is it a valid, unfinished start?
      int prefix = 0;
      int len = utf8_sequence_length(pending, pos, &prefix);
      if (len == 0 && prefix > 0 && pos + static_cast<size_t>(prefix) == pending.size()) keep_from = pos;
      break;
    }
    ++back;
  }
  std::string out = utf8_lossy(std::string_view(pending).substr(0, keep_from));
  pending.erase(0, keep_from);
  return out;
}

std::string Utf8Stream::finish() {
  std::string out = utf8_lossy(pending);
  pending.clear();
  return out;
}

StopMatcher::StopMatcher(std::vector<std::string> stop_strings) : stops(std::move(stop_strings)) {
  for (const std::string& s : stops) check(!s.empty(), "stop strings must not be empty");
}

StopMatcher::Hit StopMatcher::feed(std::string_view chunk) {
  Hit hit;
  if (stops.empty()) { consumed += chunk.size(); return hit; }
  std::string window = tail;
  window.append(chunk);
  size_t window_start = consumed - tail.size();  // offset of window[0] in the whole text
  size_t best = std::string::npos;
  for (size_t k = 0; k < stops.size(); ++k) {
    // Only occurrences that end in the new chunk are new (older ones were reported before).
    size_t from = tail.size() >= stops[k].size() - 1 ? tail.size() - (stops[k].size() - 1) : 0;
    size_t p = window.find(stops[k], from);
    if (p == std::string::npos) continue;
    if (p < best || (p == best && stops[k].size() > stops[hit.stop].size())) {
      best = p;
      hit.stop = static_cast<int>(k);
    }
  }
  if (hit.stop >= 0) {
    hit.begin = window_start + best;
    hit.end = hit.begin + stops[hit.stop].size();
  }
  consumed += chunk.size();
  size_t longest = 0;
  for (const std::string& s : stops) longest = std::max(longest, s.size());
  size_t keep = std::min(window.size(), longest - 1);
  tail = window.substr(window.size() - keep);
  return hit;
}

TokenStream::TokenStream(const Tokenizer& tokenizer, std::vector<std::string> stops, bool skip_special_tokens)
    : tok(&tokenizer), skip_special(skip_special_tokens), matcher(std::move(stops)) {}

namespace {

TokenStream::Step emit(TokenStream& s, std::string chunk) {
  TokenStream::Step step;
  size_t before = s.text.size();
  StopMatcher::Hit hit = s.matcher.feed(chunk);
  if (hit.stop >= 0) {
    size_t keep = hit.end - before;  // the stop ends inside this chunk
    step.overflow = chunk.size() - keep;
    chunk.resize(keep);
    step.stop = hit.stop;
    s.stopped = true;
    s.stop = hit.stop;
  }
  s.text += chunk;
  step.text = std::move(chunk);
  return step;
}

}  // namespace

TokenStream::Step TokenStream::push(int32_t id) {
  check(!stopped, "token stream: push after stop string '", stopped ? matcher.stops[stop] : std::string(), "'");
  std::string bytes;
  append_token_bytes(*tok, std::span<const int32_t>(&id, 1), bytes, skip_special);
  return emit(*this, utf8.push(bytes));
}

TokenStream::Step TokenStream::finish() {
  if (stopped) return {};
  return emit(*this, utf8.finish());
}

}  // namespace sqlrl
