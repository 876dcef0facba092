// Paged KV-cache inference against the training forward and the transformers fixtures:
// decode logits at every position, greedy generation, prefix sharing, fork/free bookkeeping,
// and sampling that does not depend on batch composition.
#include <gtest/gtest.h>

#include <cstring>

#include "fixture.h"
#include "model/infer.h"
#include "runtime/gemm.h"

namespace sqlrl {
namespace {

using testing::load_model_fixture;
using testing::scaled_max_error;

class KvFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(KvFixture, DecodeLogitsEqualFullForwardAtEveryPosition) {
  auto f = load_model_fixture(GetParam());
  const int64_t V = f.model.config.vocab_size;
  std::vector<int32_t> seq(f.batch.tokens.begin() + f.batch.cu_seqlens[2], f.batch.tokens.begin() + f.batch.cu_seqlens[3]);
  int64_t n = static_cast<int64_t>(seq.size());
  TrainState state = make_train_state(f.model.config, testing::options(n));
  std::vector<float> full(static_cast<size_t>(n * V));
  forward_logits(f.model, state, pack_sequences({seq}), full.data());
  // Block size 3 so the sequence spans many blocks; prefill 5 tokens, then one at a time.
  PagedKVCache cache = make_kv_cache(f.model.config, 16, 3);
  int64_t h = kv_new_sequence(cache);
  std::vector<float> logits;
  forward_cached(f.model, cache, {{h, std::vector<int32_t>(seq.begin(), seq.begin() + 5)}}, logits, true);
  double worst = scaled_max_error(logits, std::vector<float>(full.begin(), full.begin() + 5 * V));
  for (int64_t t = 5; t < n; ++t) {
    forward_cached(f.model, cache, {{h, {seq[t]}}}, logits);
    worst = std::max(worst, scaled_max_error(logits, std::vector<float>(full.begin() + t * V, full.begin() + (t + 1) * V)));
  }
  std::printf("%s: cached vs full-forward logits, worst scaled error %.3g over %lld positions\n", GetParam(), worst,
              static_cast<long long>(n));
  EXPECT_LE(worst, 1e-5);
  EXPECT_EQ(cache.sequence(h).length, n);
}

TEST_P(KvFixture, GreedyGenerationMatchesTransformers) {
  auto f = load_model_fixture(GetParam());
  std::vector<int32_t> prompt = f.ints("greedy_prompt"), want = f.ints("greedy_tokens");
  PagedKVCache cache = make_kv_cache(f.model.config, 32, 4);
  GenerateOptions options;
  options.max_new_tokens = static_cast<int64_t>(want.size());
  options.sampling.temperature = 0.0f;
  auto out = generate(f.model, cache, prompt, 1, options);
  EXPECT_EQ(out[0].tokens, want);
  EXPECT_EQ(kv_free_block_count(cache), 32) << "generate frees its sequences";
}

TEST_P(KvFixture, PrefixSharedSequencesEqualUnsharedOnes) {
  auto f = load_model_fixture(GetParam());
  const int64_t V = f.model.config.vocab_size;
  std::vector<int32_t> prompt(f.batch.tokens.begin(), f.batch.tokens.begin() + 11);  // 11 = 2 full blocks of 4 + 3
  std::vector<std::vector<int32_t>> continuations = {{7, 8, 9}, {100, 3}, {42}};
  PagedKVCache shared = make_kv_cache(f.model.config, 16, 4);
  std::vector<float> logits;
  int64_t root = kv_new_sequence(shared);
  forward_cached(f.model, shared, {{root, prompt}}, logits);
  int64_t used_by_prompt = 16 - kv_free_block_count(shared);
  EXPECT_EQ(used_by_prompt, 3);
  std::vector<int64_t> forks = {root, kv_fork(shared, root), kv_fork(shared, root)};
  EXPECT_EQ(kv_free_block_count(shared), 13) << "forks share the prompt's blocks";
  std::vector<CachedInput> batch;
  for (size_t i = 0; i < forks.size(); ++i) batch.push_back({forks[i], continuations[i]});
  std::vector<float> shared_logits;
  forward_cached(f.model, shared, batch, shared_logits);
  // Writing into the shared partial third block: the first two writers copy it (refcount 3, then
  // 2), the last one writes in place; the 14- and 13-token sequences each need a fourth block.
  // 3 prompt blocks + 2 copies + 2 fresh = 7 used.
  EXPECT_EQ(kv_free_block_count(shared), 9);
  for (size_t i = 0; i < forks.size(); ++i) {
    PagedKVCache alone = make_kv_cache(f.model.config, 16, 4);
    int64_t h = kv_new_sequence(alone);
    std::vector<int32_t> whole = prompt;
    whole.insert(whole.end(), continuations[i].begin(), continuations[i].end());
    forward_cached(f.model, alone, {{h, whole}}, logits);
    std::vector<float> mine(shared_logits.begin() + static_cast<int64_t>(i) * V,
                            shared_logits.begin() + static_cast<int64_t>(i + 1) * V);
    EXPECT_LE(scaled_max_error(mine, logits), 1e-5) << "sample " << i;
  }
  for (int64_t h : forks) kv_free(shared, h);
  EXPECT_EQ(kv_free_block_count(shared), 16);
}

TEST_P(KvFixture, SampledTokensDoNotDependOnBatchComposition) {
  auto f = load_model_fixture(GetParam());
  std::vector<int32_t> prompt = f.ints("greedy_prompt");
  PagedKVCache cache = make_kv_cache(f.model.config, 64, 4);
  GenerateOptions options;
  options.max_new_tokens = 12;
  options.sampling = {0.8f, 50, 0.9f, 1234};
  auto batch = generate(f.model, cache, prompt, 4, options);
  options.first_sample_id = 2;
  auto alone = generate(f.model, cache, prompt, 1, options);
  EXPECT_EQ(alone[0].tokens, batch[2].tokens);
  // Log-probs agree to rounding: BLAS may block a 4-row decode differently from a 1-row one.
  ASSERT_EQ(alone[0].logprobs.size(), batch[2].logprobs.size());
  for (size_t t = 0; t < alone[0].logprobs.size(); ++t) EXPECT_NEAR(alone[0].logprobs[t], batch[2].logprobs[t], 1e-5);
  EXPECT_NE(batch[0].tokens, batch[1].tokens) << "different samples draw different streams";
  for (const auto& s : batch)
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      EXPECT_LE(s.logprobs[t], 0.0f);
      EXPECT_LE(s.logprobs_t1[t], 0.0f);
    }
}

// Every layer's K and V of positions [0, length) of a sequence, in position order.
std::vector<float> kv_of(PagedKVCache& cache, int64_t handle) {
  const KVSequence& s = cache.sequence(handle);
  const int64_t row = cache.kv_heads * cache.head_dim;
  std::vector<float> out;
  for (int64_t l = 0; l < cache.layers; ++l)
    for (int64_t p = 0; p < s.length; ++p)
      for (float* pool : {cache.k_block(l, s.blocks[p / cache.block_size]), cache.v_block(l, s.blocks[p / cache.block_size])}) {
        const float* x = pool + (p % cache.block_size) * row;
        out.insert(out.end(), x, x + row);
      }
  return out;
}

// Positions whose K or V (in any layer) differ in any bit between two kv_of results.
std::vector<int64_t> differing_positions(const std::vector<float>& a, const std::vector<float>& b, int64_t length,
                                         int64_t row) {
  std::vector<int64_t> out;
  for (int64_t p = 0; p < length; ++p) {
    bool differs = false;
    for (size_t base = 0; base < a.size(); base += static_cast<size_t>(length * 2 * row))
      differs = differs || std::memcmp(a.data() + base + p * 2 * row, b.data() + base + p * 2 * row,
                                       sizeof(float) * 2 * row) != 0;
    if (differs) out.push_back(p);
  }
  return out;
}

// What recomputing a preempted sample (rl/agent/rollout.cpp) must give back: the K/V its tokens
// got from the calls that first wrote them (a prompt prefill, then one decode step per token),
// now from one prefill of the whole history. By default (GEMMs thread-independent, so that
// sgemm's rows do not depend on M; the prompt's rows sit at the same places of their tiles both
// times) the prompt's K/V agree, sgemm then and now, while the decoded tokens' do not: the
// few-token kernel then, sgemm now, other summation orders. batch_invariant sends every call
// through the few-token kernel, and then every bit agrees: attention, norms and RoPE already
// compute a token from its own row and the cache alone.
TEST_P(KvFixture, RecomputedHistoryHasTheDecodedKvBitsOnlyWhenBatchInvariant) {
  auto f = load_model_fixture(GetParam());
  const int64_t P = kRowsKernelTokens + 2, N = 12;  // a prompt past the few-token kernel, then N decode steps
  ASSERT_GE(static_cast<int64_t>(f.batch.tokens.size()), P + N);
  std::vector<int32_t> history(f.batch.tokens.begin(), f.batch.tokens.begin() + P + N);
  const int64_t row = f.model.config.num_key_value_heads * f.model.config.head_dim;
  set_gemm_thread_independent(true);
  std::vector<int64_t> differing[2];
  for (bool invariant : {false, true}) {
    PagedKVCache cache = make_kv_cache(f.model.config, 32, 4);
    std::vector<float> logits;
    const int64_t decoded = kv_new_sequence(cache);
    forward_cached(f.model, cache, {{decoded, std::vector<int32_t>(history.begin(), history.begin() + P)}}, logits,
                   false, nullptr, invariant);
    for (int64_t t = P; t < P + N; ++t) forward_cached(f.model, cache, {{decoded, {history[t]}}}, logits, false, nullptr, invariant);
    const int64_t recomputed = kv_new_sequence(cache);
    forward_cached(f.model, cache, {{recomputed, history}}, logits, false, nullptr, invariant);
    differing[invariant] = differing_positions(kv_of(cache, decoded), kv_of(cache, recomputed), P + N, row);
  }
  set_gemm_thread_independent(false);
  std::string listed;
  for (int64_t p : differing[0]) listed += " " + std::to_string(p);
  std::printf("%s: positions whose K/V differ after a recompute, by default:%s\n", GetParam(), listed.c_str());
  ASSERT_FALSE(differing[0].empty()) << "the few-token kernel and sgemm agreed: update model/infer.h's comment";
  EXPECT_GE(differing[0].front(), P) << "a prompt position differs: sgemm rows depend on M";
  EXPECT_TRUE(differing[1].empty()) << differing[1].size() << " positions differ with batch_invariant, the first "
                                    << differing[1].front();
}

INSTANTIATE_TEST_SUITE_P(Model, KvFixture, ::testing::Values("qwen3_tied", "qwen2_untied"));

// kv_blocks_needed is what kv_reserve then takes, appends made in order: fresh blocks, and the
// copies of a shared, partly filled block (k writers of a block held r times copy min(k, r - 1)).
TEST(KvCache, BlocksNeededIsWhatReserveTakes) {
  auto f = load_model_fixture("qwen3_tied");
  PagedKVCache cache = make_kv_cache(f.model.config, 64, 4);
  auto grow = [&](int64_t h, int64_t n) {
    kv_reserve(cache, h, n);
    cache.sequence(h).length += n;
  };
  const int64_t root = kv_new_sequence(cache);
  grow(root, 6);  // 2 blocks, the second partly filled (2 of 4)
  std::vector<int64_t> family = {root, kv_fork(cache, root), kv_fork(cache, root), kv_fork(cache, root)};
  const int64_t other = kv_new_sequence(cache);
  grow(other, 8);  // two full blocks of its own
  struct Case {
    const char* what;
    std::vector<std::pair<int64_t, int64_t>> appends;
  };
  for (const Case& c : std::vector<Case>{
           {"one sharer writes: a copy", {{family[1], 1}}},
           {"three of four sharers write: three copies", {{family[0], 1}, {family[2], 1}, {family[3], 1}}},
           {"all four write: the last in place", {{family[0], 1}, {family[1], 1}, {family[2], 1}, {family[3], 1}}},
           {"all four, past the block: copies and fresh blocks",
            {{family[0], 3}, {family[1], 5}, {family[2], 2}, {family[3], 1}}},
           {"a full last block: fresh ones only", {{other, 1}, {family[1], 1}}},
           {"nothing", {{other, 0}}},
       }) {
    PagedKVCache copy = cache;
    const int64_t before = kv_free_block_count(copy), predicted = kv_blocks_needed(copy, c.appends);
    for (const auto& [h, n] : c.appends) kv_reserve(copy, h, n), copy.sequence(h).length += n;
    EXPECT_EQ(predicted, before - kv_free_block_count(copy)) << c.what;
  }
  EXPECT_EQ(kv_blocks_needed(cache, {{family[1], 1}}), 1) << "the counts above are not all zero";
  EXPECT_EQ(kv_free_block_count(cache), 60) << "kv_blocks_needed changed nothing";
}

TEST(KvCache, ForkFreeAndExhaustion) {
  auto f = load_model_fixture("qwen3_tied");
  PagedKVCache cache = make_kv_cache(f.model.config, 3, 2);
  int64_t a = kv_new_sequence(cache);
  kv_reserve(cache, a, 4);
  cache.sequence(a).length = 4;
  EXPECT_EQ(kv_free_block_count(cache), 1);
  int64_t b = kv_fork(cache, a);
  EXPECT_EQ(cache.refcount[cache.sequence(a).blocks[0]], 2);
  kv_reserve(cache, b, 1);  // full blocks stay shared; b gets a fresh third block
  EXPECT_EQ(kv_free_block_count(cache), 0);
  EXPECT_THROW(kv_reserve(cache, a, 1), Error);
  kv_free(cache, a);
  EXPECT_EQ(kv_free_block_count(cache), 0) << "b still holds the shared blocks";
  kv_free(cache, b);
  EXPECT_EQ(kv_free_block_count(cache), 3);
  EXPECT_THROW(cache.sequence(b), Error);
}

}  // namespace
}  // namespace sqlrl
