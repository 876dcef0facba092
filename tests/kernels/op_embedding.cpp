// embedding (kernels/embedding.h): the row gather and its scatter-add backward (dtable
// accumulates, repeated tokens add up), on the CPU and on CUDA; bad token ids: an error on the
// CPU, a NaN row and no gradient on CUDA.
//
// Shapes: the registry's 13 tokens over a vocabulary of 10 (repeats; checked by finite
// differences), one token, an odd dim (CUDA's scalar path), 1000 tokens over 50 ids (~20
// repeats each: long runs in the CUDA backward's sorted order), and Qwen3's vocabulary (151,936
// ids: 18-bit sort keys).
//
// Tolerances. The forward is a copy: exact on both backends. The backward is a sum of k rows per
// table row (k repeats, plus the start): an f32 sum of k terms in any order is within (k - 1)
// u_f32 sum|terms| of the exact sum (recursive summation bound), so (tokens + 2) u_f32
// (sum|dout| + |start|) per element, u_f32 = 2^-24, on both backends (CUDA adds bf16 dout rows
// in f32: the same bound).
#include "kernels/embedding.h"
#include "tests/kernels/cases.h"

namespace sqlrl::testing {
namespace {

struct EmbeddingShape {
  int64_t tokens, vocab, dim;
  std::vector<int32_t> ids;  // empty: random
  bool finite_differences = false;
};

const std::vector<EmbeddingShape> kShapes = {
    {13, 10, 6, {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9}, true},
    {1, 50, 64, {}},
    {17, 50, 17, {}},
    {1000, 50, 64, {}},
    {1000, 151936, 8, {}},
};

struct EmbeddingInputs {
  std::vector<float> table, dout, dtable0;
  std::vector<int32_t> tokens;
};

EmbeddingInputs make_inputs(Rng& rng, const EmbeddingShape& s, Precision p) {
  EmbeddingInputs in;
  in.table = rng.uniform(static_cast<size_t>(s.vocab * s.dim), -1.0, 1.0, p);
  in.tokens = s.ids.empty() ? rng.ints(static_cast<size_t>(s.tokens), 0, static_cast<int32_t>(s.vocab - 1)) : s.ids;
  in.dout = rng.uniform(static_cast<size_t>(s.tokens * s.dim), -1.0, 1.0, p);
  in.dtable0 = rng.uniform(static_cast<size_t>(s.vocab * s.dim), -1.0, 1.0);
  return in;
}

std::string describe(const EmbeddingShape& s, const Rng& rng) {
  return "tokens " + std::to_string(s.tokens) + " vocab " + std::to_string(s.vocab) + " dim " + std::to_string(s.dim) +
         " seed " + std::to_string(rng.seed());
}

void expect_backward_within_summation_bound(const std::vector<float>& got, const EmbeddingInputs& in,
                                            const EmbeddingShape& s) {
  std::vector<double> want = widen(in.dtable0), mag;
  ref_embedding_backward(want, mag, widen(in.dout), in.tokens, s.dim);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double budget = (s.tokens + 2) * unit_roundoff(Precision::F32) * (mag[i] + std::fabs(in.dtable0[i]));
    ASSERT_NEAR(got[i], want[i], budget) << "dtable[" << i << "]";
    if (budget > 0) worst = std::max(worst, std::fabs(got[i] - want[i]) / budget);
  }
  worst_budget_ratio() = std::max(worst_budget_ratio(), worst);
}

void run_cpu() {
  for (const EmbeddingShape& s : kShapes) {
    Rng rng(42);
    SCOPED_TRACE(describe(s, rng));
    const EmbeddingInputs in = make_inputs(rng, s, Precision::F32);
    const std::vector<double> want = ref_embedding(widen(in.table), in.tokens, s.dim);
    std::vector<float> out(static_cast<size_t>(s.tokens * s.dim), NAN);
    embedding_forward_cpu(out.data(), in.table.data(), in.tokens.data(), s.tokens, s.vocab, s.dim);
    EXPECT_EQ(widen(out), want) << "the forward is a copy of table rows: exact";
    std::vector<float> dtable = in.dtable0;
    embedding_backward_cpu(dtable.data(), in.dout.data(), in.tokens.data(), s.tokens, s.vocab, s.dim);
    expect_backward_within_summation_bound(dtable, in, s);

    if (s.finite_differences) {
      std::vector<double> grad(in.table.size(), 0.0), mag;
      ref_embedding_backward(grad, mag, widen(in.dout), in.tokens, s.dim);
      expect_matches_finite_differences(
          grad,
          finite_differences(
              widen(in.table),
              [&](const std::vector<double>& t) { return dot(ref_embedding(t, in.tokens, s.dim), widen(in.dout)); }),
          "float64 dtable");
    }
  }
  // A token outside the vocabulary is an error, in either direction.
  const std::vector<float> table(10 * 4, 1.0f), dout(2 * 4, 1.0f);
  std::vector<float> out(2 * 4), dtable(10 * 4);
  for (int32_t bad : {10, -1}) {
    const std::vector<int32_t> tokens = {3, bad};
    EXPECT_THROW(embedding_forward_cpu(out.data(), table.data(), tokens.data(), 2, 10, 4), std::exception) << bad;
    EXPECT_THROW(embedding_backward_cpu(dtable.data(), dout.data(), tokens.data(), 2, 10, 4), std::exception) << bad;
  }
}

void run_cuda() {
  uint64_t seed = fresh_seed();
  for (const EmbeddingShape& s : kShapes) {
    Rng rng(seed++);
    SCOPED_TRACE(describe(s, rng));
    const EmbeddingInputs in = make_inputs(rng, s, Precision::BF16);
    Tensor gtable = gpu(in.table, DType::BF16), gtokens = gpu_ints(in.tokens);
    Tensor gout = poisoned(s.tokens * s.dim, DType::BF16);
    embedding_forward_cuda(bf16_ptr(gout), bf16_ptr(gtable), gtokens.data_as<int32_t>(), s.tokens, s.vocab, s.dim,
                           default_stream());
    EXPECT_EQ(widen(to_floats(gout)), ref_embedding(widen(in.table), in.tokens, s.dim))
        << "the forward is a copy of bf16 rows: exact";

    Tensor gdout = gpu(in.dout, DType::BF16), gdtable = gpu(in.dtable0, DType::F32);
    const size_t ws_bytes = embedding_backward_workspace_bytes(s.tokens, s.vocab);
    Tensor ws = gpu_bytes(ws_bytes);
    embedding_backward_cuda(f32_ptr(gdtable), bf16_ptr(gdout), gtokens.data_as<int32_t>(), s.tokens, s.vocab, s.dim,
                            ws.data(), ws_bytes, default_stream());
    const std::vector<float> got = to_floats(gdtable);
    expect_backward_within_summation_bound(got, in, s);
    // Run twice from the same start: identical bytes (sorted order, fixed sums, no atomics).
    Tensor again = gpu(in.dtable0, DType::F32);
    embedding_backward_cuda(f32_ptr(again), bf16_ptr(gdout), gtokens.data_as<int32_t>(), s.tokens, s.vocab, s.dim,
                            ws.data(), ws_bytes, default_stream());
    const std::vector<float> got2 = to_floats(again);
    EXPECT_EQ(std::memcmp(got.data(), got2.data(), got.size() * sizeof(float)), 0) << "backward not repeatable";
  }

  // A bad token id gets a NaN row (a device kernel cannot throw) and no gradient.
  const int64_t vocab = 10, dim = 16;
  Rng rng(seed);
  SCOPED_TRACE("bad token ids, seed " + std::to_string(rng.seed()));
  const std::vector<float> table = rng.uniform(static_cast<size_t>(vocab * dim), -1.0, 1.0, Precision::BF16);
  const std::vector<int32_t> tokens = {3, 10, -1, 3};
  // Output starts at zero, so the NaNs seen below are the kernel's.
  Tensor gtable = gpu(table, DType::BF16), gtokens = gpu_ints(tokens),
         gout = gpu(std::vector<float>(4 * dim, 0.0f), DType::BF16);
  embedding_forward_cuda(bf16_ptr(gout), bf16_ptr(gtable), gtokens.data_as<int32_t>(), 4, vocab, dim, default_stream());
  const std::vector<float> out = to_floats(gout);
  for (int64_t c = 0; c < dim; ++c) {
    EXPECT_EQ(out[c], table[3 * dim + c]);
    EXPECT_TRUE(std::isnan(out[dim + c]));
    EXPECT_TRUE(std::isnan(out[2 * dim + c]));
  }
  const std::vector<float> dout = rng.uniform(static_cast<size_t>(4 * dim), -1.0, 1.0, Precision::BF16);
  Tensor gdout = gpu(dout, DType::BF16), gdtable = gpu(std::vector<float>(vocab * dim, 0.0f), DType::F32);
  const size_t ws_bytes = embedding_backward_workspace_bytes(4, vocab);
  Tensor ws = gpu_bytes(ws_bytes);
  embedding_backward_cuda(f32_ptr(gdtable), bf16_ptr(gdout), gtokens.data_as<int32_t>(), 4, vocab, dim, ws.data(),
                          ws_bytes, default_stream());
  const std::vector<float> dtable = to_floats(gdtable);
  for (int64_t v = 0; v < vocab; ++v)
    for (int64_t c = 0; c < dim; ++c) {
      const float want = v == 3 ? dout[c] + dout[3 * dim + c] : 0.0f;  // rows 1 and 2 carry bad ids: skipped
      EXPECT_FLOAT_EQ(dtable[v * dim + c], want);
    }
}

}  // namespace

OpCase embedding_case() { return {"embedding", run_cpu, run_cuda}; }

}  // namespace sqlrl::testing
