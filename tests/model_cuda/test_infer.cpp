// The CUDA model's inference path: prefill + paged decode against full forwards (CPU f32 and the
// GPU training path), prefix sharing with copy on write, and generation against the CPU model.
// Tolerances as in test_train.cpp: bf16 activations put logits within 5e-2 of max |logit|.
#include <gtest/gtest.h>

#include "model_cuda_util.h"
#include "tests/model/fixture.h"

namespace sqlrl {
namespace {

using namespace sqlrl::testing;

class CudaModelInfer : public ::testing::TestWithParam<QwenArch> {};

std::vector<float> cpu_logits(const QwenModel& host, const std::vector<int32_t>& seq) {
  PackedBatch batch = pack_sequences({seq});
  TrainState s = make_train_state(host.config, options(batch.num_tokens()));
  std::vector<float> out(static_cast<size_t>(batch.num_tokens() * host.config.vocab_size));
  forward_logits(host, s, batch, out.data());
  return out;
}

std::vector<float> gpu_full_logits(const CudaModel& m, const std::vector<int32_t>& seq) {
  PackedBatch batch = pack_sequences({seq});
  CudaTrainState s = make_cuda_train_state(m, options(batch.num_tokens()));
  std::vector<float> out(static_cast<size_t>(batch.num_tokens() * m.config().vocab_size), NAN);
  forward_logits_cuda(m, s, batch, out.data());
  return out;
}

double max_abs(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s = std::max(s, static_cast<double>(std::fabs(x)));
  return s;
}

TEST_P(CudaModelInfer, PrefillThenDecodeEqualsFullForwardAtEveryPosition) {
  SQLRL_REQUIRE_CUDA();
  QwenModel host = random_model(GetParam(), 11);
  const int64_t V = host.config.vocab_size;
  RandomBatch rb = random_batch(V, 12, {25});
  const std::vector<int32_t>& seq = rb.batch.tokens;
  CudaModel m = upload_model(host);
  // Block size 4 and a 10-token prefill: the prefill ends inside a block, decode crosses blocks.
  CudaKVCache cache = make_cuda_kv_cache(m, 16, 4);
  int64_t h = kv_new_sequence(cache.book);
  Tensor logits;
  std::vector<float> got(seq.size() * V, NAN);
  forward_cached_cuda(m, cache, {{h, std::vector<int32_t>(seq.begin(), seq.begin() + 10)}}, logits, true);
  std::vector<float> part = to_floats(logits);
  std::copy(part.begin(), part.end(), got.begin());
  for (size_t t = 10; t < seq.size(); ++t) {
    forward_cached_cuda(m, cache, {{h, {seq[t]}}}, logits);
    part = to_floats(logits);
    ASSERT_EQ(part.size(), static_cast<size_t>(V));
    std::copy(part.begin(), part.end(), got.begin() + t * V);
  }
  EXPECT_EQ(cache.book.sequence(h).length, static_cast<int64_t>(seq.size()));
  std::vector<float> cpu = cpu_logits(host, seq), full = gpu_full_logits(m, seq);
  double scale = max_abs(cpu);
  double vs_cpu = max_abs_diff(got.data(), cpu.data(), static_cast<int64_t>(got.size())) / scale;
  double vs_full = max_abs_diff(got.data(), full.data(), static_cast<int64_t>(got.size())) / scale;
  std::printf("decode logits vs CPU %.3g, vs GPU full forward %.3g of max |logit| (budget 5e-2)\n", vs_cpu, vs_full);
  EXPECT_LE(vs_cpu, 5e-2);
  EXPECT_LE(vs_full, 5e-2);
  kv_free(cache.book, h);
  EXPECT_EQ(kv_free_block_count(cache.book), 16);
}

TEST_P(CudaModelInfer, ForkedSamplesCopyTheSharedBlockBeforeWriting) {
  SQLRL_REQUIRE_CUDA();
  QwenModel host = random_model(GetParam(), 13);
  const int64_t V = host.config.vocab_size;
  RandomBatch rb = random_batch(V, 14, {10, 3, 3});
  const auto& t = rb.batch.tokens;
  std::vector<int32_t> prompt(t.begin(), t.begin() + 10), a(t.begin() + 10, t.begin() + 13), b(t.begin() + 13, t.end());
  CudaModel m = upload_model(host);
  CudaKVCache cache = make_cuda_kv_cache(m, 16, 4);
  int64_t pa = kv_new_sequence(cache.book);
  Tensor logits;
  forward_cached_cuda(m, cache, {{pa, prompt}}, logits);
  int64_t pb = kv_fork(cache.book, pa);
  int64_t used_before = 16 - kv_free_block_count(cache.book);
  // Both continuations in one batch, then one more step each: each must see only its own tokens.
  forward_cached_cuda(m, cache, {{pa, {a[0], a[1]}}, {pb, {b[0], b[1]}}}, logits, true);
  std::vector<float> first = to_floats(logits);
  // Positions 10, 11 land in the shared block holding 8, 9: the first writer copies it, the
  // second then owns the original alone and writes in place.
  EXPECT_EQ(16 - kv_free_block_count(cache.book), used_before + 1) << "exactly the shared last block is copied";
  forward_cached_cuda(m, cache, {{pa, {a[2]}}, {pb, {b[2]}}}, logits);
  std::vector<float> second = to_floats(logits);
  EXPECT_EQ(16 - kv_free_block_count(cache.book), used_before + 3) << "position 12 opens a block for each";
  std::vector<int32_t> seq_a = prompt, seq_b = prompt;
  seq_a.insert(seq_a.end(), a.begin(), a.end());
  seq_b.insert(seq_b.end(), b.begin(), b.end());
  std::vector<float> want_a = cpu_logits(host, seq_a), want_b = cpu_logits(host, seq_b);
  double scale = std::max(max_abs(want_a), max_abs(want_b)), worst = 0;
  auto row = [&](const std::vector<float>& v, int64_t r) { return v.data() + r * V; };
  worst = std::max(worst, max_abs_diff(row(first, 0), row(want_a, 10), V));
  worst = std::max(worst, max_abs_diff(row(first, 1), row(want_a, 11), V));
  worst = std::max(worst, max_abs_diff(row(first, 2), row(want_b, 10), V));
  worst = std::max(worst, max_abs_diff(row(first, 3), row(want_b, 11), V));
  worst = std::max(worst, max_abs_diff(row(second, 0), row(want_a, 12), V));
  worst = std::max(worst, max_abs_diff(row(second, 1), row(want_b, 12), V));
  std::printf("forked decode vs CPU: %.3g of max |logit| (budget 5e-2)\n", worst / scale);
  EXPECT_LE(worst / scale, 5e-2);
}

TEST_P(CudaModelInfer, GreedyGenerationMatchesCpuWhileMarginsExceedTheError) {
  SQLRL_REQUIRE_CUDA();
  QwenModel host = random_model(GetParam(), 15);
  const int64_t V = host.config.vocab_size;
  RandomBatch rb = random_batch(V, 16, {6});
  GenerateOptions opt;
  opt.max_new_tokens = 12;
  opt.sampling.temperature = 0.0f;
  PagedKVCache cpu_cache = make_kv_cache(host.config, 32, 4);
  auto cpu = generate(host, cpu_cache, rb.batch.tokens, 1, opt);
  CudaModel m = upload_model(host);
  CudaKVCache cache = make_cuda_kv_cache(m, 32, 4);
  auto gpu = generate_cuda(m, cache, rb.batch.tokens, 2, opt);
  ASSERT_EQ(gpu.size(), 2u);
  EXPECT_EQ(gpu[0].tokens, gpu[1].tokens) << "greedy samples of one prompt differ";
  // While the two agree they share the prefix, so the CPU logits of that prefix hold for both.
  // The argmax may differ only where the CPU's top-1/top-2 margin is within twice the GPU's
  // measured logit error on the same prefix; after that the sequences part ways.
  std::vector<int32_t> seq = rb.batch.tokens;
  seq.insert(seq.end(), cpu[0].tokens.begin(), cpu[0].tokens.end());
  std::vector<float> want = cpu_logits(host, seq), have = gpu_full_logits(m, seq);
  size_t same = 0;
  for (size_t s = 0; s < cpu[0].tokens.size() && s < gpu[0].tokens.size(); ++s) {
    if (gpu[0].tokens[s] == cpu[0].tokens[s]) {
      ++same;
      continue;
    }
    int64_t r = static_cast<int64_t>(rb.batch.tokens.size() + s) - 1;
    std::vector<float> row(want.begin() + r * V, want.begin() + (r + 1) * V);
    std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
    double err = max_abs_diff(have.data() + r * V, want.data() + r * V, V);
    EXPECT_LE(row[0] - row[1], 2 * err) << "step " << s << ": tokens differ where the margin exceeds the error";
    break;
  }
  std::printf("greedy: first %zu of %zu tokens equal to the CPU's\n", same, cpu[0].tokens.size());
  EXPECT_EQ(kv_free_block_count(cache.book), 32);
}

TEST_P(CudaModelInfer, SampledTokensCarryTheModelsLogprobs) {
  SQLRL_REQUIRE_CUDA();
  QwenModel host = random_model(GetParam(), 17);
  const int64_t V = host.config.vocab_size;
  RandomBatch rb = random_batch(V, 18, {5});
  GenerateOptions opt;
  opt.max_new_tokens = 8;
  opt.sampling = {0.8f, 50, 0.95f, 1234};
  CudaModel m = upload_model(host);
  CudaKVCache cache = make_cuda_kv_cache(m, 32, 4);
  auto gpu = generate_cuda(m, cache, rb.batch.tokens, 3, opt);
  double worst = 0, scale = 0;
  for (const GeneratedSample& g : gpu) {
    std::vector<int32_t> seq = rb.batch.tokens;
    seq.insert(seq.end(), g.tokens.begin(), g.tokens.end());
    std::vector<float> want = cpu_logits(host, seq);
    scale = std::max(scale, max_abs(want));
    for (size_t s = 0; s < g.tokens.size(); ++s) {
      int64_t r = static_cast<int64_t>(rb.batch.tokens.size() + s) - 1;
      const float* row = want.data() + r * V;
      double mx = *std::max_element(row, row + V), sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
      worst = std::max(worst, std::fabs(g.logprobs_t1[s] - (row[g.tokens[s]] - mx - std::log(sum))));
      EXPECT_LE(g.logprobs[s], 0.0f);
    }
  }
  std::printf("sampled log-probs (t=1) vs CPU: max error %.3g nats (budget %.3g)\n", worst, 2 * 5e-2 * scale);
  EXPECT_LE(worst, 2 * 5e-2 * scale);
}

INSTANTIATE_TEST_SUITE_P(Arch, CudaModelInfer, ::testing::Values(QwenArch::Qwen2, QwenArch::Qwen3),
                         [](const auto& info) { return info.param == QwenArch::Qwen2 ? "Qwen2" : "Qwen3"; });

}  // namespace
}  // namespace sqlrl
