// Paged KV-cache inference against the training forward and the transformers fixtures:
// decode logits at every position, greedy generation, prefix sharing, fork/free bookkeeping,
// and sampling that does not depend on batch composition.
#include <gtest/gtest.h>

#include "fixture.h"
#include "model/infer.h"

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

INSTANTIATE_TEST_SUITE_P(Model, KvFixture, ::testing::Values("qwen3_tied", "qwen2_untied"));

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
