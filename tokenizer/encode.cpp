// Encoding: added-token split, NFC, pre-tokenisation, and BPE by merge rank with a cache.
#include <algorithm>
#include <cstring>

#include "runtime/error.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace sqlrl {
namespace {

// BPE over a linked list of symbols with a min-heap of candidate merges keyed by
// (rank, position): each merge is O(log n), never a rescan of the word. Stale heap entries are
// recognised when popped (the pair at that position no longer has that rank).
struct Symbol {
  uint32_t id;
  int32_t prev, next;  // -1 at the ends; a merged-away symbol has id kDead
};
constexpr uint32_t kDead = 0xFFFFFFFFu;

struct BpeScratch {
  std::vector<Symbol> symbols;
  std::vector<uint64_t> heap;  // (rank << 32) | position, smallest first
};

inline void heap_push(std::vector<uint64_t>& heap, uint64_t v) {
  heap.push_back(v);
  std::push_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
}

void bpe_merge(const Tokenizer& tok, std::string_view piece, BpeScratch& s, std::vector<int32_t>& out) {
  size_t n = piece.size();
  if (n == 1) { out.push_back(tok.byte_id[static_cast<unsigned char>(piece[0])]); return; }
  if (tok.ignore_merges) {
    auto it = tok.bytes_to_id.find(std::string(piece));
    if (it != tok.bytes_to_id.end()) { out.push_back(it->second); return; }
  }
  s.symbols.resize(n);
  for (size_t i = 0; i < n; ++i)
    s.symbols[i] = {static_cast<uint32_t>(tok.byte_id[static_cast<unsigned char>(piece[i])]), static_cast<int32_t>(i) - 1,
                    i + 1 < n ? static_cast<int32_t>(i + 1) : -1};
  s.heap.clear();
  uint32_t rank, merged;
  for (size_t i = 0; i + 1 < n; ++i)
    if (tok.merges.find(s.symbols[i].id, s.symbols[i + 1].id, &rank, &merged))
      s.heap.push_back((static_cast<uint64_t>(rank) << 32) | i);
  std::make_heap(s.heap.begin(), s.heap.end(), std::greater<uint64_t>());
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), std::greater<uint64_t>());
    uint64_t top = s.heap.back();
    s.heap.pop_back();
    uint32_t want_rank = static_cast<uint32_t>(top >> 32);
    int32_t pos = static_cast<int32_t>(top & 0xFFFFFFFFu);
    Symbol& left = s.symbols[pos];
    if (left.id == kDead || left.next < 0) continue;
    Symbol& right = s.symbols[left.next];
    if (!tok.merges.find(left.id, right.id, &rank, &merged) || rank != want_rank) continue;
    left.id = merged;
    right.id = kDead;
    left.next = right.next;
    if (right.next >= 0) s.symbols[right.next].prev = pos;
    if (left.prev >= 0 && tok.merges.find(s.symbols[left.prev].id, left.id, &rank, &merged))
      heap_push(s.heap, (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(left.prev));
    if (left.next >= 0 && tok.merges.find(left.id, s.symbols[left.next].id, &rank, &merged))
      heap_push(s.heap, (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(pos));
  }
  for (int32_t i = 0; i >= 0; i = s.symbols[i].next) out.push_back(static_cast<int32_t>(s.symbols[i].id));
}

// A direct-mapped cache of piece -> ids, one per thread: bounded (a colliding piece replaces
// the old one) and lock-free. Switching to another tokenizer clears it.
struct PieceCache {
  static constexpr size_t kSlots = 1 << 15;
  static constexpr size_t kMaxPiece = 64;  // longer pieces are rare and not worth keeping
  struct Slot {
    uint64_t hash = 0;
    std::string key;
    std::vector<int32_t> ids;
  };
  std::vector<Slot> slots;
  uint64_t instance = 0;
  BpeScratch scratch;
  std::vector<Piece> pieces;
  std::string normalized;
};

inline uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

PieceCache& thread_cache(const Tokenizer& tok) {
  thread_local PieceCache cache;
  if (cache.instance != tok.instance) {
    cache.slots.assign(PieceCache::kSlots, PieceCache::Slot());
    cache.instance = tok.instance;
  }
  return cache;
}

void encode_piece(const Tokenizer& tok, std::string_view piece, PieceCache& cache, std::vector<int32_t>& out) {
  if (piece.size() == 1) { out.push_back(tok.byte_id[static_cast<unsigned char>(piece[0])]); return; }
  if (piece.size() > PieceCache::kMaxPiece) { bpe_merge(tok, piece, cache.scratch, out); return; }
  uint64_t h = hash_bytes(piece);
  PieceCache::Slot& slot = cache.slots[h & (PieceCache::kSlots - 1)];
  if (slot.hash == h && slot.key == piece) {
    out.insert(out.end(), slot.ids.begin(), slot.ids.end());
    return;
  }
  size_t start = out.size();
  bpe_merge(tok, piece, cache.scratch, out);
  slot.hash = h;
  slot.key.assign(piece);
  slot.ids.assign(out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
}

// Ordinary text between added tokens: NFC (skipped when no code point can change), then pieces.
void encode_segment(const Tokenizer& tok, std::string_view text, bool already_nfc, PieceCache& cache, std::vector<int32_t>& out) {
  if (text.empty()) return;
  std::string_view normalized = text;
  if (tok.nfc && !already_nfc) {
    cache.normalized = nfc(text);
    normalized = cache.normalized;
  }
  cache.pieces.clear();
  pretokenize_qwen(normalized, cache.pieces);
  for (const Piece& p : cache.pieces) encode_piece(tok, normalized.substr(p.begin, p.end - p.begin), cache, out);
}

// The longest added token starting at text[pos], or nullptr.
const AddedToken* added_token_at(const Tokenizer& tok, std::string_view text, size_t pos) {
  for (const AddedToken& a : tok.added)  // longest first
    if (text.size() - pos >= a.content.size() && std::memcmp(text.data() + pos, a.content.data(), a.content.size()) == 0)
      return &a;
  return nullptr;
}

}  // namespace

void encode_append(const Tokenizer& tok, std::string_view text, std::vector<int32_t>& out, EncodeOptions options) {
  check(text.size() < 0xFFFFFFFFull, tok.source, ": encode: text of ", text.size(), " bytes is over the 4 GiB limit");
  bool stable = utf8_validate(text, "encode: input text");
  PieceCache& cache = thread_cache(tok);
  if (!options.parse_added_tokens || tok.added.empty()) {
    encode_segment(tok, text, stable, cache, out);
    return;
  }
  size_t segment_start = 0;
  size_t range = 0;  // first plain range that does not end at or before pos
  const auto& plain = options.plain_ranges;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (!tok.added_first_byte[static_cast<unsigned char>(text[pos])]) continue;
    const AddedToken* a = added_token_at(tok, text, pos);
    if (!a) continue;
    while (range < plain.size() && plain[range].second <= pos) ++range;
    if (range < plain.size() && plain[range].first < pos + a->content.size()) continue;  // overlaps data
    encode_segment(tok, text.substr(segment_start, pos - segment_start), stable, cache, out);
    out.push_back(a->id);
    pos += a->content.size() - 1;
    segment_start = pos + 1;
  }
  encode_segment(tok, text.substr(segment_start), stable, cache, out);
}

std::vector<int32_t> encode(const Tokenizer& tok, std::string_view text, EncodeOptions options) {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_append(tok, text, ids, options);
  return ids;
}

}  // namespace sqlrl
