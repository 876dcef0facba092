// The CUDA model's inference path: prefill + paged decode against full forwards (CPU f32 and the
// GPU training path), prefix sharing with copy on write, generation against the CPU model, and a
// Qwen-sized shape (head_dim 128, 4:1 GQA, 4 layers, hidden 512, two sequences of odd lengths
// over several KV blocks, decoded in mixed chunks).
//
// Budgets: every logit within 12 sqrt(R) u ||g W[v]||_2 of the CPU's, element by element
// (model_cuda_util.h, cpu_logits_and_budget: R bf16 stores on the way, u = 2^-9, g W[v] lm_head's
// row weighted by the final norm; 12 standard deviations of the summed rounding errors). It
// scales with each logit's own products instead of with the largest logit, so a wrong small
// logit fails where 5e-2 of max |logit| let it pass. The old global checks stay as well. A log-prob is a logit minus a log-sum-exp, and the log-sum-exp moves by at
// most the row's largest logit error: so b[token] + max_v b[v] nats.
#include <gtest/gtest.h>

#include "model_cuda_util.h"
#include "tests/model/fixture.h"

namespace sqlrl {
namespace {

using namespace sqlrl::testing;

class CudaModelInfer : public ::testing::TestWithParam<QwenArch> {};

std::vector<float> gpu_full_logits(const CudaModel& m, const PackedBatch& batch) {
  CudaTrainState s = make_cuda_train_state(m, options(batch.num_tokens()));
  std::vector<float> out(static_cast<size_t>(batch.num_tokens() * m.config().vocab_size), NAN);
  forward_logits_cuda(m, s, batch, out.data());
  return out;
}
std::vector<float> gpu_full_logits(const CudaModel& m, const std::vector<int32_t>& seq) {
  return gpu_full_logits(m, pack_sequences({seq}));
}

double max_abs(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s = std::max(s, static_cast<double>(std::fabs(x)));
  return s;
}

// Catches: a decode step that attends to the wrong cache slots (block table, slot arithmetic, a
// prefill that ends inside a block), a KV write that lands elsewhere or not at all, RoPE at the
// wrong position in decode. Each moves logits by many budgets; bf16 alone stays under one.
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
  LogitsAndBudget cpu = cpu_logits_and_budget(host, seq);
  std::vector<float> full = gpu_full_logits(m, seq);
  const int64_t n = static_cast<int64_t>(got.size());
  double scale = max_abs(cpu.logits);
  double vs_cpu = max_abs_diff(got.data(), cpu.logits.data(), n) / scale;
  double vs_full = max_abs_diff(got.data(), full.data(), n) / scale;
  double r_decode = budget_ratio(got.data(), cpu.logits.data(), cpu.budget.data(), n);
  double r_full = budget_ratio(full.data(), cpu.logits.data(), cpu.budget.data(), n);
  double r_pair = budget_ratio(got.data(), full.data(), cpu.budget.data(), n, 2.0);
  std::printf("decode logits vs CPU %.3g, vs GPU full forward %.3g of max |logit| (budget 5e-2); per element / "
              "bf16 budget: decode %.3g, full forward %.3g, decode vs full %.3g of two budgets (budget 1)\n",
              vs_cpu, vs_full, r_decode, r_full, r_pair);
  EXPECT_LE(vs_cpu, 5e-2);
  EXPECT_LE(vs_full, 5e-2);
  EXPECT_LE(r_decode, 1.0);
  EXPECT_LE(r_full, 1.0);
  EXPECT_LE(r_pair, 1.0);  // both within one budget of the CPU: within two of each other
  kv_free(cache.book, h);
  EXPECT_EQ(kv_free_block_count(cache.book), 16);
}

// Catches: a fork that writes into the block it shares (the other sample then reads the wrong
// K/V), or a copy on write that copies the wrong block or too little of it.
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
  LogitsAndBudget want_a = cpu_logits_and_budget(host, seq_a), want_b = cpu_logits_and_budget(host, seq_b);
  double scale = std::max(max_abs(want_a.logits), max_abs(want_b.logits)), worst = 0, ratio = 0;
  auto check_row = [&](const std::vector<float>& got, int64_t r, const LogitsAndBudget& want, int64_t wr) {
    const float* g = got.data() + r * V;
    worst = std::max(worst, max_abs_diff(g, want.logit_row(wr), V));
    ratio = std::max(ratio, budget_ratio(g, want.logit_row(wr), want.budget_row(wr), V));
  };
  check_row(first, 0, want_a, 10);
  check_row(first, 1, want_a, 11);
  check_row(first, 2, want_b, 10);
  check_row(first, 3, want_b, 11);
  check_row(second, 0, want_a, 12);
  check_row(second, 1, want_b, 12);
  std::printf("forked decode vs CPU: %.3g of max |logit| (budget 5e-2), %.3g of the bf16 budget (budget 1)\n",
              worst / scale, ratio);
  EXPECT_LE(worst / scale, 5e-2);
  EXPECT_LE(ratio, 1.0);
}

// Catches: a device greedy path that leaves the CPU's where the CPU's choice is clear. The device
// logits lie within the budget b of the CPU's, so the argmax may differ only where the CPU's top
// choice does not beat every other id by the two budgets (l_x - b_x > l_v + b_v); and the device's
// token there must be one that some error within budget makes the maximum. (The former check
// used the GPU full forward's row error as the decode path's: they are independent draws, see
// model_cuda_util.h, so it could fail a correct device at a near-tie.)
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
  ASSERT_EQ(gpu[0].tokens.size(), cpu[0].tokens.size());
  // While the two agree they share the prefix, so the CPU logits of that prefix hold for both.
  std::vector<int32_t> seq = rb.batch.tokens;
  seq.insert(seq.end(), cpu[0].tokens.begin(), cpu[0].tokens.end());
  LogitsAndBudget want = cpu_logits_and_budget(host, seq);
  size_t same = 0, clear = 0;
  for (size_t s = 0; s < cpu[0].tokens.size(); ++s) {
    int64_t r = static_cast<int64_t>(rb.batch.tokens.size() + s) - 1;
    bool sure = bf16_draw_holds(want.logit_row(r), want.budget_row(r), V, cpu[0].tokens[s], 0.0f, 0, DrawCase::Surely);
    if (gpu[0].tokens[s] == cpu[0].tokens[s]) {
      ++same;
      clear += sure;
      continue;
    }
    EXPECT_FALSE(sure) << "step " << s << ": tokens differ where the CPU's choice beats every other by the budgets";
    EXPECT_TRUE(bf16_draw_holds(want.logit_row(r), want.budget_row(r), V, gpu[0].tokens[s], 0.0f, 0,
                                DrawCase::Possibly))
        << "step " << s << ": the device chose a token no error within budget makes the maximum";
    break;
  }
  std::printf("greedy: first %zu of %zu tokens equal to the CPU's (%zu of them clear of the bf16 budget)\n", same,
              cpu[0].tokens.size(), clear);
  EXPECT_EQ(kv_free_block_count(cache.book), 32);
}

// Catches: a sampler or decode path whose reported log-probs are not the model's (wrong row,
// wrong position's logits, a log-sum-exp over the wrong ids). Per token, the budget is
// b[token] + max_v b[v] of the CPU logits of the sampled sequence (the former allowed 0.1 x
// max |logit| nats to every token).
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
  double worst = 0, scale = 0, ratio = 0;
  for (const GeneratedSample& g : gpu) {
    std::vector<int32_t> seq = rb.batch.tokens;
    seq.insert(seq.end(), g.tokens.begin(), g.tokens.end());
    LogitsAndBudget want = cpu_logits_and_budget(host, seq);
    scale = std::max(scale, max_abs(want.logits));
    for (size_t s = 0; s < g.tokens.size(); ++s) {
      int64_t r = static_cast<int64_t>(rb.batch.tokens.size() + s) - 1;
      const float *row = want.logit_row(r), *b = want.budget_row(r);
      double mx = *std::max_element(row, row + V), sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
      double err = std::fabs(g.logprobs_t1[s] - (row[g.tokens[s]] - mx - std::log(sum)));
      double budget = b[g.tokens[s]] + *std::max_element(b, b + V) + 1e-5;  // + f32 log-softmax rounding
      worst = std::max(worst, err);
      ratio = std::max(ratio, err / budget);
      EXPECT_LE(g.logprobs[s], 0.0f);
      ASSERT_FALSE(std::isnan(g.logprobs_t1[s])) << "token " << s;
    }
  }
  std::printf("sampled log-probs (t=1) vs CPU: max error %.3g nats (former budget %.3g), %.3g of the bf16 budget "
              "(budget 1)\n", worst, 2 * 5e-2 * scale, ratio);
  EXPECT_LE(worst, 2 * 5e-2 * scale);
  EXPECT_LE(ratio, 1.0);
}

INSTANTIATE_TEST_SUITE_P(Arch, CudaModelInfer, ::testing::Values(QwenArch::Qwen2, QwenArch::Qwen3),
                         [](const auto& info) { return info.param == QwenArch::Qwen2 ? "Qwen2" : "Qwen3"; });

// A shape where indexing bugs live that the 64-wide, 2-layer model cannot show: head_dim 128 (the
// other instantiation of every attention kernel), 8 query heads on 2 KV heads (a group of 4: the
// paged kernel serves 4 heads per block), 4 layers, hidden 512 (q_dim 1024 != hidden), and two
// sequences of 77 and 45 tokens (odd, 5 and 3 blocks of 16) in one cache, decoded together in
// chunks of mixed sizes that start and end inside blocks and cross block edges (a chunk of 16
// from position 29, one of 17 from 59), some returning every position's logits and some only the
// last (the gather of rows). Catches: a block-table stride or block-index off-by-one that only
// shows past the first block or for the second sequence, GQA head mapping that holds for a group
// of 2 but not 4, D = 128 offsets, a layer's K/V written into another layer's cache, causal
// masking inside a multi-token chunk. Budgets as above, element by element against the CPU; the
// training forward of the same pair (flash attention at D 128, varlen) as well.
class CudaModelInferLarge : public ::testing::TestWithParam<QwenArch> {};

TEST_P(CudaModelInferLarge, ChunkedDecodeOfTwoSequencesMatchesTheCpuEverywhere) {
  SQLRL_REQUIRE_CUDA();
  QwenModel host = random_model(qwen_sized_config(GetParam(), 4), 21);
  const int64_t V = host.config.vocab_size, block = 16;
  RandomBatch rb = random_batch(V, 22, {77, 45});
  const std::vector<int32_t> seq_a(rb.batch.tokens.begin(), rb.batch.tokens.begin() + 77),
      seq_b(rb.batch.tokens.begin() + 77, rb.batch.tokens.end());
  // Chunk sizes after the prefills of 21 and 13 tokens; each call runs one chunk of each.
  const std::vector<int> chunks_a = {21, 1, 1, 5, 1, 16, 1, 11, 1, 1, 17, 1},
                         chunks_b = {13, 1, 3, 1, 1, 7, 1, 2, 1, 9, 1, 5};
  CudaModel m = upload_model(host);
  CudaKVCache cache = make_cuda_kv_cache(m, 12, block);
  const int64_t ha = kv_new_sequence(cache.book), hb = kv_new_sequence(cache.book);
  std::vector<float> got_a(seq_a.size() * V, NAN), got_b(seq_b.size() * V, NAN);
  std::vector<uint8_t> seen_a(seq_a.size(), 0), seen_b(seq_b.size(), 0);
  size_t at_a = 0, at_b = 0;
  Tensor logits;
  for (size_t step = 0; step < chunks_a.size(); ++step) {
    const size_t na = static_cast<size_t>(chunks_a[step]), nb = static_cast<size_t>(chunks_b[step]);
    const bool all = step % 2 == 0;
    forward_cached_cuda(m, cache,
                        {{ha, std::vector<int32_t>(seq_a.begin() + at_a, seq_a.begin() + at_a + na)},
                         {hb, std::vector<int32_t>(seq_b.begin() + at_b, seq_b.begin() + at_b + nb)}},
                        logits, all);
    std::vector<float> rows = to_floats(logits);
    ASSERT_EQ(rows.size(), (all ? na + nb : 2) * V) << "step " << step;
    auto take = [&](size_t from_row, std::vector<float>& got, std::vector<uint8_t>& seen, size_t pos) {
      std::copy(rows.begin() + from_row * V, rows.begin() + (from_row + 1) * V, got.begin() + pos * V);
      seen[pos] = 1;
    };
    if (all) {
      for (size_t j = 0; j < na; ++j) take(j, got_a, seen_a, at_a + j);
      for (size_t j = 0; j < nb; ++j) take(na + j, got_b, seen_b, at_b + j);
    } else {
      take(0, got_a, seen_a, at_a + na - 1);
      take(1, got_b, seen_b, at_b + nb - 1);
    }
    at_a += na, at_b += nb;
  }
  ASSERT_EQ(at_a, seq_a.size());
  ASSERT_EQ(at_b, seq_b.size());
  EXPECT_EQ(cache.book.sequence(ha).length, 77);
  EXPECT_EQ(cache.book.sequence(hb).length, 45);
  EXPECT_EQ(kv_free_block_count(cache.book), 12 - 5 - 3);

  double r_decode = 0, vs_cpu = 0, scale = 0;
  int64_t rows_checked = 0;
  for (int s = 0; s < 2; ++s) {
    const std::vector<int32_t>& seq = s == 0 ? seq_a : seq_b;
    const std::vector<float>& got = s == 0 ? got_a : got_b;
    const std::vector<uint8_t>& seen = s == 0 ? seen_a : seen_b;
    LogitsAndBudget want = cpu_logits_and_budget(host, seq);
    scale = std::max(scale, max_abs(want.logits));
    for (size_t p = 0; p < seq.size(); ++p) {
      if (!seen[p]) continue;
      ++rows_checked;
      r_decode = std::max(r_decode, budget_ratio(got.data() + p * V, want.logit_row(p), want.budget_row(p), V));
      vs_cpu = std::max(vs_cpu, max_abs_diff(got.data() + p * V, want.logit_row(p), V));
    }
  }
  // The training path on the same two sequences packed together.
  LogitsAndBudget want_pair = cpu_logits_and_budget(host, rb.batch);
  std::vector<float> full = gpu_full_logits(m, rb.batch);
  double r_full = budget_ratio(full.data(), want_pair.logits.data(), want_pair.budget.data(),
                               static_cast<int64_t>(full.size()));
  std::printf("D 128, 8/2 heads, 4 layers, hidden 512: %lld decoded rows vs CPU: %.3g of the bf16 budget, %.3g of "
              "max |logit|; training forward %.3g of the budget (budget 1)\n",
              static_cast<long long>(rows_checked), r_decode, vs_cpu / scale, r_full);
  EXPECT_GT(rows_checked, 70);
  EXPECT_LE(r_decode, 1.0);
  EXPECT_LE(r_full, 1.0);
  kv_free(cache.book, ha);
  kv_free(cache.book, hb);
  EXPECT_EQ(kv_free_block_count(cache.book), 12);
}

INSTANTIATE_TEST_SUITE_P(Arch, CudaModelInferLarge, ::testing::Values(QwenArch::Qwen2, QwenArch::Qwen3),
                         [](const auto& info) { return info.param == QwenArch::Qwen2 ? "Qwen2" : "Qwen3"; });

}  // namespace
}  // namespace sqlrl
