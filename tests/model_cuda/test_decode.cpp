// The fused, graph-replayed decode step (model/cuda_decode.h) against the unfused path, against
// itself launched without a graph, and against itself in other batches; and, on the CPU (these
// run in CI, where no GPU is), the plans it is built on: the buckets, the few-row product's grid.
//
// Budgets: the fused and the unfused steps are both within the bf16 budget of the CPU's logits
// (test_infer.cpp checks each against the CPU), so they must be within two budgets of each other
// (model_cuda_util.h, cpu_logits_and_budget). Graph replay and batching change nothing: bit for
// bit (same kernels, same arguments; every kernel's row depends on that row only).
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/matmul.h"
#include "model/cuda_decode.h"
#include "model_cuda_util.h"

namespace sqlrl {
namespace {

using namespace sqlrl::testing;

// ---- CPU: the plans --------------------------------------------------------------------------

// Catches: a bucket smaller than the batch (rows would be dropped) or one that changes for
// nothing (more graphs to capture).
TEST(DecodeBuckets, CoverTheBatchAndTheTable) {
  int64_t last = 0;
  for (int64_t rows = 1; rows <= kDecodeMaxRows; ++rows) {
    const int64_t b = decode_rows_bucket(rows);
    EXPECT_GE(b, rows);
    EXPECT_LE(b, kDecodeMaxRows);
    EXPECT_GE(b, last) << "buckets grow with the batch";
    last = b;
  }
  EXPECT_EQ(decode_rows_bucket(1), 1);
  EXPECT_EQ(decode_rows_bucket(3), 4);
  EXPECT_EQ(decode_rows_bucket(33), 40);
  EXPECT_EQ(decode_rows_bucket(65), 80);
  EXPECT_THROW(decode_rows_bucket(kDecodeMaxRows + 1), std::exception);
  for (int64_t blocks : {1, 7, 8, 9, 100, 256, 257}) {
    const int64_t b = decode_blocks_bucket(blocks);
    EXPECT_GE(b, blocks);
    EXPECT_LT(b, 2 * std::max<int64_t>(blocks, 8)) << "at most twice the table";
  }
}

// Catches: splits that leave K uncovered or overlap, a split not a whole number of the kernel's
// 128-wide chunks, or a plan that leaves the device's block slots idle at the Qwen3-4B shapes
// (waves x chunks per split more than 25% over the ideal tiles x chunks / slots). The plan takes
// no M: the batch cannot change the bits.
TEST(MatmulRowsGrid, CoversKAndDependsOnNAndKOnly) {
  struct Case {
    int64_t n, k;
    bool swiglu;
  };
  const int sms = 132;  // an H100 / H200
  for (Case c : {Case{6144, 2560, false}, Case{2560, 4096, false}, Case{19456, 2560, true}, Case{2560, 9728, false},
                 Case{151936, 2560, false}, Case{40, 4096, false}, Case{48, 64, false}, Case{272, 2048, true}}) {
    SCOPED_TRACE(::testing::Message() << "N " << c.n << " K " << c.k << (c.swiglu ? " swiglu" : ""));
    const MatmulRowsGrid g = matmul_rows_grid(c.n, c.k, c.swiglu, sms);
    EXPECT_EQ(g.split_k % kMatmulRowsBlockK, 0);
    EXPECT_GE(g.splits * g.split_k, c.k);
    EXPECT_LT((g.splits - 1) * g.split_k, c.k) << "every split has work";
    const int64_t outputs = c.swiglu ? c.n / 2 : c.n;
    const int64_t per_tile = c.swiglu ? kMatmulRowsBlockRows / 2 : kMatmulRowsBlockRows;
    EXPECT_GE(g.tiles * per_tile, outputs);
    EXPECT_LT((g.tiles - 1) * per_tile, outputs);
    const int64_t slots = kMatmulRowsBlocksPerSm * sms, chunks = (c.k + kMatmulRowsBlockK - 1) / kMatmulRowsBlockK;
    const int64_t waves = (g.tiles * g.splits + slots - 1) / slots;
    const double ideal = static_cast<double>(g.tiles) * chunks / slots;
    if (ideal >= 2.0) {  // a problem too small to fill the slots keeps >= 2 chunks per split instead
      EXPECT_LE(static_cast<double>(waves * (g.split_k / kMatmulRowsBlockK)), 1.25 * ideal + 1.0)
          << g.tiles << " tiles x " << g.splits << " splits of " << g.split_k << " in " << waves << " waves of " << slots;
    }
    // The workspace grows with the rows; the plan does not.
    EXPECT_LT(matmul_rows_workspace_bytes(c.n, c.k, c.swiglu, 1, sms),
              matmul_rows_workspace_bytes(c.n, c.k, c.swiglu, 128, sms) + (g.splits == 1 ? 1 : 0));
  }
}

// ---- CUDA ------------------------------------------------------------------------------------

class CudaDecode : public ::testing::TestWithParam<QwenArch> {};

struct Decoded {
  std::vector<std::vector<float>> logits;  // per step, [rows, V]
};

// A prompt prefilled once, forked `rows` ways, then `steps` decode steps where row r feeds token
// (7 r + 3 s) % V at step s: the same rows and tokens on any cache, so runs compare directly.
// fused_rows: CudaKVCache::decode_fused_rows (-1: rows, the few-row kernels at this batch; 0:
// cuBLASLt's products).
Decoded decode(const CudaModel& m, CudaDecodeMode mode, int64_t rows, int64_t steps, int64_t only_row = -1,
               int64_t fused_rows = -1) {
  const int64_t V = m.config().vocab_size;
  CudaKVCache cache = make_cuda_kv_cache(m, 8 + rows * 4, 4);
  cache.decode_mode = mode;
  cache.decode_fused_rows = fused_rows < 0 ? rows : fused_rows;  // whatever the default crossover
  std::vector<int32_t> prompt;
  for (int i = 0; i < 9; ++i) prompt.push_back(static_cast<int32_t>((31 * i + 5) % V));
  const int64_t root = kv_new_sequence(cache.book);
  Tensor logits;
  forward_cached_cuda(m, cache, {{root, prompt}}, logits);
  std::vector<int64_t> seqs;
  for (int64_t r = 0; r < rows; ++r) seqs.push_back(kv_fork(cache.book, root));
  Decoded out;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<CachedInput> in;
    for (int64_t r = 0; r < rows; ++r)
      if (only_row < 0 || r == only_row) in.push_back({seqs[r], {static_cast<int32_t>((7 * r + 3 * s) % V)}});
    forward_cached_cuda(m, cache, in, logits);
    out.logits.push_back(to_floats(logits));
    EXPECT_EQ(out.logits.back().size(), in.size() * static_cast<size_t>(V));
  }
  return out;
}

// Catches: a graph replay that reads stale inputs (the upload not ordered before it, the pinned
// staging reused too early), a capture that bakes in the first step's values, padding rows that
// write into the cache. Any of these changes logits; replaying the same kernels must not.
TEST_P(CudaDecode, GraphReplayIsBitIdenticalToLaunchingTheKernels) {
  SQLRL_REQUIRE_CUDA();
  CudaModel m = upload_model(random_model(GetParam(), 21));
  for (int64_t rows : {1, 3, 9}) {  // buckets 1, 4 (one padding row) and 16 (seven)
    SCOPED_TRACE(::testing::Message() << rows << " rows");
    const Decoded graphs = decode(m, CudaDecodeMode::graphs, rows, 6);
    const Decoded kernels = decode(m, CudaDecodeMode::kernels, rows, 6);
    for (size_t s = 0; s < graphs.logits.size(); ++s)
      EXPECT_EQ(0, std::memcmp(graphs.logits[s].data(), kernels.logits[s].data(), sizeof(float) * graphs.logits[s].size()))
          << "step " << s;
  }
}

// Catches: a kernel whose row depends on the other rows or on the bucket (a split chosen by M, a
// reduction over the batch, padding that leaks), which would make what a sample draws depend on
// what else is decoding.
TEST_P(CudaDecode, ARowGetsTheSameBitsAloneAndInABatch) {
  SQLRL_REQUIRE_CUDA();
  CudaModel m = upload_model(random_model(GetParam(), 22));
  const int64_t V = m.config().vocab_size, rows = 5, row = 3;
  const Decoded batch = decode(m, CudaDecodeMode::graphs, rows, 4);
  const Decoded alone = decode(m, CudaDecodeMode::graphs, rows, 4, row);
  for (size_t s = 0; s < batch.logits.size(); ++s)
    EXPECT_EQ(0, std::memcmp(batch.logits[s].data() + row * V, alone.logits[s].data(), sizeof(float) * V))
        << "step " << s;
}

// The worst element of a against b over every row and step, in units of `budgets` of the CPU's
// bf16 budget along that row's tokens (the prompt of 9, then its fed tokens: decode()'s inputs).
double worst_budget_ratio(const QwenModel& host, const Decoded& a, const Decoded& b, int64_t rows, int64_t steps,
                          double budgets) {
  const int64_t V = host.config.vocab_size;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> seq;
    for (int i = 0; i < 9; ++i) seq.push_back(static_cast<int32_t>((31 * i + 5) % V));
    for (int64_t s = 0; s < steps; ++s) seq.push_back(static_cast<int32_t>((7 * r + 3 * s) % V));
    LogitsAndBudget cpu = cpu_logits_and_budget(host, seq);
    for (int64_t s = 0; s < steps; ++s)
      worst = std::max(worst, budget_ratio(a.logits[s].data() + r * V, b.logits[s].data() + r * V,
                                           cpu.budget_row(9 + s), V, budgets));
  }
  return worst;
}

// Catches: fused kernels that compute something else than the unfused path (a wrong part of the
// q/k/v product, RoPE or the norm on the wrong rows, a residual not added, swiglu's halves
// swapped): both are within one bf16 budget of the CPU, so within two of each other.
TEST_P(CudaDecode, FusedStepAgreesWithTheUnfusedPath) {
  SQLRL_REQUIRE_CUDA();
  QwenModel host = random_model(GetParam(), 23);
  CudaModel m = upload_model(host);
  const int64_t rows = 3, steps = 4;
  const Decoded fused = decode(m, CudaDecodeMode::graphs, rows, steps);
  const Decoded unfused = decode(m, CudaDecodeMode::unfused, rows, steps);
  const double worst = worst_budget_ratio(host, fused, unfused, rows, steps, 2.0);
  std::printf("fused vs unfused decode: %.3g of two bf16 budgets (budget 1)\n", worst);
  EXPECT_LE(worst, 1.0);
}

// Catches: the GEMM products above the crossover wired wrong (gate and up swapped, the residual
// overwritten instead of added, q/k/v columns misplaced, a stale graph of the other kind replayed):
// within two bf16 budgets of the few-row kernels, and their graph replay bit-identical to launches.
TEST_P(CudaDecode, GemmProductsAgreeWithTheFewRowKernels) {
  SQLRL_REQUIRE_CUDA();
  QwenModel host = random_model(GetParam(), 25);
  CudaModel m = upload_model(host);
  const int64_t rows = 3, steps = 4;
  const Decoded fused = decode(m, CudaDecodeMode::graphs, rows, steps);
  const Decoded gemms = decode(m, CudaDecodeMode::graphs, rows, steps, -1, 0);
  const Decoded gemms_launched = decode(m, CudaDecodeMode::kernels, rows, steps, -1, 0);
  const double worst = worst_budget_ratio(host, gemms, fused, rows, steps, 2.0);
  std::printf("GEMM products vs few-row kernels: %.3g of two bf16 budgets (budget 1)\n", worst);
  EXPECT_LE(worst, 1.0);
  for (size_t s = 0; s < gemms.logits.size(); ++s)
    EXPECT_EQ(0, std::memcmp(gemms.logits[s].data(), gemms_launched.logits[s].data(), sizeof(float) * gemms.logits[s].size()))
        << "step " << s;
}

// Catches: a step of more rows than one graph takes (kDecodeMaxRows) that drops or misplaces
// the chunks' logits.
TEST_P(CudaDecode, MoreRowsThanOneStepTakesRunAsSeveral) {
  SQLRL_REQUIRE_CUDA();
  CudaModel m = upload_model(random_model(GetParam(), 24));
  const int64_t V = m.config().vocab_size, rows = kDecodeMaxRows + 9;
  const Decoded all = decode(m, CudaDecodeMode::graphs, rows, 2);
  for (int64_t row : {int64_t{0}, kDecodeMaxRows - 1, kDecodeMaxRows, rows - 1}) {
    const Decoded alone = decode(m, CudaDecodeMode::graphs, rows, 2, row);
    for (size_t s = 0; s < all.logits.size(); ++s)
      EXPECT_EQ(0, std::memcmp(all.logits[s].data() + row * V, alone.logits[s].data(), sizeof(float) * V))
          << "row " << row << " step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Arch, CudaDecode, ::testing::Values(QwenArch::Qwen2, QwenArch::Qwen3),
                         [](const auto& info) { return info.param == QwenArch::Qwen2 ? "Qwen2" : "Qwen3"; });

}  // namespace
}  // namespace sqlrl
