#include "rl/sft/sft_data.h"

#include <fstream>

#include "rl/agent/untrusted.h"
#include "runtime/error.h"
#include "runtime/json_depth.h"

namespace sqlrl::rl {

int64_t SftSequence::trained() const {
  int64_t n = 0;
  for (uint8_t m : mask) n += m;
  return n;
}

std::vector<SftSegment> chat_segments(const std::vector<ChatMessage>& messages, const ChatOptions& options,
                                      const std::string& source) {
  ChatOptions o = options;
  o.add_generation_prompt = false;
  const std::string text = render_chat(messages, o);
  const std::string header = "<|im_start|>assistant\n", end = "<|im_end|>";
  size_t assistants = 0;
  for (const ChatMessage& m : messages) assistants += m.role == "assistant";
  std::vector<SftSegment> out;
  size_t at = 0, found = 0;
  auto push = [&](size_t from, size_t to, bool train) {
    if (to > from) out.push_back({text.substr(from, to - from), train});
  };
  for (size_t h = text.find(header); h != std::string::npos; h = text.find(header, at)) {
    size_t begin = h + header.size();
    size_t stop = text.find(end, begin);
    check(stop != std::string::npos, source, ": assistant turn ", found + 1, " has no <|im_end|> in the rendering");
    size_t next = text.find(header, begin);
    check(next == std::string::npos || next > stop, source, ": assistant turn ", found + 1,
          " holds \"<|im_start|>assistant\" before its <|im_end|>");
    push(at, begin, false);
    push(begin, stop + end.size(), true);
    at = stop + end.size();
    ++found;
  }
  check(found == assistants, source, ": ", assistants, " assistant messages but ", found,
        " assistant turns in the rendering (a message's content holds \"<|im_start|>assistant\\n\" or "
        "\"<|im_end|>\")");
  push(at, text.size(), false);
  return out;
}

SftSegment marked_segment(std::string_view marked, bool train) {
  Unmarked u = unmark(marked);
  return SftSegment{std::move(u.text), train, std::move(u.plain)};
}

SftSequence tokenize_segments(const Tokenizer& tok, const std::vector<SftSegment>& segments) {
  SftSequence seq;
  for (const SftSegment& s : segments) {
    size_t before = seq.tokens.size();
    EncodeOptions o;
    o.plain_ranges = s.plain;
    encode_append(tok, s.text, seq.tokens, o);
    seq.mask.insert(seq.mask.end(), seq.tokens.size() - before, s.train ? 1 : 0);
  }
  return seq;
}

namespace {

const nlohmann::ordered_json& field(const nlohmann::ordered_json& j, const char* key, const std::string& source) {
  auto it = j.find(key);
  check(it != j.end(), source, ": field '", key, "' is missing");
  return *it;
}

SftSequence from_tokens(const nlohmann::ordered_json& line, const std::string& source) {
  const auto& tokens = field(line, "tokens", source);
  const auto& mask = field(line, "mask", source);
  check(tokens.is_array() && mask.is_array(), source, ": 'tokens' and 'mask' must be arrays");
  check(tokens.size() == mask.size(), source, ": 'tokens' has ", tokens.size(), " entries but 'mask' ", mask.size());
  SftSequence seq;
  for (size_t i = 0; i < tokens.size(); ++i) {
    check(tokens[i].is_number_integer() && tokens[i].get<int64_t>() >= 0 && tokens[i].get<int64_t>() <= INT32_MAX,
          source, ": tokens[", i, "] is not a token id: ", tokens[i].dump());
    check(mask[i].is_number_integer() && (mask[i].get<int64_t>() == 0 || mask[i].get<int64_t>() == 1), source,
          ": mask[", i, "] must be 0 or 1, got ", mask[i].dump());
    seq.tokens.push_back(static_cast<int32_t>(tokens[i].get<int64_t>()));
    seq.mask.push_back(static_cast<uint8_t>(mask[i].get<int64_t>()));
  }
  return seq;
}

std::vector<SftSegment> segments_of(const nlohmann::ordered_json& line, const std::string& source) {
  const auto& segs = field(line, "segments", source);
  check(segs.is_array(), source, ": 'segments' must be an array");
  std::vector<SftSegment> out;
  for (size_t i = 0; i < segs.size(); ++i) {
    const auto& s = segs[i];
    check(s.is_object(), source, ": segments[", i, "] is not an object");
    auto text = s.find("text"), train = s.find("train");
    check(text != s.end() && text->is_string(), source, ": segments[", i, "].text missing or not a string");
    check(train != s.end() && train->is_boolean(), source, ": segments[", i, "].train missing or not a boolean");
    SftSegment seg{text->get<std::string>(), train->get<bool>(), {}};
    if (auto plain = s.find("plain"); plain != s.end()) {
      check(plain->is_array(), source, ": segments[", i, "].plain must be an array of [begin, end] byte ranges");
      size_t last = 0;
      for (size_t r = 0; r < plain->size(); ++r) {
        const auto& range = (*plain)[r];
        check(range.is_array() && range.size() == 2 && range[0].is_number_unsigned() && range[1].is_number_unsigned(),
              source, ": segments[", i, "].plain[", r, "] is not a [begin, end] pair of byte offsets");
        size_t b = range[0].get<size_t>(), e = range[1].get<size_t>();
        check(b >= last && b < e && e <= seg.text.size(), source, ": segments[", i, "].plain[", r, "] = [", b, ", ", e,
              "] is not a sorted, disjoint, non-empty range within the text's ", seg.text.size(), " bytes");
        seg.plain.push_back({b, e});
        last = e;
      }
    }
    out.push_back(std::move(seg));
  }
  return out;
}

}  // namespace

SftSequence sft_sequence_from_json(const nlohmann::ordered_json& line, const Tokenizer& tok, const ChatOptions& options,
                                   const std::string& source) {
  check(line.is_object(), source, ": not a JSON object");
  const int kinds = int(line.contains("messages")) + int(line.contains("segments")) + int(line.contains("tokens"));
  check(kinds == 1, source, ": needs exactly one of 'messages', 'segments', 'tokens' (found ", kinds, ")");
  SftSequence seq;
  if (line.contains("tokens")) {
    seq = from_tokens(line, source);
  } else if (line.contains("segments")) {
    seq = tokenize_segments(tok, segments_of(line, source));
  } else {
    check(line["messages"].is_array(), source, ": 'messages' must be an array");
    std::vector<ChatMessage> messages;
    ChatOptions o = options;
    try {
      chat_request_from_json(line, &messages, &o);
    } catch (const Error& e) {
      fail(source, ": ", e.what());
    }
    seq = tokenize_segments(tok, chat_segments(messages, o, source));
  }
  seq.source = source;
  return seq;
}

std::string segments_jsonl(const std::vector<SftSegment>& segments, const nlohmann::ordered_json& extra) {
  nlohmann::ordered_json j = extra.is_object() ? extra : nlohmann::ordered_json::object();
  nlohmann::ordered_json segs = nlohmann::ordered_json::array();
  for (const SftSegment& s : segments) {
    nlohmann::ordered_json seg = {{"text", s.text}, {"train", s.train}};
    if (!s.plain.empty()) seg["plain"] = s.plain;
    segs.push_back(std::move(seg));
  }
  j["segments"] = std::move(segs);
  return j.dump();
}

std::vector<SftSequence> load_sft_jsonl(const std::string& path, const Tokenizer& tok, const ChatOptions& options,
                                        int64_t vocab_limit, SftLoadStats* stats) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path, ": cannot open SFT data");
  const int64_t limit = vocab_limit > 0 ? vocab_limit : static_cast<int64_t>(tok.size());
  SftLoadStats st;
  std::vector<SftSequence> out;
  std::string text;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string source = path + ":" + std::to_string(number);
    ++st.lines;
    check_json_depth(text, source);
    nlohmann::ordered_json line = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    check(!line.is_discarded(), source, ": not valid JSON");
    SftSequence seq = sft_sequence_from_json(line, tok, options, source);
    for (size_t i = 0; i < seq.tokens.size(); ++i)
      check(seq.tokens[i] < limit, source, ": token ", i, " is id ", seq.tokens[i], ", outside the vocabulary of ",
            limit);
    if (seq.trained() == 0 || seq.tokens.size() < 2) {
      ++st.skipped_no_target;
      continue;
    }
    st.tokens += static_cast<int64_t>(seq.tokens.size());
    st.trained_tokens += seq.trained();
    out.push_back(std::move(seq));
  }
  st.sequences = static_cast<int64_t>(out.size());
  if (stats) *stats = st;
  return out;
}

}  // namespace sqlrl::rl
