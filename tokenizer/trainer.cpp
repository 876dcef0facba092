#include "tokenizer/trainer.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "runtime/error.h"
#include "runtime/progress.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace sqlrl {

const std::vector<QwenAddedToken>& qwen3_added_tokens() {
  static const std::vector<QwenAddedToken> tokens = {
      {"<|endoftext|>", true},   {"<|im_start|>", true},      {"<|im_end|>", true},        {"<|object_ref_start|>", true},
      {"<|object_ref_end|>", true}, {"<|box_start|>", true},  {"<|box_end|>", true},       {"<|quad_start|>", true},
      {"<|quad_end|>", true},    {"<|vision_start|>", true},  {"<|vision_end|>", true},    {"<|vision_pad|>", true},
      {"<|image_pad|>", true},   {"<|video_pad|>", true},     {"<tool_call>", false},      {"</tool_call>", false},
      {"<|fim_prefix|>", false}, {"<|fim_middle|>", false},   {"<|fim_suffix|>", false},   {"<|fim_pad|>", false},
      {"<|repo_name|>", false},  {"<|file_sep|>", false},     {"<tool_response>", false},  {"</tool_response>", false},
      {"<think>", false},        {"</think>", false},
  };
  return tokens;
}

namespace {

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

inline uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

// Piece -> occurrences, over the corpus with added tokens cut out.
std::unordered_map<std::string, int64_t> count_pieces(std::string_view corpus) {
  std::unordered_map<std::string, int64_t> counts;
  std::vector<Piece> pieces;
  auto add_segment = [&](std::string_view segment) {
    if (segment.empty()) return;
    std::string normalized = nfc(segment);
    pieces.clear();
    pretokenize_qwen(normalized, pieces);
    for (const Piece& p : pieces) ++counts[normalized.substr(p.begin, p.end - p.begin)];
  };
  size_t start = 0;
  for (size_t pos = 0; pos < corpus.size(); ++pos) {
    if (corpus[pos] != '<') continue;
    for (const QwenAddedToken& t : qwen3_added_tokens()) {
      size_t len = std::strlen(t.content);
      if (corpus.compare(pos, len, t.content) == 0) {
        add_segment(corpus.substr(start, pos - start));
        pos += len - 1;
        start = pos + 1;
        break;
      }
    }
  }
  add_segment(corpus.substr(start));
  return counts;
}

}  // namespace

BpeTrainResult train_bpe(std::string_view corpus, const BpeTrainOptions& options) {
  const size_t n_added = qwen3_added_tokens().size();
  check(options.vocab_size >= 256 + n_added, "train_bpe: vocab_size ", options.vocab_size, " is below the minimum ", 256 + n_added,
        " (256 bytes + ", n_added, " added tokens)");
  check(options.min_frequency >= 1, "train_bpe: min_frequency must be at least 1");
  utf8_validate(corpus, "train_bpe: corpus");

  // Pieces in sorted order so that ties and ids do not depend on hash-map iteration.
  auto piece_counts = count_pieces(corpus);
  std::vector<std::pair<std::string, int64_t>> sorted(piece_counts.begin(), piece_counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [piece, count] : sorted) {
    Word w;
    w.count = count;
    for (unsigned char c : piece) w.symbols.push_back(c);
    words.push_back(std::move(w));
  }

  std::vector<std::string> token_bytes(256);
  for (int b = 0; b < 256; ++b) token_bytes[b] = std::string(1, static_cast<char>(b));
  std::unordered_map<std::string, int32_t> token_ids;
  for (int b = 0; b < 256; ++b) token_ids[token_bytes[b]] = b;

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> pair_words;  // may hold stale entries
  for (uint32_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w].symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      uint64_t key = pair_key(s[i], s[i + 1]);
      pair_count[key] += words[w].count;
      pair_words[key].push_back(w);
    }
  }
  // Max-heap on (count, then the smaller pair key): deterministic ties. Entries are checked
  // against pair_count when popped.
  using Entry = std::pair<int64_t, uint64_t>;
  auto less = [](const Entry& a, const Entry& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; };
  std::priority_queue<Entry, std::vector<Entry>, decltype(less)> heap(less);
  for (const auto& [key, count] : pair_count) heap.push({count, key});

  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<uint32_t> last_visit(words.size(), UINT32_MAX);
  const size_t target = options.vocab_size - n_added;
  // Counted in tokens learned, not merges: a merge that reaches an existing string adds none, and
  // the target is a token count.
  Progress bar = progress_start("tokenize train", "tokens", static_cast<int64_t>(target - 256));
  // A merge takes microseconds: a plain line per merge would bury a log under thousands of lines,
  // so off a terminal a line every 5% (a terminal redraws at most ~10 times a second anyway).
  progress_plain_lines(bar, 20);
  while (token_bytes.size() < target && !heap.empty()) {
    auto [count, key] = heap.top();
    heap.pop();
    auto it = pair_count.find(key);
    int64_t current = it == pair_count.end() ? 0 : it->second;
    if (current != count) {
      if (current > 0) heap.push({current, key});
      continue;
    }
    if (count < static_cast<int64_t>(options.min_frequency)) break;
    int32_t a = static_cast<int32_t>(key >> 32), b = static_cast<int32_t>(key & 0xFFFFFFFFu);
    std::string merged_bytes = token_bytes[a] + token_bytes[b];
    int32_t merged;
    auto found = token_ids.find(merged_bytes);
    if (found != token_ids.end()) {
      merged = found->second;  // the same string reached by another merge order
    } else {
      merged = static_cast<int32_t>(token_bytes.size());
      token_bytes.push_back(merged_bytes);
      token_ids.emplace(merged_bytes, merged);
    }
    merges.push_back({a, b});
    if (options.progress) progress_update(bar, static_cast<int64_t>(token_bytes.size() - 256), str_cat(merges.size(), " merges"));
    const uint32_t step = static_cast<uint32_t>(merges.size());
    std::vector<uint64_t> touched;
    std::vector<uint32_t> affected = std::move(pair_words[key]);
    pair_words.erase(key);
    for (uint32_t w : affected) {
      if (last_visit[w] == step) continue;
      last_visit[w] = step;
      Word& word = words[w];
      auto& s = word.symbols;
      bool has = false;
      for (size_t i = 0; i + 1 < s.size(); ++i)
        if (s[i] == a && s[i + 1] == b) { has = true; break; }
      if (!has) continue;
      // Take the word's pairs out, merge left to right, put its pairs back.
      for (size_t i = 0; i + 1 < s.size(); ++i) pair_count[pair_key(s[i], s[i + 1])] -= word.count;
      std::vector<int32_t> next;
      next.reserve(s.size());
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          next.push_back(merged);
          ++i;
        } else {
          next.push_back(s[i]);
        }
      }
      s.swap(next);
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        uint64_t k = pair_key(s[i], s[i + 1]);
        pair_count[k] += word.count;
        if (s[i] == merged || s[i + 1] == merged) {
          pair_words[k].push_back(w);
          touched.push_back(k);
        }
      }
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t k : touched) heap.push({pair_count[k], k});
  }
  if (options.progress) progress_finish(bar);  // stopped early when no pair is frequent enough

  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (size_t i = 0; i < n_added; ++i) {
    const QwenAddedToken& t = qwen3_added_tokens()[i];
    added.push_back({{"id", token_bytes.size() + i}, {"content", t.content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", t.special}});
  }
  j["added_tokens"] = added;
  j["normalizer"] = {{"type", "NFC"}};
  nlohmann::ordered_json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"Regex", kQwenPretokenizerPattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                          byte_level}}};
  j["post_processor"] = byte_level;
  j["decoder"] = byte_level;
  nlohmann::ordered_json model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = "";
  model["end_of_word_suffix"] = "";
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (size_t id = 0; id < token_bytes.size(); ++id) vocab[byte_level_encode(token_bytes[id])] = id;
  model["vocab"] = vocab;
  nlohmann::ordered_json merge_list = nlohmann::ordered_json::array();
  for (auto [a, b] : merges) merge_list.push_back({byte_level_encode(token_bytes[a]), byte_level_encode(token_bytes[b])});
  model["merges"] = merge_list;
  j["model"] = model;

  BpeTrainResult result;
  result.tokenizer_json = j.dump(2);
  result.merges = merges.size();
  result.vocab_size = token_bytes.size() + n_added;
  return result;
}

}  // namespace sqlrl
