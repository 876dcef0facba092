// CUDA flash attention (forward, backward) and paged decode attention against the CPU kernels.
// Inputs are fresh random normals each run (the seed is printed on failure), rounded to bf16
// once and fed to both paths, so the comparison measures only the CUDA path's own roundings.
// Outputs are filled with NaN before each call: an element left unwritten fails.
//
// Tolerances. The CUDA forward rounds P to bf16 before P V (relative error 2^-9 per weight)
// and rounds its output to bf16 (2^-9); the backward also rounds dS to bf16 before dK and dQ.
// Each is a relative perturbation of 2^-9 ~ 2e-3 per term, so the relative L2 error of a tensor
// sits near 2e-3..4e-3 (a CPU emulation of these kernels measured 1.7e-3..3.2e-3); we allow
// 1e-2 (METHOD.md's upper end for bf16 operands). The check runs per sequence, so a wrong
// short sequence cannot hide inside a long one, with an absolute floor per element of
// max(2^-8 x the tensor's RMS, 1e-4): some exact gradients are 0 (dq and dk of a length-1
// sequence: dS = dout . v - dout . out with out = v), and what both sides compute there is fp32
// cancellation noise (~2^-24 x D x |dout| |v| ~ 1e-6 after the 1/sqrt(D) scale), where a
// relative error means nothing; 1e-4 is ~1e-3 of a typical gradient element. Paged decode
// keeps P in fp32, only its output is rounded (2^-9 relative, RMS ~1.2e-3), so it gets 5e-3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "kernels/attention.h"
#include "runtime/tensor.h"
#include "tests/test_util.h"

namespace sqlrl {
namespace {

struct Rng {
  uint64_t seed;
  std::mt19937_64 gen;
  Rng() : seed(std::random_device{}() * 0x9e3779b97f4a7c15ull ^ std::random_device{}()), gen(seed) {}
  // bf16-rounded normals: exactly representable in the bf16 tensors the GPU reads.
  std::vector<float> normal(size_t n, float stddev) {
    std::normal_distribution<float> dist(0.0f, stddev);
    std::vector<float> x(n);
    for (float& v : x) v = bf16_bits_to_f32(f32_to_bf16_bits(dist(gen)));
    return x;
  }
};

Tensor to_gpu_bf16(const std::vector<float>& x, Shape shape) { return from_floats(x, shape, DType::BF16, cuda_device(0)); }

Tensor poisoned(Shape shape, DType dtype) {
  Tensor t = empty(shape, dtype, cuda_device(0));
  fill(t, NAN);
  return t;
}

// Checks rows [begin, end) x row_len of got against ref: every element finite and
// ||got - ref|| <= rel * ||ref|| + max(2^-8 * rms, 1e-4) * sqrt(n).
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, int64_t row_len,
                  const std::vector<int32_t>& cu, double rel, const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double total = 0;
  for (float r : ref) total += static_cast<double>(r) * r;
  double rms = std::sqrt(total / std::max<size_t>(1, ref.size()));
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    size_t b = static_cast<size_t>(cu[s] * row_len), e = static_cast<size_t>(cu[s + 1] * row_len);
    double err = 0, norm = 0;
    for (size_t i = b; i < e; ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << what << ": element " << i << " (sequence " << s << ") is " << got[i];
      double d = static_cast<double>(got[i]) - ref[i];
      err += d * d;
      norm += static_cast<double>(ref[i]) * ref[i];
    }
    double budget = rel * std::sqrt(norm) + std::max(0x1p-8 * rms, 1e-4) * std::sqrt(static_cast<double>(e - b));
    EXPECT_LE(std::sqrt(err), budget) << what << ": sequence " << s << " of length " << cu[s + 1] - cu[s]
                                      << ", relative L2 error " << std::sqrt(err / std::max(norm, 1e-30));
  }
}

std::vector<int32_t> prefix(const std::vector<int32_t>& lens) {
  std::vector<int32_t> cu(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i) cu[i + 1] = cu[i] + lens[i];
  return cu;
}

struct Problem {
  std::vector<int32_t> lens;
  int64_t heads, kv_heads, head_dim;
  std::vector<int32_t> prefix_seq = {}, prefix_len = {};  // shared prefixes (kernels/attention.h); empty: none
};

std::string describe(const Problem& p, uint64_t seed) {
  std::string lens;
  for (int32_t l : p.lens) lens += std::to_string(l) + " ";
  std::string shared;
  for (size_t s = 0; s < p.prefix_seq.size(); ++s)
    if (p.prefix_seq[s] >= 0)
      shared += " seq " + std::to_string(s) + " shares " + std::to_string(p.prefix_len[s]) + " of seq " +
                std::to_string(p.prefix_seq[s]) + ";";
  return "lens [ " + lens + "] heads " + std::to_string(p.heads) + " kv_heads " + std::to_string(p.kv_heads) +
         " head_dim " + std::to_string(p.head_dim) + shared + " seed " + std::to_string(seed);
}

void run_forward_backward(const Problem& p, bool backward) {
  Rng rng;
  SCOPED_TRACE(describe(p, rng.seed));
  std::vector<int32_t> cu = prefix(p.lens);
  const int64_t T = cu.back(), H = p.heads, KVH = p.kv_heads, D = p.head_dim;
  const int64_t S = static_cast<int64_t>(p.lens.size());
  const int64_t max_len = *std::max_element(p.lens.begin(), p.lens.end());
  AttentionShape shape{H, KVH, D};
  std::vector<float> q = rng.normal(T * H * D, 1.0f), k = rng.normal(T * KVH * D, 1.5f),
                     v = rng.normal(T * KVH * D, 1.0f);
  Tensor gq = to_gpu_bf16(q, {T, H, D}), gk = to_gpu_bf16(k, {T, KVH, D}), gv = to_gpu_bf16(v, {T, KVH, D});
  Tensor gcu = from_ints(cu, {S + 1}, cuda_device(0));
  SharedPrefixes pre;
  SharedPrefixesCuda gpre;
  Tensor gpre_seq, gpre_len, goffsets, gsharers;
  if (!p.prefix_seq.empty()) {
    pre = {p.prefix_seq.data(), p.prefix_len.data()};
    std::vector<int32_t> offsets, sharers;
    shared_prefix_sharers(pre, cu.data(), S, offsets, sharers);
    sharers.push_back(-1);  // never read: keeps the tensor non-empty
    gpre_seq = from_ints(p.prefix_seq, {S}, cuda_device(0));
    gpre_len = from_ints(p.prefix_len, {S}, cuda_device(0));
    goffsets = from_ints(offsets, {S + 1}, cuda_device(0));
    gsharers = from_ints(sharers, {static_cast<int64_t>(sharers.size())}, cuda_device(0));
    gpre = {gpre_seq.data_as<int32_t>(), gpre_len.data_as<int32_t>(), goffsets.data_as<int32_t>(),
            gsharers.data_as<int32_t>()};
  }
  Tensor gout = poisoned({T, H, D}, DType::BF16), glse = poisoned({T, H}, DType::F32);
  attention_forward_cuda(gout.data_as<uint16_t>(), glse.data_as<float>(), gq.data_as<uint16_t>(),
                         gk.data_as<uint16_t>(), gv.data_as<uint16_t>(), gcu.data_as<int32_t>(), S, max_len, shape, {},
                         gpre);
  std::vector<float> out = to_floats(gout), lse = to_floats(glse);

  std::vector<float> ref_out(q.size()), ref_lse(static_cast<size_t>(T * H));
  attention_forward_cpu(ref_out.data(), ref_lse.data(), q.data(), k.data(), v.data(), cu.data(), S, shape, pre);
  expect_close(out, ref_out, H * D, cu, 1e-2, "out");
  // lse comes from fp32 sums of exact bf16 products on both sides: differences ~1e-6.
  for (size_t i = 0; i < lse.size(); ++i)
    ASSERT_NEAR(lse[i], ref_lse[i], 1e-3) << "lse row " << i / H << " head " << i % H;
  if (!backward) return;

  std::vector<float> dout = rng.normal(T * H * D, 1.0f);
  Tensor gdout = to_gpu_bf16(dout, {T, H, D});
  Tensor gdq = poisoned({T, H, D}, DType::BF16), gdk = poisoned({T, KVH, D}, DType::BF16),
         gdv = poisoned({T, KVH, D}, DType::BF16);
  size_t ws_bytes = attention_backward_workspace_bytes(T, shape);
  Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4) + 1}, DType::F32, cuda_device(0));
  auto run = [&] {
    attention_backward_cuda(gdq.data_as<uint16_t>(), gdk.data_as<uint16_t>(), gdv.data_as<uint16_t>(),
                            gdout.data_as<uint16_t>(), gout.data_as<uint16_t>(), glse.data_as<float>(),
                            gq.data_as<uint16_t>(), gk.data_as<uint16_t>(), gv.data_as<uint16_t>(),
                            gcu.data_as<int32_t>(), S, T, max_len, shape, ws.data(), ws_bytes, {}, gpre);
  };
  run();
  std::vector<float> dq = to_floats(gdq), dk = to_floats(gdk), dv = to_floats(gdv);
  // The CPU backward sees the GPU's own out (bf16) and lse, so delta = rowsum(dout * out) agrees.
  std::vector<float> ref_dq(q.size()), ref_dk(k.size()), ref_dv(v.size());
  attention_backward_cpu(ref_dq.data(), ref_dk.data(), ref_dv.data(), dout.data(), out.data(), lse.data(), q.data(),
                         k.data(), v.data(), cu.data(), S, shape, pre);
  expect_close(dq, ref_dq, H * D, cu, 1e-2, "dq");
  expect_close(dk, ref_dk, KVH * D, cu, 1e-2, "dk");
  expect_close(dv, ref_dv, KVH * D, cu, 1e-2, "dv");

  // Deterministic: a second run gives the same bits.
  fill(gdq, NAN);
  fill(gdk, NAN);
  run();
  std::vector<float> dq2 = to_floats(gdq), dk2 = to_floats(gdk);
  EXPECT_EQ(0, std::memcmp(dq.data(), dq2.data(), dq.size() * 4)) << "dq differs between two runs";
  EXPECT_EQ(0, std::memcmp(dk.data(), dk2.data(), dk.size() * 4)) << "dk differs between two runs";
}

TEST(AttentionCuda, ForwardOddLengthsGqaAndHeadDims) {
  SQLRL_REQUIRE_CUDA();
  for (int64_t D : {64, 128})
    for (int64_t ratio : {1, 2, 4})
      for (int32_t len : {1, 17, 1000}) run_forward_backward({{len}, 4, 4 / ratio, D}, false);
}

TEST(AttentionCuda, ForwardVarlenWithEmptyAndLengthOneSequences) {
  SQLRL_REQUIRE_CUDA();
  for (int64_t D : {64, 128})
    for (int64_t ratio : {1, 2, 4}) run_forward_backward({{0, 1, 17, 0, 130, 1, 64, 200, 0}, 8, 8 / ratio, D}, false);
}

TEST(AttentionCuda, BackwardOddLengthsGqaAndHeadDims) {
  SQLRL_REQUIRE_CUDA();
  for (int64_t D : {64, 128})
    for (int64_t ratio : {1, 2, 4})
      for (int32_t len : {1, 17, 300}) run_forward_backward({{len}, 4, 4 / ratio, D}, true);
  run_forward_backward({{1000}, 4, 1, 128}, true);
}

TEST(AttentionCuda, BackwardVarlenWithEmptyAndLengthOneSequences) {
  SQLRL_REQUIRE_CUDA();
  for (int64_t D : {64, 128})
    for (int64_t ratio : {1, 2, 4}) run_forward_backward({{0, 1, 17, 0, 130, 1, 64, 200, 0}, 8, 8 / ratio, D}, true);
}

// A GRPO group's prompt stored once: sharers of the whole prompt, of part of it (tile-aligned
// or not, one token), an empty sharer, two prefix owners; the prefix's dk/dv rows collect every
// sharer's gradient (the CPU adds them, sharers ascending, in float32).
TEST(AttentionCuda, SharedPrefixesMatchTheCpu) {
  SQLRL_REQUIRE_CUDA();
  for (int64_t D : {64, 128})
    for (int64_t ratio : {1, 4}) {
      run_forward_backward({{300, 40, 0, 280, 5, 1, 17}, 4, 4 / ratio, D, {-1, 0, 0, 0, 0, 0, -1},
                            {0, 300, 300, 256, 1, 129, 0}},
                           true);
      run_forward_backward({{200, 30, 150, 20, 64}, 4, 4 / ratio, D, {-1, 0, -1, 2, 0}, {0, 130, 0, 150, 64}}, true);
    }
}

// max_seqlen sizes the grid and cannot be checked against device-side cu_seqlens. With 100
// for a 300-token sequence, the forward's one 128-row tile and the backward's two 64-row tiles
// cover rows 0..127, which must still be right (causal: a row never sees later rows; the
// backward's covered keys still collect every query); rows 128..299 must come back NaN.
TEST(AttentionCuda, PastMaxSeqlenRowsAreNaNAndTheRestIsRight) {
  SQLRL_REQUIRE_CUDA();
  const int64_t T = 300, H = 2, KVH = 1, D = 64, max_seqlen = 100, covered = 128;
  AttentionShape shape{H, KVH, D};
  Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed));
  std::vector<float> q = rng.normal(T * H * D, 1.0f), k = rng.normal(T * KVH * D, 1.5f),
                     v = rng.normal(T * KVH * D, 1.0f), dout = rng.normal(T * H * D, 1.0f);
  std::vector<int32_t> cu = {0, static_cast<int32_t>(T)}, cu_covered = {0, static_cast<int32_t>(covered)};
  Tensor gq = to_gpu_bf16(q, {T, H, D}), gk = to_gpu_bf16(k, {T, KVH, D}), gv = to_gpu_bf16(v, {T, KVH, D});
  Tensor gdout = to_gpu_bf16(dout, {T, H, D}), gcu = from_ints(cu, {2}, cuda_device(0));
  auto forward = [&](const Tensor& out, const Tensor& lse, int64_t max_len) {
    attention_forward_cuda(out.data_as<uint16_t>(), lse.data_as<float>(), gq.data_as<uint16_t>(),
                           gk.data_as<uint16_t>(), gv.data_as<uint16_t>(), gcu.data_as<int32_t>(), 1, max_len, shape);
  };
  auto head = [](const std::vector<float>& x, int64_t n) { return std::vector<float>(x.begin(), x.begin() + n); };

  Tensor gout = poisoned({T, H, D}, DType::BF16), glse = poisoned({T, H}, DType::F32);
  forward(gout, glse, max_seqlen);
  std::vector<float> out = to_floats(gout), lse = to_floats(glse);
  for (int64_t i = covered * H * D; i < T * H * D; ++i) ASSERT_TRUE(std::isnan(out[i])) << "out " << i;
  for (int64_t i = covered * H; i < T * H; ++i) ASSERT_TRUE(std::isnan(lse[i])) << "lse " << i;
  std::vector<float> ref_out(static_cast<size_t>(covered * H * D)), ref_lse(static_cast<size_t>(covered * H));
  attention_forward_cpu(ref_out.data(), ref_lse.data(), q.data(), k.data(), v.data(), cu_covered.data(), 1, shape);
  expect_close(head(out, covered * H * D), ref_out, H * D, cu_covered, 1e-2, "covered out");

  // The backward gets a complete forward (its own max_seqlen is what is under test).
  forward(gout, glse, T);
  out = to_floats(gout);
  lse = to_floats(glse);
  Tensor gdq = poisoned({T, H, D}, DType::BF16), gdk = poisoned({T, KVH, D}, DType::BF16),
         gdv = poisoned({T, KVH, D}, DType::BF16);
  size_t ws_bytes = attention_backward_workspace_bytes(T, shape);
  Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4) + 1}, DType::F32, cuda_device(0));
  attention_backward_cuda(gdq.data_as<uint16_t>(), gdk.data_as<uint16_t>(), gdv.data_as<uint16_t>(),
                          gdout.data_as<uint16_t>(), gout.data_as<uint16_t>(), glse.data_as<float>(),
                          gq.data_as<uint16_t>(), gk.data_as<uint16_t>(), gv.data_as<uint16_t>(),
                          gcu.data_as<int32_t>(), 1, T, max_seqlen, shape, ws.data(), ws_bytes);
  std::vector<float> dq = to_floats(gdq), dk = to_floats(gdk), dv = to_floats(gdv);
  for (int64_t i = covered * H * D; i < T * H * D; ++i) ASSERT_TRUE(std::isnan(dq[i])) << "dq " << i;
  for (int64_t i = covered * KVH * D; i < T * KVH * D; ++i) ASSERT_TRUE(std::isnan(dk[i]) && std::isnan(dv[i])) << i;
  std::vector<float> ref_dq(q.size()), ref_dk(k.size()), ref_dv(v.size());
  attention_backward_cpu(ref_dq.data(), ref_dk.data(), ref_dv.data(), dout.data(), out.data(), lse.data(), q.data(),
                         k.data(), v.data(), cu.data(), 1, shape);
  expect_close(head(dq, covered * H * D), head(ref_dq, covered * H * D), H * D, cu_covered, 1e-2, "covered dq");
  expect_close(head(dk, covered * KVH * D), head(ref_dk, covered * KVH * D), KVH * D, cu_covered, 1e-2, "covered dk");
  expect_close(head(dv, covered * KVH * D), head(ref_dv, covered * KVH * D), KVH * D, cu_covered, 1e-2, "covered dv");
}

TEST(AttentionCuda, RejectsUnsupportedHeadDim) {
  SQLRL_REQUIRE_CUDA();
  EXPECT_THROW(attention_forward_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1, {4, 4, 96}),
               std::exception);
}

// Paged decode: contexts around the block size (16) and split sizes, caches scattered over a
// shuffled block pool, and a batch that mixes short and long contexts.
void run_paged(const std::vector<int32_t>& contexts, int64_t H, int64_t KVH, int64_t D, int64_t split_tokens) {
  Rng rng;
  std::string ctx;
  for (int32_t c : contexts) ctx += std::to_string(c) + " ";
  SCOPED_TRACE("contexts [ " + ctx + "] heads " + std::to_string(H) + " kv_heads " + std::to_string(KVH) +
               " head_dim " + std::to_string(D) + " split " + std::to_string(split_tokens) + " seed " +
               std::to_string(rng.seed));
  const int64_t N = static_cast<int64_t>(contexts.size()), bs = 16;
  const int64_t max_context = *std::max_element(contexts.begin(), contexts.end());
  const int64_t max_blocks = (max_context + bs - 1) / bs + 1;  // one spare column, never read
  int64_t used = 0;
  for (int32_t c : contexts) used += (c + bs - 1) / bs;
  const int64_t num_blocks = used + 3;
  std::vector<int32_t> pool(static_cast<size_t>(num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng.gen);
  std::vector<int32_t> table(static_cast<size_t>(N * max_blocks), -1), positions(static_cast<size_t>(N));
  size_t next = 0;
  for (int64_t i = 0; i < N; ++i) {
    positions[i] = contexts[i] - 1;
    for (int64_t b = 0; b < (contexts[i] + bs - 1) / bs; ++b) table[i * max_blocks + b] = pool[next++];
  }
  std::vector<float> q = rng.normal(N * H * D, 1.0f), kc = rng.normal(num_blocks * bs * KVH * D, 1.5f),
                     vc = rng.normal(num_blocks * bs * KVH * D, 1.0f);
  AttentionShape shape{H, KVH, D};
  PagedQueries host{N, table.data(), max_blocks, positions.data(), bs};
  std::vector<float> ref(q.size());
  paged_attention_cpu(ref.data(), q.data(), kc.data(), vc.data(), host, shape);

  Tensor gq = to_gpu_bf16(q, {N, H, D}), gk = to_gpu_bf16(kc, {num_blocks * bs, KVH, D}),
         gv = to_gpu_bf16(vc, {num_blocks * bs, KVH, D});
  Tensor gtable = from_ints(table, {N, max_blocks}, cuda_device(0)), gpos = from_ints(positions, {N}, cuda_device(0));
  Tensor gout = poisoned({N, H, D}, DType::BF16);
  size_t ws_bytes = paged_attention_workspace_bytes(N, shape, max_context, split_tokens);
  Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4) + 1}, DType::F32, cuda_device(0));
  fill(ws, NAN);  // a split the reduce reads but nothing wrote would show
  PagedQueries dev{N, gtable.data_as<int32_t>(), max_blocks, gpos.data_as<int32_t>(), bs};
  paged_attention_cuda(gout.data_as<uint16_t>(), gq.data_as<uint16_t>(), gk.data_as<uint16_t>(),
                       gv.data_as<uint16_t>(), dev, shape, max_context, ws.data(), ws_bytes, split_tokens);
  std::vector<int32_t> cu(static_cast<size_t>(N + 1));
  std::iota(cu.begin(), cu.end(), 0);  // one "sequence" per query: checked query by query
  expect_close(to_floats(gout), ref, H * D, cu, 5e-3, "paged out");
}

TEST(AttentionCuda, PagedDecodeAcrossBlocksAndSplits) {
  SQLRL_REQUIRE_CUDA();
  const std::vector<int32_t> contexts = {1, 16, 17, 63, 64, 65, 200, 1, 700};
  for (int64_t D : {64, 128})
    for (int64_t ratio : {1, 2, 4}) {
      run_paged(contexts, 8, 8 / ratio, D, 64);              // many splits per context
      run_paged(contexts, 8, 8 / ratio, D, 512);             // one or two splits
      run_paged(contexts, 8, 8 / ratio, D, 1 << 20);         // never split: no workspace
    }
  run_paged({1300, 5, 2049}, 8, 2, 128, kPagedSplitTokens);  // the default split
}

TEST(AttentionCuda, PagedDecodeLargeAndUnevenGroups) {
  SQLRL_REQUIRE_CUDA();
  run_paged({1, 33, 300}, 16, 1, 128, 64);  // group 16: two chunks of 8 q heads per kv head
  run_paged({1, 33, 300}, 12, 2, 64, 64);   // group 6: a partial chunk
  run_paged({1, 33, 300}, 28, 4, 128, 64);  // group 7 (Qwen2.5-7B's 28 / 4)
}

// A position past the max_context the grid was sized for cannot be checked on the host (the
// positions live on the device); the kernel marks that query's output NaN instead of returning
// attention over a truncated context. The other query is unaffected.
TEST(AttentionCuda, PagedDecodePastMaxContextGivesNaN) {
  SQLRL_REQUIRE_CUDA();
  const int64_t N = 2, H = 4, KVH = 2, D = 64, bs = 16, max_blocks = 8, split = 16, max_context = 40;
  std::vector<int32_t> table(static_cast<size_t>(N * max_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> positions = {99, 20};  // 100 keys need 7 splits of 16; the grid has 3
  Rng rng;
  Tensor gq = to_gpu_bf16(rng.normal(N * H * D, 1.0f), {N, H, D});
  Tensor gk = to_gpu_bf16(rng.normal(N * max_blocks * bs * KVH * D, 1.0f), {N * max_blocks * bs, KVH, D});
  Tensor gv = to_gpu_bf16(rng.normal(N * max_blocks * bs * KVH * D, 1.0f), {N * max_blocks * bs, KVH, D});
  Tensor gtable = from_ints(table, {N, max_blocks}, cuda_device(0)), gpos = from_ints(positions, {N}, cuda_device(0));
  Tensor gout = empty({N, H, D}, DType::BF16, cuda_device(0));
  fill(gout, 0.0f);
  AttentionShape shape{H, KVH, D};
  size_t ws_bytes = paged_attention_workspace_bytes(N, shape, max_context, split);
  Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4) + 1}, DType::F32, cuda_device(0));
  PagedQueries dev{N, gtable.data_as<int32_t>(), max_blocks, gpos.data_as<int32_t>(), bs};
  paged_attention_cuda(gout.data_as<uint16_t>(), gq.data_as<uint16_t>(), gk.data_as<uint16_t>(),
                       gv.data_as<uint16_t>(), dev, shape, max_context, ws.data(), ws_bytes, split);
  std::vector<float> out = to_floats(gout);
  for (int64_t i = 0; i < H * D; ++i) ASSERT_TRUE(std::isnan(out[i])) << "query 0 element " << i;
  for (int64_t i = H * D; i < 2 * H * D; ++i) ASSERT_TRUE(std::isfinite(out[i])) << "query 1 element " << i;
}

}  // namespace
}  // namespace sqlrl
