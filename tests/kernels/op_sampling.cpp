// sampling (kernels/sampling.h): greedy, temperature, top-k, top-p with the Philox draw keyed by
// (seed, sequence, position), and the two reported log-probs, on the CPU and on CUDA.
//
// The reference is ref.h's full-sort sampler, the sampler's own arithmetic step for step.
//  CPU: the same token and the same bits of both log-probs (the nucleus path selects instead
//    of sorting and must not change a bit), on random rows at several spreads (ties on a coarse
//    grid, tied leaders, masked -inf ids), Qwen-sized rows, an exact tie on the top-p cut, and
//    the CUDA batches below; plus hand-computed log-probs, the Philox keying, the frequencies of
//    20,000 draws, and the parameter checks.
//  CUDA: the same token, except where the draw or the top-p cut lies within 1e-5 of a boundary
//    (there the two paths' float exp and summation order may legitimately disagree); log-probs
//    within 1e-5 (float results of double math on the same floats: float exp's ulp); at least
//    90% of random rows decisive; full Qwen3-width rows (16 blocks per row); tie-heavy rows (all
//    equal, two values, 64 adjacent floats) that overflow the gather buffer and take the radix
//    fallback, token-exact where both sides' sums are exact; padded rows (ld > vocab, 1e30 in the
//    padding); every call twice on one 0xff-filled workspace, bit-identical; tokens and both
//    log-probs bit-identical whatever the batch (1 to 416 rows: 16 to 1 blocks per row); a
//    chi-square test of the truncated distribution.
#include <algorithm>
#include <numeric>

#include "kernels/sampling.h"
#include "tests/kernels/cases.h"

namespace sqlrl::testing {
namespace {

// --- batches of rows shared by both backends -----------------------------------------------
struct SamplingBatch {
  std::string name;
  int64_t rows, vocab;
  std::vector<float> logits;  // rows x ld
  std::vector<SamplingRequest> requests;
  int64_t ld = 0;             // 0: vocab
  int64_t stride() const { return ld > 0 ? ld : vocab; }
};

// Uniform logits with peaked rows (a few large logits, like a confident model), eight settings.
SamplingBatch fixed_seed_batch(Rng& rng) {
  const int64_t vocab = 5003, rows = 400;
  const std::vector<SamplingParams> settings = {{0.0f, 0, 1.0f, 1},  {1.0f, 0, 1.0f, 2},    {0.6f, 0, 0.95f, 3},
                                                {0.7f, 20, 1.0f, 4}, {1.3f, 50, 0.9f, 5},   {0.8f, 1, 1.0f, 6},
                                                {1.0f, 0, 0.5f, 7},  {0.3f, 4000, 0.99f, 8}};
  SamplingBatch b{"fixed seeds", rows, vocab, rng.uniform(static_cast<size_t>(rows * vocab), -8.0, 8.0), {}};
  b.requests.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    b.requests[r].params = settings[r % settings.size()];
    b.requests[r].params.seed += rng.next();
    b.requests[r].sequence_id = static_cast<uint64_t>(r / 8);
    b.requests[r].position = rng.next() % 100000;
    if (r % 3 == 0)
      for (int k = 0; k < 5; ++k) b.logits[r * vocab + static_cast<int64_t>(rng.next() % vocab)] += 12.0f;
  }
  return b;
}

// Logits on a coarse grid: many exact ties, including at the top-k boundary and the maximum.
SamplingBatch tie_batch(Rng& rng) {
  const int64_t vocab = 300, rows = 64;
  SamplingBatch b{"ties", rows, vocab, std::vector<float>(static_cast<size_t>(rows * vocab)), {}};
  for (float& l : b.logits) l = static_cast<float>(static_cast<int>(rng.next() % 9)) * 0.5f;
  b.requests.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    b.requests[r].params = r % 2 == 0 ? SamplingParams{0.9f, 7, 1.0f, rng.next()} : SamplingParams{0.0f, 0, 1.0f, 0};
    b.requests[r].position = static_cast<uint64_t>(r);
  }
  return b;
}

// Full Qwen3-width rows, some with a model-like head (a handful of tokens far above the rest).
SamplingBatch qwen_width_batch(Rng& rng) {
  const int64_t vocab = 151936, rows = 12;
  SamplingBatch b{"Qwen width", rows, vocab, rng.normal(static_cast<size_t>(rows * vocab), 3.0), {}};
  const std::vector<SamplingParams> settings = {
      {0.0f, 0, 1.0f, 1}, {1.0f, 0, 1.0f, 2}, {0.6f, 0, 0.95f, 3}, {1.0f, 50, 1.0f, 4}};
  b.requests.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    b.requests[r].params = settings[r % settings.size()];
    b.requests[r].params.seed = rng.next();
    b.requests[r].sequence_id = static_cast<uint64_t>(r);
    if (r >= 4)
      for (int k = 0; k < 8; ++k) b.logits[r * vocab + static_cast<int64_t>(rng.next() % vocab)] += 15.0f + k;
  }
  return b;
}

std::vector<SamplingBatch> batches(Rng& rng) { return {fixed_seed_batch(rng), tie_batch(rng), qwen_width_batch(rng)}; }

// --- CPU -----------------------------------------------------------------------------------
// Exactly the reference: the same token and the same float operations in the same order.
void expect_same_as_reference(const float* row, int64_t vocab, const SamplingParams& params, uint64_t seq, uint64_t pos,
                              SamplingScratch& scratch) {
  const SampledToken got = sample_token_cpu(row, vocab, params, seq, pos, scratch);
  const SampledToken want = ref_sample(row, vocab, params, seq, pos);
  ASSERT_EQ(got.token, want.token) << "vocab " << vocab << " T " << params.temperature << " k " << params.top_k << " p "
                                   << params.top_p;
  EXPECT_EQ(got.logprob, want.logprob);
  EXPECT_EQ(got.logprob_t1, want.logprob_t1);
}

// Gaussian logits at several spreads (nuclei from one token to most of the vocabulary), some
// rounded to a coarse grid so many logits tie, some with a few dominant ids, some with a third of
// the upper half masked to -inf.
std::vector<float> random_row(Rng& rng, int64_t vocab, int kind) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float spread[] = {0.3f, 1.0f, 3.0f, 8.0f};
  std::vector<float> row(static_cast<size_t>(vocab));
  for (auto& x : row) x = normal(rng.engine()) * spread[kind % 4];
  if (kind % 3 == 1)
    for (auto& x : row) x = std::round(x * 2.0f) / 2.0f;  // ties
  if (kind % 5 == 2)
    for (int i = 0; i < 4; ++i) row[rng.next() % vocab] = 12.0f;  // a few tied leaders
  if (kind % 4 == 3)
    for (int64_t v = vocab / 2; v < vocab; v += 3) row[v] = -INFINITY;  // masked ids
  return row;
}

const std::vector<float> kLogits = {1.0f, 3.0f, 2.5f, -1.0f, 3.0f, 0.5f};

double log_softmax(const std::vector<float>& z, size_t i, double t) {
  double sum = 0;
  for (float v : z) sum += std::exp(v / t);
  return z[i] / t - std::log(sum);
}

void hand_computed_cases() {
  SamplingScratch s;
  {  // greedy takes the first maximum: logits 1 and 4 tie at 3.0
    SCOPED_TRACE("greedy");
    SampledToken r = sample_token_cpu(kLogits.data(), 6, {0.0f, 0, 1.0f, 1}, 0, 0, s);
    EXPECT_EQ(r.token, 1);
    EXPECT_EQ(r.logprob, 0.0f);
    EXPECT_NEAR(r.logprob_t1, log_softmax(kLogits, 1, 1.0), 1e-6);
  }
  {  // top-k 1 is greedy with certainty
    SCOPED_TRACE("top-k 1");
    for (uint64_t pos = 0; pos < 20; ++pos) {
      SampledToken r = sample_token_cpu(kLogits.data(), 6, {0.7f, 1, 1.0f, 9}, 3, pos, s);
      EXPECT_EQ(r.token, 1);
      EXPECT_NEAR(r.logprob, 0.0f, 1e-7);
    }
  }
  {  // log-probs are under the truncated, tempered distribution
    SCOPED_TRACE("truncated tempered log-probs");
    // T = 0.5, top-k 3 keeps tokens {1, 4, 2} (ties by id); top-p 0.9 then: tempered weights
    // e^6, e^6, e^5 -> cumulative 0.4223, 0.8446, 1.0, so all three stay (0.8446 < 0.9).
    for (uint64_t pos = 0; pos < 50; ++pos) {
      SampledToken r = sample_token_cpu(kLogits.data(), 6, {0.5f, 3, 0.9f, 5}, 1, pos, s);
      ASSERT_TRUE(r.token == 1 || r.token == 4 || r.token == 2) << r.token;
      const double denom = 2 * std::exp(6.0) + std::exp(5.0);
      EXPECT_NEAR(r.logprob, kLogits[r.token] / 0.5 - std::log(denom), 1e-6);
      EXPECT_NEAR(r.logprob_t1, log_softmax(kLogits, static_cast<size_t>(r.token), 1.0), 1e-6);
    }
    // top-p 0.8 stops after the two 3.0 logits (cumulative 0.8446 >= 0.8).
    for (uint64_t pos = 0; pos < 50; ++pos) {
      SampledToken r = sample_token_cpu(kLogits.data(), 6, {0.5f, 0, 0.8f, 5}, 1, pos, s);
      ASSERT_TRUE(r.token == 1 || r.token == 4) << r.token;
      EXPECT_NEAR(r.logprob, std::log(0.5), 1e-6);
    }
  }
  {  // draws are keyed by (seed, sequence, position)
    SCOPED_TRACE("Philox keying");
    std::vector<int32_t> a, b, c;
    for (uint64_t pos = 0; pos < 64; ++pos) {
      a.push_back(sample_token_cpu(kLogits.data(), 6, {1.0f, 0, 1.0f, 77}, 5, pos, s).token);
      b.push_back(sample_token_cpu(kLogits.data(), 6, {1.0f, 0, 1.0f, 77}, 5, pos, s).token);
      c.push_back(sample_token_cpu(kLogits.data(), 6, {1.0f, 0, 1.0f, 77}, 6, pos, s).token);
    }
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
  }
  {  // frequencies of 20,000 draws within 5 standard deviations of the distribution
    SCOPED_TRACE("frequencies");
    std::vector<int> counts(6, 0);
    const int n = 20000;
    for (int i = 0; i < n; ++i) ++counts[sample_token_cpu(kLogits.data(), 6, {1.0f, 0, 1.0f, 123}, 0, i, s).token];
    for (size_t v = 0; v < 6; ++v) {
      const double p = std::exp(log_softmax(kLogits, v, 1.0)), sd = std::sqrt(n * p * (1 - p));
      EXPECT_NEAR(counts[v], n * p, 5 * sd + 1) << "token " << v;
    }
  }
  // Bad parameters are errors.
  EXPECT_THROW(sample_token_cpu(kLogits.data(), 6, {-1.0f, 0, 1.0f, 0}, 0, 0, s), std::exception);
  EXPECT_THROW(sample_token_cpu(kLogits.data(), 6, {1.0f, 0, 0.0f, 0}, 0, 0, s), std::exception);
}

void run_cpu() {
  hand_computed_cases();
  SamplingScratch scratch;
  {
    Rng rng(20261123);
    SCOPED_TRACE("random rows, seed " + std::to_string(rng.seed()));
    const int64_t vocabs[] = {8, 9, 100, 129, 1000, 5000, 32768};
    const float temperatures[] = {0.3f, 0.7f, 1.0f, 1.5f};
    const float top_ps[] = {0.05f, 0.5f, 0.9f, 0.95f, 0.99f, 0.999f, 1.0f};
    const int64_t top_ks[] = {0, 0, 0, 1, 5, 50};
    int rows = 0;
    for (int64_t vocab : vocabs)
      for (int kind = 0; kind < 12; ++kind) {
        const std::vector<float> row = random_row(rng, vocab, kind);
        for (int j = 0; j < 6; ++j) {
          const SamplingParams params{temperatures[rng.next() % 4], top_ks[rng.next() % 6], top_ps[rng.next() % 7],
                                      rng.next()};
          const uint64_t seq = rng.next() % 100, pos = rng.next() % 1000;
          expect_same_as_reference(row.data(), vocab, params, seq, pos, scratch);
          ++rows;
        }
      }
    EXPECT_EQ(rows, 7 * 12 * 6);
  }
  {
    Rng rng(151936);
    SCOPED_TRACE("Qwen-sized rows, seed " + std::to_string(rng.seed()));
    const float top_ps[] = {0.1f, 0.8f, 0.95f, 0.999f};
    for (int kind = 0; kind < 8; ++kind) {
      const std::vector<float> row = random_row(rng, 151936, kind);
      const SamplingParams params{kind % 2 ? 0.7f : 1.0f, 0, top_ps[kind % 4], rng.next()};
      for (uint64_t pos = 0; pos < 3; ++pos) expect_same_as_reference(row.data(), 151936, params, 7, pos, scratch);
    }
  }
  {
    // Uniform logits put the running total exactly on top_p (0.5 of 4 equal tokens): the cut is
    // then decided by the full sort, and the lower ids win.
    SCOPED_TRACE("exact tie on the top-p cut");
    const std::vector<float> row(256, 1.0f);
    for (uint64_t pos = 0; pos < 32; ++pos) {
      SampledToken r = sample_token_cpu(row.data(), 256, {1.0f, 0, 0.5f, 3}, 0, pos, scratch);
      EXPECT_LT(r.token, 128);
      expect_same_as_reference(row.data(), 256, {1.0f, 0, 0.5f, 3}, 0, pos, scratch);
    }
  }
  Rng rng(42);
  for (const SamplingBatch& b : batches(rng)) {
    SCOPED_TRACE(b.name + " batch, seed 42");
    for (int64_t r = 0; r < b.rows; ++r) {
      const SamplingRequest& q = b.requests[r];
      expect_same_as_reference(b.logits.data() + r * b.vocab, b.vocab, q.params, q.sequence_id, q.position, scratch);
    }
  }
}

// --- CUDA ----------------------------------------------------------------------------------
// Runs the device sampler twice on one workspace that starts as 0xff bytes (no initialisation is
// needed; the second call reuses the tickets the first left) and checks the two agree bit for bit.
std::vector<SampledToken> run_gpu(const std::vector<float>& logits, int64_t rows, int64_t vocab,
                                  const std::vector<SamplingRequest>& requests, int64_t ld = 0) {
  if (ld == 0) ld = vocab;
  Tensor glogits = gpu(logits, DType::F32), greq = upload(requests);
  const size_t ws_bytes = sample_tokens_cuda_workspace_bytes(rows, vocab);
  Tensor ws = upload(std::vector<uint8_t>(ws_bytes, 0xff));
  std::vector<SampledToken> runs[2];
  for (auto& run : runs) {
    Tensor gout = upload(std::vector<SampledToken>(static_cast<size_t>(rows), SampledToken{-1, NAN, NAN}));  // poison
    sample_tokens_cuda(reinterpret_cast<SampledToken*>(gout.data()), f32_ptr(glogits), rows, vocab, ld,
                       reinterpret_cast<const SamplingRequest*>(greq.data()), ws.data(), ws_bytes, default_stream());
    run = download<SampledToken>(gout, static_cast<size_t>(rows));
  }
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(runs[0][r].token, runs[1][r].token) << "row " << r << ": a second call on the same workspace differs";
    EXPECT_EQ(runs[0][r].logprob, runs[1][r].logprob) << "row " << r;
    EXPECT_EQ(runs[0][r].logprob_t1, runs[1][r].logprob_t1) << "row " << r;
  }
  return runs[0];
}

// Compares the device with the reference row by row; returns how many rows were decisive (far
// from a boundary). exact_rows: rows whose sums are exact on both sides (equal weights, no top-p:
// every cumulative sum is an integer multiple of one weight), compared even near a boundary.
int64_t compare_with_reference(const SamplingBatch& b, const std::vector<int64_t>& exact_rows = {}) {
  const std::vector<SampledToken> got = run_gpu(b.logits, b.rows, b.vocab, b.requests, b.ld);
  int64_t decisive = 0;
  for (int64_t r = 0; r < b.rows; ++r) {
    const float* row = b.logits.data() + r * b.stride();
    const SamplingRequest& q = b.requests[r];
    const SampledToken want = ref_sample(row, b.vocab, q.params, q.sequence_id, q.position);
    SCOPED_TRACE(::testing::Message() << "row " << r << " T " << q.params.temperature << " top_k " << q.params.top_k
                                      << " top_p " << q.params.top_p);
    if (got[r].token < 0 || got[r].token >= b.vocab) {
      ADD_FAILURE() << "token " << got[r].token << ": row not written or out of range";
      continue;
    }
    // logprob_t1 is the log-softmax at the returned token: checkable whether or not tokens agree.
    EXPECT_NEAR(got[r].logprob_t1, ref_log_softmax_at(row, b.vocab, got[r].token), 1e-5);
    const bool exact = std::find(exact_rows.begin(), exact_rows.end(), r) != exact_rows.end();
    if (!exact && ref_sample_margin(row, b.vocab, q.params, q.sequence_id, q.position) < 1e-5) continue;
    ++decisive;
    EXPECT_EQ(got[r].token, want.token);
    EXPECT_NEAR(got[r].logprob, want.logprob, 1e-5);
  }
  return decisive;
}

// A row's result may not depend on the batch: the device splits a row over 1 to 16 blocks
// depending on the batch size, so the same 32 requests (vocab 40,000) run as a batch of 32 (12
// blocks per row), reversed, row 7 alone (16 blocks) and repeated 13 times (416 rows: 1 block per
// row); tokens and both log-probs must be bit-identical.
void batch_composition(Rng& rng) {
  SCOPED_TRACE("batch composition");
  const int64_t vocab = 40000, rows = 32;
  const std::vector<float> logits = rng.uniform(static_cast<size_t>(rows * vocab), -5.0, 5.0);
  std::vector<SamplingRequest> requests(static_cast<size_t>(rows));
  const SamplingParams settings[] = {{0.8f, 40, 0.9f, 11}, {0.8f, 0, 0.9f, 11}, {1.0f, 0, 1.0f, 11}, {0.0f, 0, 1.0f, 11}};
  for (int64_t r = 0; r < rows; ++r) requests[r] = SamplingRequest{settings[r % 4], static_cast<uint64_t>(r), 5};
  const std::vector<SampledToken> together = run_gpu(logits, rows, vocab, requests);
  auto same = [](const SampledToken& a, const SampledToken& b, const std::string& what) {
    EXPECT_EQ(a.token, b.token) << what;
    EXPECT_EQ(a.logprob, b.logprob) << what;
    EXPECT_EQ(a.logprob_t1, b.logprob_t1) << what;
  };
  std::vector<float> reversed_logits;
  const std::vector<SamplingRequest> reversed(requests.rbegin(), requests.rend());
  for (int64_t r = rows - 1; r >= 0; --r)
    reversed_logits.insert(reversed_logits.end(), logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
  const std::vector<SampledToken> apart = run_gpu(reversed_logits, rows, vocab, reversed);
  for (int64_t r = 0; r < rows; ++r) same(together[r], apart[rows - 1 - r], "reversed, row " + std::to_string(r));
  const std::vector<float> row7(logits.begin() + 7 * vocab, logits.begin() + 8 * vocab);
  same(run_gpu(row7, 1, vocab, {requests[7]})[0], together[7], "row 7 alone");
  std::vector<float> many_logits;
  std::vector<SamplingRequest> many;
  for (int copy = 0; copy < 13; ++copy) {
    many_logits.insert(many_logits.end(), logits.begin(), logits.end());
    many.insert(many.end(), requests.begin(), requests.end());
  }
  const std::vector<SampledToken> crowd = run_gpu(many_logits, 13 * rows, vocab, many);
  for (int64_t r = 0; r < 13 * rows; ++r) same(crowd[r], together[r % rows], "416-row batch, row " + std::to_string(r));
}

// Rows the bins cannot split: all logits equal, or two values (more candidates in one bin than the
// gather buffer holds, so the device falls back to its radix select), and 64 adjacent floats (a
// span of 3e-5: bins finer than the floats). Rows 0-4 have equal weights and no top-p, so both
// sides' sums are exact.
SamplingBatch tie_heavy_batch(Rng& rng) {
  const int64_t vocab = 20000;
  const std::vector<SamplingParams> settings = {{1.0f, 0, 1.0f, 1}, {0.7f, 3000, 1.0f, 2}, {1.3f, 50, 1.0f, 3},
                                                {0.0f, 0, 1.0f, 4},  {0.6f, 2500, 1.0f, 5}, {0.6f, 0, 0.95f, 6},
                                                {1.0f, 0, 0.5f, 7},  {1.3f, 50, 0.9f, 8}};
  const int64_t rows = 3 * static_cast<int64_t>(settings.size());
  SamplingBatch b{"tie-heavy", rows, vocab, std::vector<float>(static_cast<size_t>(rows * vocab)), {}};
  b.requests.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    b.requests[r].params = settings[r % settings.size()];
    b.requests[r].params.seed = rng.next();
    b.requests[r].position = static_cast<uint64_t>(r);
    float* row = b.logits.data() + r * vocab;
    const int64_t kind = r / static_cast<int64_t>(settings.size());
    for (int64_t v = 0; v < vocab; ++v) {
      if (kind == 0) row[v] = 0.5f;                                              // all equal
      if (kind == 1) row[v] = rng.next() % 4 == 0 ? 1.0f : -1.0f;                // two values
      if (kind == 2) row[v] = 3.0f + static_cast<float>(rng.next() % 64) * 0x1p-21f;  // 64 adjacent floats
    }
  }
  return b;
}

// Padded rows: ld > vocab, with huge values past the vocabulary that must never be read.
SamplingBatch padded_batch(Rng& rng) {
  const int64_t vocab = 5003, ld = 5008, rows = 16;
  SamplingBatch b{"padded", rows, vocab, rng.uniform(static_cast<size_t>(rows * ld), -8.0, 8.0), {}, ld};
  const std::vector<SamplingParams> settings = {{0.0f, 0, 1.0f, 1}, {1.0f, 0, 1.0f, 2}, {0.6f, 0, 0.95f, 3},
                                                {0.7f, 20, 1.0f, 4}};
  b.requests.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    b.requests[r].params = settings[r % settings.size()];
    b.requests[r].params.seed = rng.next();
    for (int64_t v = vocab; v < ld; ++v) b.logits[r * ld + v] = 1e30f;
  }
  return b;
}

void chi_square(Rng& rng) {
  SCOPED_TRACE("chi-square");
  const std::vector<float> base = {2.0f, 1.5f, 1.4f, 0.3f, -0.5f, 1.0f, -2.0f, 0.9f};
  const int64_t vocab = 8, draws = 20000;
  const SamplingParams params{0.8f, 5, 0.85f, rng.next()};
  // Expected: tempered softmax over the top-5 ids {0, 1, 2, 5, 7}, then the top-p prefix, renormalised.
  const std::vector<int32_t> order = {0, 1, 2, 5, 7};
  std::vector<double> w;
  double sum = 0;
  for (int32_t id : order) sum += w.emplace_back(std::exp((base[id] - base[0]) / 0.8));
  double cumulative = 0;
  size_t keep = order.size();
  for (size_t i = 0; i < order.size(); ++i)
    if ((cumulative += w[i]) / sum >= 0.85) {  // 4 kept: cumulative 0.788, then 0.9005
      keep = i + 1;
      break;
    }
  const double kept = std::accumulate(w.begin(), w.begin() + static_cast<int64_t>(keep), 0.0);
  std::vector<float> logits;
  for (int64_t i = 0; i < draws; ++i) logits.insert(logits.end(), base.begin(), base.end());
  std::vector<SamplingRequest> requests(static_cast<size_t>(draws));
  for (int64_t i = 0; i < draws; ++i) requests[i] = SamplingRequest{params, 3, static_cast<uint64_t>(i)};
  const std::vector<SampledToken> got = run_gpu(logits, draws, vocab, requests);
  std::vector<int64_t> counts(static_cast<size_t>(vocab), 0);
  for (const SampledToken& t : got) {
    ASSERT_TRUE(t.token >= 0 && t.token < vocab) << "token " << t.token;
    ++counts[t.token];
  }
  double chi2 = 0;
  for (size_t i = 0; i < keep; ++i) {
    const double expected = draws * w[i] / kept;
    chi2 += (counts[order[i]] - expected) * (counts[order[i]] - expected) / expected;
  }
  int64_t outside = draws;
  for (size_t i = 0; i < keep; ++i) outside -= counts[order[i]];
  EXPECT_EQ(outside, 0) << "tokens outside the top-k / top-p set were drawn";
  // keep - 1 degrees of freedom (<= 4): chi-square 25 has p < 1e-4 at 4 dof, so a correct
  // sampler fails this about once in 10,000 runs; a wrong distribution of 20,000 draws lands far above.
  EXPECT_LT(chi2, 25.0) << "keep " << keep;
}

void run_cuda() {
  Rng rng = Rng::fresh();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  for (const SamplingBatch& b : batches(rng)) {
    SCOPED_TRACE(b.name + " batch");
    const int64_t decisive = compare_with_reference(b);
    if (b.name == "fixed seeds") {
      EXPECT_GE(decisive, b.rows * 9 / 10) << "too few rows far from a boundary to mean anything";
    }
  }
  {
    SCOPED_TRACE("tie-heavy batch");
    compare_with_reference(tie_heavy_batch(rng), {0, 1, 2, 3, 4});
  }
  {
    SCOPED_TRACE("padded batch");
    EXPECT_GE(compare_with_reference(padded_batch(rng)), 12);
  }
  batch_composition(rng);
  chi_square(rng);
}

}  // namespace

OpCase sampling_case() { return {"sampling", run_cpu, run_cuda}; }

}  // namespace sqlrl::testing
