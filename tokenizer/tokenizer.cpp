#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/error.h"
#include "runtime/json_depth.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace sqlrl {

using json = nlohmann::json;

void MergeTable::build(const std::vector<uint64_t>& pair_keys, const std::vector<uint64_t>& pair_values) {
  uint64_t capacity = 16;
  int bits = 4;
  while (capacity < pair_keys.size() * 2 + 1) { capacity <<= 1; ++bits; }
  keys.assign(capacity, kEmpty);
  values.assign(capacity, 0);
  mask = capacity - 1;
  shift = 64 - bits;
  for (size_t i = 0; i < pair_keys.size(); ++i) {
    uint64_t slot = (pair_keys[i] * 0x9E3779B97F4A7C15ull) >> shift;
    while (keys[slot] != kEmpty && keys[slot] != pair_keys[i]) slot = (slot + 1) & mask;
    // A pair listed twice keeps its first (lowest) rank, as Hugging Face does.
    if (keys[slot] == pair_keys[i]) continue;
    keys[slot] = pair_keys[i];
    values[slot] = pair_values[i];
  }
}

int32_t Tokenizer::token_id(std::string_view text) const {
  for (const AddedToken& a : added)
    if (a.content == text) return a.id;
  std::string bytes;
  if (!byte_level_decode(text, &bytes)) return -1;
  auto it = bytes_to_id.find(bytes);
  return it == bytes_to_id.end() ? -1 : it->second;
}

namespace {

std::string type_of(const json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return "(no type)";
  return j["type"].get<std::string>();
}

bool flag(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() && it->get<bool>();
}

void check_normalizer(Tokenizer& tok, const json& n) {
  if (n.is_null()) { tok.nfc = false; return; }
  std::string type = type_of(n);
  if (type == "NFC") { tok.nfc = true; return; }
  if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    const json& list = n["normalizers"];
    if (list.empty()) { tok.nfc = false; return; }
    if (list.size() == 1 && type_of(list[0]) == "NFC") { tok.nfc = true; return; }
  }
  fail(tok.source, ": normalizer of type '", type, "' is not supported (only NFC or none)");
}

void check_byte_level(const Tokenizer& tok, const json& j, const char* where) {
  if (flag(j, "add_prefix_space")) fail(tok.source, ": ", where, " ByteLevel with add_prefix_space=true is not supported");
  if (flag(j, "use_regex"))
    fail(tok.source, ": ", where, " ByteLevel with use_regex=true (the GPT-2 regex) is not supported; only the Qwen Split regex is");
}

void check_pre_tokenizer(const Tokenizer& tok, const json& p) {
  std::string type = type_of(p);
  if (type != "Sequence" || !p.contains("pretokenizers") || !p["pretokenizers"].is_array())
    fail(tok.source, ": pre_tokenizer of type '", type, "' is not supported (expected Sequence[Split, ByteLevel])");
  const json& list = p["pretokenizers"];
  if (list.size() != 2) fail(tok.source, ": pre_tokenizer Sequence has ", list.size(), " entries, expected 2 (Split, ByteLevel)");
  const json& split = list[0];
  if (type_of(split) != "Split") fail(tok.source, ": pre_tokenizer[0] of type '", type_of(split), "' is not supported (expected Split)");
  std::string pattern;
  if (split.contains("pattern") && split["pattern"].is_object() && split["pattern"].contains("Regex")) {
    if (!split["pattern"]["Regex"].is_string()) fail(tok.source, ": pre_tokenizer Split pattern.Regex is not a string");
    pattern = split["pattern"]["Regex"].get<std::string>();
  }
  if (pattern != kQwenPretokenizerPattern)
    fail(tok.source, ": pre_tokenizer Split pattern '", pattern, "' is not supported (only the Qwen regex is implemented)");
  const std::string behavior = split.contains("behavior") && split["behavior"].is_string()
                                   ? split["behavior"].get<std::string>() : std::string("(not a string)");
  if (behavior != "Isolated" || flag(split, "invert"))
    fail(tok.source, ": pre_tokenizer Split with behavior '", behavior,
         "' / invert is not supported (expected Isolated, invert=false)");
  if (type_of(list[1]) != "ByteLevel") fail(tok.source, ": pre_tokenizer[1] of type '", type_of(list[1]), "' is not supported (expected ByteLevel)");
  check_byte_level(tok, list[1], "pre_tokenizer[1]");
}

void load_model(Tokenizer& tok, const json& m) {
  if (type_of(m) != "BPE") fail(tok.source, ": model of type '", type_of(m), "' is not supported (only BPE)");
  if (m.contains("dropout") && !m["dropout"].is_null()) fail(tok.source, ": model.dropout is not supported");
  if (flag(m, "byte_fallback")) fail(tok.source, ": model.byte_fallback=true is not supported (byte-level BPE needs none)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty())
      fail(tok.source, ": model.", key, "='", m[key].get<std::string>(), "' is not supported");
  }
  tok.ignore_merges = flag(m, "ignore_merges");
  if (!m.contains("vocab") || !m["vocab"].is_object()) fail(tok.source, ": model.vocab is missing or not an object");
  const json& vocab = m["vocab"];
  size_t n = vocab.size();
  tok.token_bytes.assign(n, std::string());
  std::vector<uint8_t> seen(n, 0);
  tok.bytes_to_id.reserve(n * 2);
  std::string bytes;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) fail(tok.source, ": model.vocab['", it.key(), "'] is not an integer id");
    int64_t id = it.value().get<int64_t>();
    if (id < 0 || static_cast<size_t>(id) >= n)
      fail(tok.source, ": model.vocab['", it.key(), "'] = ", id, " is outside 0..", n - 1, " (ids must be dense)");
    if (seen[id]) fail(tok.source, ": model.vocab id ", id, " is used twice");
    seen[id] = 1;
    if (!byte_level_decode(it.key(), &bytes))
      fail(tok.source, ": model.vocab entry '", it.key(), "' is not byte-level text");
    tok.token_bytes[id] = bytes;
    tok.bytes_to_id.emplace(bytes, static_cast<int32_t>(id));
  }
  tok.vocab_size = n;
  for (int b = 0; b < 256; ++b) {
    auto it = tok.bytes_to_id.find(std::string(1, static_cast<char>(b)));
    if (it == tok.bytes_to_id.end()) fail(tok.source, ": model.vocab has no token for byte ", b, " (byte-level BPE needs all 256)");
    tok.byte_id[b] = it->second;
  }
  if (!m.contains("merges") || !m["merges"].is_array()) fail(tok.source, ": model.merges is missing or not an array");
  const json& merges = m["merges"];
  std::vector<uint64_t> keys, values;
  keys.reserve(merges.size());
  values.reserve(merges.size());
  std::string left, right, left_bytes, right_bytes;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& e = merges[rank];
    // Two spellings: "a b" (older files) and ["a", "b"] (tokenizers >= 0.20).
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        fail(tok.source, ": model.merges[", rank, "] = '", s, "' is not two tokens separated by one space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      left = e[0].get<std::string>();
      right = e[1].get<std::string>();
    } else {
      fail(tok.source, ": model.merges[", rank, "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
    if (!byte_level_decode(left, &left_bytes) || !byte_level_decode(right, &right_bytes))
      fail(tok.source, ": model.merges[", rank, "] has a token that is not byte-level text");
    auto l = tok.bytes_to_id.find(left_bytes), r = tok.bytes_to_id.find(right_bytes);
    auto merged = tok.bytes_to_id.find(left_bytes + right_bytes);
    if (l == tok.bytes_to_id.end() || r == tok.bytes_to_id.end() || merged == tok.bytes_to_id.end())
      fail(tok.source, ": model.merges[", rank, "] ('", left, "', '", right, "') names a token missing from model.vocab");
    keys.push_back((static_cast<uint64_t>(l->second) << 32) | static_cast<uint32_t>(r->second));
    values.push_back((static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(merged->second));
  }
  tok.merges.build(keys, values);
  tok.merge_count = merges.size();
}

void load_added_tokens(Tokenizer& tok, const json& list) {
  if (list.is_null()) return;
  if (!list.is_array()) fail(tok.source, ": added_tokens is not an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const json& a = list[i];
    if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["id"].is_number_integer() || !a["content"].is_string())
      fail(tok.source, ": added_tokens[", i, "] needs an integer 'id' and a string 'content'");
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      if (flag(a, key)) fail(tok.source, ": added_tokens[", i, "] ('", a["content"].get<std::string>(), "') sets ", key, "=true, which is not supported");
    AddedToken t;
    // Read as int64: get<int32_t> would wrap 2^32 + 5 to id 5.
    const int64_t id = a["id"].get<int64_t>();
    t.content = a["content"].get<std::string>();
    t.special = flag(a, "special");
    if (t.content.empty()) fail(tok.source, ": added_tokens[", i, "] has empty content");
    utf8_validate(t.content, (tok.source + ": added_tokens content").c_str());
    if (id < 0) fail(tok.source, ": added_tokens[", i, "] has negative id ", id);
    // Ids must be dense (checked once all are read), so one past the vocabulary plus every added
    // token leaves a gap: refused here, before it sizes the tables (an id near 2^31 allocated
    // gigabytes, and id + 1 overflowed at INT32_MAX).
    if (static_cast<uint64_t>(id) >= tok.vocab_size + list.size())
      fail(tok.source, ": added_tokens[", i, "] id ", id, " leaves a gap: ", tok.vocab_size, " vocabulary ids and ",
           list.size(), " added tokens end at id ", tok.vocab_size + list.size() - 1, " (ids must be dense)");
    t.id = static_cast<int32_t>(id);
    if (static_cast<size_t>(t.id) < tok.vocab_size) {
      // Hugging Face lets an added token reuse a vocabulary id when the texts agree.
      if (tok.token_bytes[t.id] != t.content)
        fail(tok.source, ": added_tokens[", i, "] id ", t.id, " is vocabulary token '", tok.token_bytes[t.id], "', not '", t.content, "'");
    } else if (static_cast<size_t>(t.id) < tok.token_bytes.size() && !tok.token_bytes[t.id].empty() &&
               tok.token_bytes[t.id] != t.content) {
      // Two texts on one id: encode would give the id for both and decode only the last one.
      fail(tok.source, ": added_tokens[", i, "] ('", t.content, "') reuses id ", t.id, " of added token '",
           tok.token_bytes[t.id], "'");
    }
    if (static_cast<size_t>(t.id) >= tok.token_bytes.size()) {
      tok.token_bytes.resize(t.id + 1);
      tok.token_special.resize(t.id + 1, 0);
    }
    tok.token_bytes[t.id] = t.content;
    tok.token_special.resize(tok.token_bytes.size(), 0);
    tok.token_special[t.id] = t.special ? 1 : 0;
    tok.bytes_to_id[t.content] = t.id;
    tok.added_first_byte[static_cast<unsigned char>(t.content[0])] = 1;
    tok.added.push_back(t);
  }
  std::stable_sort(tok.added.begin(), tok.added.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
}

std::atomic<uint64_t> next_instance{1};

// The fields of a parsed tokenizer.json into `tok` (below).
void interpret(Tokenizer* tok, const json& j);

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_from_string(std::string_view json_text, const std::string& source) {
  auto tok = std::make_unique<Tokenizer>();
  tok->source = source;
  check_json_depth(json_text, source);
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    fail(source, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail(source, ": top level is not a JSON object");
  if (!j.contains("model")) fail(source, ": no 'model' field");
  try {
    interpret(tok.get(), j);
  } catch (const json::exception& e) {
    // A field of an unexpected type that no check above names: the file is named here.
    fail(source, ": ", e.what());
  }
  tok->instance = next_instance.fetch_add(1);
  return tok;
}

namespace {

void interpret(Tokenizer* tok, const json& j) {
  const std::string& source = tok->source;
  check_normalizer(*tok, j.value("normalizer", json()));
  if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].is_null()) fail(source, ": pre_tokenizer is missing (byte-level BPE needs one)");
  check_pre_tokenizer(*tok, j["pre_tokenizer"]);
  const json decoder = j.value("decoder", json());
  if (!decoder.is_null()) {
    if (type_of(decoder) != "ByteLevel") fail(source, ": decoder of type '", type_of(decoder), "' is not supported (only ByteLevel)");
    check_byte_level(*tok, decoder, "decoder");
  }
  const json post = j.value("post_processor", json());
  if (!post.is_null() && type_of(post) != "ByteLevel")
    fail(source, ": post_processor of type '", type_of(post), "' is not supported (only ByteLevel or none)");
  load_model(*tok, j["model"]);
  tok->token_special.assign(tok->token_bytes.size(), 0);
  load_added_tokens(*tok, j.value("added_tokens", json()));
  for (size_t id = 0; id < tok->token_bytes.size(); ++id)
    if (tok->token_bytes[id].empty()) fail(source, ": token id ", id, " is neither in model.vocab nor in added_tokens");
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& given_path) {
  // A Hugging Face model folder holds tokenizer.json next to tokenizer_config.json.
  std::string path = std::filesystem::is_directory(given_path) ? (std::filesystem::path(given_path) / "tokenizer.json").string() : given_path;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open tokenizer file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return load_tokenizer_from_string(buffer.str(), path);
}

void append_token_bytes(const Tokenizer& tok, std::span<const int32_t> ids, std::string& out, bool skip_special) {
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= tok.token_bytes.size())
      fail(tok.source, ": decode: ids[", i, "] = ", id, " is outside 0..", tok.token_bytes.size() - 1);
    if (skip_special && tok.token_special[id]) continue;
    out += tok.token_bytes[id];
  }
}

std::string decode(const Tokenizer& tok, std::span<const int32_t> ids, bool skip_special) {
  std::string bytes;
  append_token_bytes(tok, ids, bytes, skip_special);
  return utf8_lossy(bytes);
}

}  // namespace sqlrl
