// Encode throughput (MB/s of UTF-8 input, one thread) of the Qwen3 tokenizer on the generated
// ~10 MB mixed corpus. Peer: bench/tokenizer_peer.py (Hugging Face tokenizers) on the same
// corpus (--write_corpus=FILE) and the same tokenizer.json; both print the token count and an
// FNV-1a hash of all ids so "identical ids" is checked, not assumed.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/tokenizer_corpus.h"
#include "tokenizer/tokenizer.h"

namespace {

// Run from the repository root (as `make bench` does), or set SQLRL_TOKENIZER_JSON.
const sqlrl::Tokenizer& qwen3() {
  static auto tok = [] {
    const char* env = std::getenv("SQLRL_TOKENIZER_JSON");
    return sqlrl::load_tokenizer(env ? env : "tests/fixtures/tokenizer/qwen3_tokenizer.json");
  }();
  return *tok;
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> docs = sqlrl::bench::tokenizer_corpus();
  return docs;
}

uint64_t fnv1a_ids(uint64_t h, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    uint32_t v = static_cast<uint32_t>(id);
    for (int b = 0; b < 4; ++b) h = (h ^ ((v >> (8 * b)) & 0xFF)) * 0x100000001b3ull;
  }
  return h;
}

void BM_EncodeCorpus(benchmark::State& state) {
  const sqlrl::Tokenizer& tok = qwen3();
  const auto& docs = corpus();
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  size_t tokens = 0;
  uint64_t hash = 0xcbf29ce484222325ull;
  for (auto _ : state) {
    tokens = 0;
    hash = 0xcbf29ce484222325ull;
    std::vector<int32_t> ids;
    for (const auto& d : docs) {
      ids.clear();
      sqlrl::encode_append(tok, d, ids);
      tokens += ids.size();
      hash = fnv1a_ids(hash, ids);
    }
    benchmark::DoNotOptimize(hash);
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["docs"] = static_cast<double>(docs.size());
  state.counters["MB"] = static_cast<double>(bytes) / 1e6;
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["ids_fnv_lo32"] = static_cast<double>(hash & 0xFFFFFFFFu);
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_EncodeCorpus)->Unit(benchmark::kMillisecond)->MinTime(3.0);

// The same pass with an empty piece cache: each iteration runs in a fresh thread, whose
// thread-local cache starts empty, so every distinct piece goes through BPE at least once.
void BM_EncodeCorpusColdCache(benchmark::State& state) {
  const sqlrl::Tokenizer& tok = qwen3();
  const auto& docs = corpus();
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  for (auto _ : state) {
    size_t tokens = 0;
    std::thread worker([&] {
      std::vector<int32_t> ids;
      for (const auto& d : docs) {
        ids.clear();
        sqlrl::encode_append(tok, d, ids);
        tokens += ids.size();
      }
    });
    worker.join();
    benchmark::DoNotOptimize(tokens);
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}
BENCHMARK(BM_EncodeCorpusColdCache)->Unit(benchmark::kMillisecond)->UseRealTime();

// Decode of the same ids, for scale (ids -> bytes -> UTF-8 repair).
void BM_DecodeCorpus(benchmark::State& state) {
  const sqlrl::Tokenizer& tok = qwen3();
  std::vector<std::vector<int32_t>> all;
  size_t bytes = 0;
  for (const auto& d : corpus()) {
    all.push_back(sqlrl::encode(tok, d));
    bytes += d.size();
  }
  for (auto _ : state)
    for (const auto& ids : all) benchmark::DoNotOptimize(sqlrl::decode(tok, ids));
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}
BENCHMARK(BM_DecodeCorpus)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  // --write_corpus=FILE: write the corpus as {"text": ...} lines and exit.
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--write_corpus=", 15) == 0) {
      std::ofstream out(argv[i] + 15, std::ios::binary);
      for (const auto& d : corpus()) out << nlohmann::json({{"text", d}}).dump() << "\n";
      return out.good() ? 0 : 1;
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
