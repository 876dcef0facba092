// CUDA SwiGLU and embedding gather/scatter-add against the CPU path on bf16-rounded random inputs.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/embedding.h"
#include "kernels/swiglu.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace sqlrl {
namespace {

using namespace sqlrl::testing;

// bf16 outputs against the CPU's unrounded f32: half a bf16 ulp (<= 2^-8 relative) plus expf /
// FMA differences of ~1e-7 relative before the rounding, so 1.01 * 2^-8; atol for values near
// zero (silu(g) u with g or u ~ 0).
constexpr double kBf16Rtol = 1.01 / 256, kAtol = 1e-6;

void check_swiglu(int64_t n, int64_t offset, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "n " << n << " offset " << offset << " seed " << seed);
  Rng rng(seed);
  // offset > 0 shifts every pointer by that many elements: unaligned, so the scalar path runs.
  const size_t total = static_cast<size_t>(n + offset);
  auto gate = round_bf16(rng.uniform(total, -8.0f, 8.0f));
  auto up = round_bf16(rng.uniform(total, -2.0f, 2.0f));
  auto dout = round_bf16(rng.uniform(total, -1.0f, 1.0f));
  std::vector<float> out_ref(static_cast<size_t>(n)), dg_ref(static_cast<size_t>(n)), du_ref(static_cast<size_t>(n));
  swiglu_forward_cpu(out_ref.data(), gate.data() + offset, up.data() + offset, n);
  swiglu_backward_cpu(dg_ref.data(), du_ref.data(), dout.data() + offset, gate.data() + offset, up.data() + offset, n);

  Tensor gg = gpu(gate, DType::BF16), gu = gpu(up, DType::BF16), gd = gpu(dout, DType::BF16);
  Tensor out = poisoned(n + offset, DType::BF16), dg = poisoned(n + offset, DType::BF16),
         du = poisoned(n + offset, DType::BF16);
  swiglu_forward_cuda(bf16_ptr(out) + offset, bf16_ptr(gg) + offset, bf16_ptr(gu) + offset, n, default_stream());
  swiglu_backward_cuda(bf16_ptr(dg) + offset, bf16_ptr(du) + offset, bf16_ptr(gd) + offset, bf16_ptr(gg) + offset,
                       bf16_ptr(gu) + offset, n, default_stream());
  auto tail = [&](const Tensor& t) {
    std::vector<float> v = to_floats(t);
    return std::vector<float>(v.begin() + offset, v.end());
  };
  expect_close(tail(out), out_ref, kAtol, kBf16Rtol, "swiglu out");
  expect_close(tail(dg), dg_ref, kAtol, kBf16Rtol, "swiglu dgate");
  expect_close(tail(du), du_ref, kAtol, kBf16Rtol, "swiglu dup");
}

TEST(CudaSwiglu, MatchesCpuOnOddSizes) {
  SQLRL_REQUIRE_CUDA();
  uint64_t seed = fresh_seed();
  for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{1000}, int64_t{8 * 1024 + 5}}) {
    check_swiglu(n, 0, seed++);
    check_swiglu(n, 3, seed++);
  }
}

TEST(CudaSwiglu, BackwardMayOverwriteItsInputs) {
  SQLRL_REQUIRE_CUDA();
  Rng rng(fresh_seed());
  const int64_t n = 1003;
  auto gate = round_bf16(rng.uniform(n, -4.0f, 4.0f)), up = round_bf16(rng.uniform(n, -2.0f, 2.0f)),
       dout = round_bf16(rng.uniform(n, -1.0f, 1.0f));
  std::vector<float> dg_ref(n), du_ref(n);
  swiglu_backward_cpu(dg_ref.data(), du_ref.data(), dout.data(), gate.data(), up.data(), n);
  Tensor gg = gpu(gate, DType::BF16), gu = gpu(up, DType::BF16), gd = gpu(dout, DType::BF16);
  swiglu_backward_cuda(bf16_ptr(gg), bf16_ptr(gu), bf16_ptr(gd), bf16_ptr(gg), bf16_ptr(gu), n, default_stream());
  expect_close(to_floats(gg), dg_ref, kAtol, kBf16Rtol, "in-place dgate");
  expect_close(to_floats(gu), du_ref, kAtol, kBf16Rtol, "in-place dup");
}

void check_embedding(int64_t num_tokens, int64_t vocab, int64_t dim, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "tokens " << num_tokens << " vocab " << vocab << " dim " << dim << " seed "
                                    << seed);
  Rng rng(seed);
  auto table = round_bf16(rng.uniform(static_cast<size_t>(vocab * dim), -1.0f, 1.0f));
  auto tokens = rng.ints(static_cast<size_t>(num_tokens), 0, static_cast<int32_t>(vocab - 1));
  auto dout = round_bf16(rng.uniform(static_cast<size_t>(num_tokens * dim), -1.0f, 1.0f));
  auto dtable0 = rng.uniform(static_cast<size_t>(vocab * dim), -1.0f, 1.0f);

  std::vector<float> out_ref(static_cast<size_t>(num_tokens * dim));
  embedding_forward_cpu(out_ref.data(), table.data(), tokens.data(), num_tokens, vocab, dim);
  Tensor gtable = gpu(table, DType::BF16), gtokens = gpu_ints(tokens);
  Tensor gout = poisoned(num_tokens * dim, DType::BF16);
  embedding_forward_cuda(bf16_ptr(gout), bf16_ptr(gtable), gtokens.data_as<int32_t>(), num_tokens, vocab, dim,
                         default_stream());
  EXPECT_EQ(to_floats(gout), out_ref) << "embedding forward is a copy of bf16 rows: exact";

  // Backward against float64 sums: f32 sums of k rows are within (k) 2^-24 sum|terms|.
  std::vector<double> want(dtable0.begin(), dtable0.end()), mag(dtable0.size(), 0.0);
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int64_t c = 0; c < dim; ++c) {
      want[tokens[t] * dim + c] += dout[t * dim + c];
      mag[tokens[t] * dim + c] += std::fabs(dout[t * dim + c]);
    }
  Tensor gdout = gpu(dout, DType::BF16), gdtable = gpu(dtable0, DType::F32);
  size_t ws_bytes = embedding_backward_workspace_bytes(num_tokens, vocab);
  Tensor ws = gpu_bytes(ws_bytes);
  embedding_backward_cuda(f32_ptr(gdtable), bf16_ptr(gdout), gtokens.data_as<int32_t>(), num_tokens, vocab, dim,
                          ws.data(), ws_bytes, default_stream());
  std::vector<float> got = to_floats(gdtable);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], (num_tokens + 2) * 0x1p-24 * (mag[i] + std::fabs(dtable0[i]))) << "dtable[" << i << "]";
  // Run twice from the same start: identical bytes (sorted order, fixed sums, no atomics).
  Tensor again = gpu(dtable0, DType::F32);
  embedding_backward_cuda(f32_ptr(again), bf16_ptr(gdout), gtokens.data_as<int32_t>(), num_tokens, vocab, dim,
                          ws.data(), ws_bytes, default_stream());
  std::vector<float> got2 = to_floats(again);
  EXPECT_EQ(std::memcmp(got.data(), got2.data(), got.size() * sizeof(float)), 0) << "backward not repeatable";
}

TEST(CudaEmbedding, MatchesCpuOnOddShapes) {
  SQLRL_REQUIRE_CUDA();
  uint64_t seed = fresh_seed();
  check_embedding(1, 50, 64, seed++);
  check_embedding(17, 50, 17, seed++);    // scalar path
  check_embedding(1000, 50, 64, seed++);  // ~20 repeats per token: long runs in the backward
  check_embedding(1000, 151936, 8, seed++);  // Qwen3's vocabulary: 18-bit sort keys
}

TEST(CudaEmbedding, BadTokenGivesNanRowAndNoGradient) {
  SQLRL_REQUIRE_CUDA();
  const int64_t vocab = 10, dim = 16;
  Rng rng(fresh_seed());
  auto table = round_bf16(rng.uniform(static_cast<size_t>(vocab * dim), -1.0f, 1.0f));
  std::vector<int32_t> tokens = {3, 10, -1, 3};
  // Output starts at zero, so the NaNs seen below are the kernel's.
  Tensor gtable = gpu(table, DType::BF16), gtokens = gpu_ints(tokens),
         gout = gpu(std::vector<float>(4 * dim, 0.0f), DType::BF16);
  embedding_forward_cuda(bf16_ptr(gout), bf16_ptr(gtable), gtokens.data_as<int32_t>(), 4, vocab, dim,
                         default_stream());
  std::vector<float> out = to_floats(gout);
  for (int64_t c = 0; c < dim; ++c) {
    EXPECT_EQ(out[c], table[3 * dim + c]);
    EXPECT_TRUE(std::isnan(out[dim + c]));
    EXPECT_TRUE(std::isnan(out[2 * dim + c]));
  }
  auto dout = round_bf16(rng.uniform(static_cast<size_t>(4 * dim), -1.0f, 1.0f));
  Tensor gdout = gpu(dout, DType::BF16), gdtable = gpu(std::vector<float>(vocab * dim, 0.0f), DType::F32);
  size_t ws_bytes = embedding_backward_workspace_bytes(4, vocab);
  Tensor ws = gpu_bytes(ws_bytes);
  embedding_backward_cuda(f32_ptr(gdtable), bf16_ptr(gdout), gtokens.data_as<int32_t>(), 4, vocab, dim, ws.data(),
                          ws_bytes, default_stream());
  std::vector<float> dtable = to_floats(gdtable);
  for (int64_t v = 0; v < vocab; ++v)
    for (int64_t c = 0; c < dim; ++c) {
      float want = v == 3 ? dout[c] + dout[3 * dim + c] : 0.0f;  // rows 1 and 2 carry bad ids: skipped
      EXPECT_FLOAT_EQ(dtable[v * dim + c], want);
    }
}

}  // namespace
}  // namespace sqlrl
