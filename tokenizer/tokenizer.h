// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (the Qwen2/Qwen2.5/Qwen3
// scheme: NFC normaliser, the Qwen Split regex + ByteLevel pre-tokenizer, BPE model, ByteLevel
// decoder). Encoding: added tokens are split out first (longest match), the rest is
// NFC-normalised, pre-tokenised, and each piece is merged by rank, with a per-thread bounded
// cache of piece -> ids. A Tokenizer is immutable after loading and safe to share across threads.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sqlrl {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;  // skipped by decode(..., skip_special=true)
};

// Open-addressing map (left id, right id) -> (rank, merged id): the inner loop of BPE.
struct MergeTable {
  std::vector<uint64_t> keys;    // (left << 32) | right, kEmpty where unused
  std::vector<uint64_t> values;  // (rank << 32) | merged id
  uint64_t mask = 0;
  int shift = 64;
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  void build(const std::vector<uint64_t>& pair_keys, const std::vector<uint64_t>& pair_values);
  // Returns false when the pair has no merge.
  inline bool find(uint32_t left, uint32_t right, uint32_t* rank, uint32_t* merged) const {
    uint64_t key = (static_cast<uint64_t>(left) << 32) | right;
    uint64_t slot = (key * 0x9E3779B97F4A7C15ull) >> shift;
    for (;;) {
      uint64_t k = keys[slot];
      if (k == key) {
        *rank = static_cast<uint32_t>(values[slot] >> 32);
        *merged = static_cast<uint32_t>(values[slot]);
        return true;
      }
      if (k == kEmpty) return false;
      slot = (slot + 1) & mask;
    }
  }
};

struct Tokenizer {
  std::string source;                     // file name, for error messages
  std::vector<std::string> token_bytes;   // id -> raw bytes (vocabulary and added tokens)
  std::vector<uint8_t> token_special;     // id -> 1 for added tokens marked special
  std::vector<AddedToken> added;          // sorted by content length, longest first
  std::unordered_map<std::string, int32_t> bytes_to_id;  // raw bytes -> id (vocabulary and added)
  int32_t byte_id[256] = {};              // the token of each single byte
  MergeTable merges;
  size_t merge_count = 0;
  size_t vocab_size = 0;                  // BPE vocabulary entries (without added tokens)
  bool nfc = true;                        // the normaliser is NFC (else none)
  bool ignore_merges = false;             // whole pieces found in the vocabulary skip merging
  uint8_t added_first_byte[256] = {};     // 1 where some added token starts with that byte
  uint64_t instance = 0;                  // distinguishes tokenizers in the per-thread cache

  size_t size() const { return token_bytes.size(); }  // ids are 0 .. size()-1
  // The id of a token given as its text (an added token or a vocabulary entry), or -1.
  int32_t token_id(std::string_view text) const;
};

// Loads tokenizer.json (or PATH/tokenizer.json when PATH is a folder); rejects component types other than those above with an error that
// names the component and its type.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);
std::unique_ptr<Tokenizer> load_tokenizer_from_string(std::string_view json_text, const std::string& source);

struct EncodeOptions {
  // When false, added-token texts such as "<|im_end|>" are encoded as ordinary text: use it for
  // untrusted text (database values, tool output) that must not inject control tokens.
  bool parse_added_tokens = true;
  // Byte ranges [first, second) of the text, sorted and disjoint, that are data inside markup:
  // an added token overlapping one is encoded as ordinary text; the rest of the text is encoded
  // exactly as without them (one pass: no extra piece boundaries at the ranges' edges).
  std::span<const std::pair<size_t, size_t>> plain_ranges = {};
};

// Invalid UTF-8 is an error naming the byte offset.
std::vector<int32_t> encode(const Tokenizer& tok, std::string_view text, EncodeOptions options = {});
void encode_append(const Tokenizer& tok, std::string_view text, std::vector<int32_t>& out, EncodeOptions options = {});

// Ids -> text: the tokens' bytes concatenated, invalid UTF-8 replaced by U+FFFD. An id out of
// range is an error naming its index.
std::string decode(const Tokenizer& tok, std::span<const int32_t> ids, bool skip_special = false);
// The raw bytes of the tokens (no UTF-8 repair): what the streaming decoder works on.
void append_token_bytes(const Tokenizer& tok, std::span<const int32_t> ids, std::string& out, bool skip_special = false);

}  // namespace sqlrl
