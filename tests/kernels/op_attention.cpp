// Causal GQA attention (kernels/attention.h), three ops:
//  attention         varlen forward (out, lse) and backward (dq, dk, dv);
//  attention_prefix  the same with shared prefixes (a sequence attends first to another's first
//                    tokens; the backward adds its gradient into the prefix's dk/dv rows);
//  paged_attention   decode over a paged KV cache (block tables, split-K on CUDA).
// on the CPU and on CUDA (head_dim 64 and 128 only: other head_dims run on the CPU alone, which
// has register-tiled code for 32, 64 and 128 and run-time-D code for the rest).
//
// Shapes: odd lengths (1, 17, 38, 300; 1000 on CUDA), varlen batches with empty and length-one
// sequences, GQA ratios 1 / 2 / 4 (and 6, 7, 16 in decode), head_dim 8 / 24 / 32 (CPU) and 64 / 128.
// The CPU runs the shapes whose longest attended range is <= 300 keys: its tiles are 4 queries x
// 16 keys, crossed many times by then, and the float64 reference of a 1000-token sequence costs
// seconds (the longer shapes are for the GPU's 64- and 128-row tiles).
//
// Tolerances.
//  CPU (f32): every element within rtol x the tensor's largest element, rtol = 8 u_f32 sqrt(K),
//    K = D + L (the D-term scores, the L-term softmax and weighted sums, L the longest attended
//    range). Relative to the largest element, not elementwise: the softmax weights carry errors of
//    ~u_f32 x the score range (exp of a difference of scores of a few units), and the backward's
//    dS = P (dP - delta) cancels, so an element's error scales with the largest terms, not with
//    the element itself. (8 u sqrt(K) <= 1e-5 for D <= 128, L <= 38: the earlier budget.)
//  CUDA, with bf16 operands: the forward rounds P to bf16 before P V and rounds its output to
//    bf16; the backward also rounds dS to bf16 before dK and dQ. Each rounding is a relative
//    perturbation of at most u_bf16 / 2 = 2^-9 ~ 2e-3 per term, so the relative L2 error of a
//    tensor sits near 2e-3..4e-3 (a CPU emulation of these kernels measured 1.7e-3..3.2e-3). The
//    budget for bf16 operands is a relative L2 error of 1e-2 (2.5 u_bf16: about four such
//    roundings adding in quadrature, with margin), checked per sequence so that a wrong short
//    sequence cannot hide inside a long one, with an absolute floor per element of
//    max(u_bf16 x the tensor's RMS, 1e-4): some exact gradients are 0 (dq and dk of a length-1
//    sequence: dS = dout . v - dout . out with out = v), and what the kernel computes there is
//    fp32 cancellation noise (~u_f32 x D x |dout| |v| ~ 1e-6 after the 1/sqrt(D) scale), where a
//    relative error means nothing; 1e-4 is ~1e-3 of a typical gradient element. lse: f32 sums of
//    exact bf16 products, ~1e-6 off; 1e-3 absolute. Paged decode rounds P to bf16 before P V (as the
//    forward does) and rounds its output: two roundings of ~1.1e-3 RMS each, ~1.6e-3 together: 5e-3.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernels/attention.h"
#include "tests/kernels/cases.h"

namespace sqlrl::testing {
namespace {

constexpr int64_t kCpuMaxKeys = 300;
constexpr double kAttentionF32Factor = 8.0;

bool cuda_supports(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

std::vector<int32_t> offsets(const std::vector<int32_t>& lens) {
  std::vector<int32_t> cu(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i) cu[i + 1] = cu[i] + lens[i];
  return cu;
}

// Checks rows [cu[s], cu[s+1]) x row_len of got against want, sequence by sequence: every
// element finite and ||got - want|| <= rel ||want|| + max(u_bf16 rms, 1e-4) sqrt(n).
void expect_close_per_sequence(const std::vector<float>& got, const std::vector<double>& want, int64_t row_len,
                               const std::vector<int32_t>& cu, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double floor = std::max(unit_roundoff(Precision::BF16) * rms(want), 1e-4);
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const size_t b = static_cast<size_t>(cu[s] * row_len), e = static_cast<size_t>(cu[s + 1] * row_len);
    double err = 0, norm = 0;
    for (size_t i = b; i < e; ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << what << ": element " << i << " (sequence " << s << ") is " << got[i];
      const double d = static_cast<double>(got[i]) - want[i];
      err += d * d;
      norm += want[i] * want[i];
    }
    const double budget = rel * std::sqrt(norm) + floor * std::sqrt(static_cast<double>(e - b));
    EXPECT_LE(std::sqrt(err), budget) << what << ": sequence " << s << " of length " << cu[s + 1] - cu[s]
                                      << ", relative L2 error " << std::sqrt(err / std::max(norm, 1e-30));
    if (budget > 0) worst_budget_ratio() = std::max(worst_budget_ratio(), std::sqrt(err) / budget);
  }
}

Tensor to_gpu_bf16(const std::vector<float>& x, Shape shape) {
  return from_floats(x, shape, DType::BF16, cuda_device(0));
}
Tensor poisoned_tensor(Shape shape, DType dtype) {
  Tensor t = empty(shape, dtype, cuda_device(0));
  fill(t, NAN);
  return t;
}

// --- the problems: varlen batches, with or without shared prefixes ---------------------------
struct AttentionProblem {
  std::vector<int32_t> lens;
  int64_t heads, kv_heads, head_dim;
  bool backward = true;
  std::vector<int32_t> prefix_seq = {}, prefix_len = {};  // empty: no sharing
  bool finite_differences = false;

  AttentionShape shape() const { return {heads, kv_heads, head_dim}; }
  int64_t max_keys() const {
    int64_t m = 0;
    for (size_t s = 0; s < lens.size(); ++s)
      m = std::max<int64_t>(m, lens[s] + (prefix_seq.empty() ? 0 : prefix_len[s]));
    return m;
  }
  int64_t max_len() const { return lens.empty() ? 0 : *std::max_element(lens.begin(), lens.end()); }
};

std::string describe(const AttentionProblem& p, uint64_t seed) {
  std::string shared;
  for (size_t s = 0; s < p.prefix_seq.size(); ++s)
    if (p.prefix_seq[s] >= 0)
      shared += " seq " + std::to_string(s) + " shares " + std::to_string(p.prefix_len[s]) + " of seq " +
                std::to_string(p.prefix_seq[s]) + ";";
  return "lens [" + join(p.lens) + "] heads " + std::to_string(p.heads) + " kv_heads " + std::to_string(p.kv_heads) +
         " head_dim " + std::to_string(p.head_dim) + shared + " seed " + std::to_string(seed);
}

std::vector<AttentionProblem> attention_problems() {
  std::vector<AttentionProblem> v;
  v.push_back({{5, 1, 7}, 4, 2, 8, true, {}, {}, true});  // the registry's case: run-time D, finite differences
  for (int64_t D : {64, 128, 24, 32}) v.push_back({{1, 5, 17, 38}, 4, 2, D});  // partial 4-row and 16-key CPU tiles
  v.push_back({{0, 1, 17, 0, 130, 1, 64, 200, 0}, 4, 2, 32});  // the demo model's heads (CPU only)
  for (int64_t D : {64, 128})
    for (int64_t ratio : {1, 2, 4}) {
      for (int32_t len : {1, 17, 300}) v.push_back({{len}, 4, 4 / ratio, D});
      v.push_back({{1000}, 4, 4 / ratio, D, false});
      v.push_back({{0, 1, 17, 0, 130, 1, 64, 200, 0}, 8, 8 / ratio, D});  // empty and length-one sequences
    }
  v.push_back({{1000}, 4, 1, 128});
  return v;
}

// A GRPO group's prompt stored once: sharers of the whole prompt, of part of it (tile-aligned or
// not, one token), an empty sharer, two prefix owners.
std::vector<AttentionProblem> prefix_problems() {
  std::vector<AttentionProblem> v;
  for (int64_t D : {64, 128, 24, 32})
    v.push_back({{20, 9, 5, 7, 3, 17}, 4, 2, D, true, {-1, 0, 0, -1, -1, 4}, {0, 13, 20, 0, 0, 1}});
  for (int64_t D : {64, 128})
    for (int64_t ratio : {1, 4}) {
      v.push_back(
          {{300, 40, 0, 280, 5, 1, 17}, 4, 4 / ratio, D, true, {-1, 0, 0, 0, 0, 0, -1}, {0, 300, 300, 256, 1, 129, 0}});
      v.push_back({{200, 30, 150, 20, 64}, 4, 4 / ratio, D, true, {-1, 0, -1, 2, 0}, {0, 130, 0, 150, 64}});
    }
  return v;
}

struct AttentionInputs {
  std::vector<float> q, k, v, dout;
  std::vector<int32_t> cu;
};

AttentionInputs make_inputs(Rng& rng, const AttentionProblem& p, Precision prec) {
  AttentionInputs in;
  in.cu = offsets(p.lens);
  const int64_t T = in.cu.back(), H = p.heads, KVH = p.kv_heads, D = p.head_dim;
  in.q = rng.normal(T * H * D, 1.0, 0.0, prec);
  in.k = rng.normal(T * KVH * D, 1.5, 0.0, prec);
  in.v = rng.normal(T * KVH * D, 1.0, 0.0, prec);
  in.dout = rng.normal(T * H * D, 1.0, 0.0, prec);
  return in;
}

// --- CPU ---------------------------------------------------------------------------------------
// f32 budget relative to the tensor's largest element (see the file's comment), or to
// `floor_scale` when that is larger: a tensor whose exact value is all zeros (dq and dk of
// length-1 sequences, dS = dout . v - dout . out with out = v) holds fp32 cancellation noise,
// which a budget relative to its (zero) elements would call an error. (At -O3 GCC happened to
// compute those zeros exactly; the -O1 sanitizer build does not: 8.7e-8.)
void expect_close_scaled(const std::vector<float>& got, const std::vector<double>& want, int64_t K,
                         const std::string& what, double floor_scale = 0) {
  double scale = floor_scale;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  const double rtol = reduction_rtol(Precision::F32, K, kAttentionF32Factor);
  expect_close(got, want, {rtol * scale, 0.0}, what);
}

double scaled_error(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0.0, scale = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

void run_cpu_problem(const AttentionProblem& p, uint64_t seed) {
  Rng rng(seed);
  SCOPED_TRACE(describe(p, seed));
  const AttentionInputs in = make_inputs(rng, p, Precision::F32);
  const int64_t T = in.cu.back(), H = p.heads, KVH = p.kv_heads, D = p.head_dim,
                S = static_cast<int64_t>(p.lens.size());
  const std::vector<double> dout = widen(in.dout);
  const RefAttention want =
      ref_attention(widen(in.q), widen(in.k), widen(in.v), &dout, in.cu, p.shape(), p.prefix_seq, p.prefix_len);
  SharedPrefixes pre;
  if (!p.prefix_seq.empty()) pre = {p.prefix_seq.data(), p.prefix_len.data()};
  const int64_t K = D + p.max_keys();
  std::vector<float> out(T * H * D, NAN), lse(T * H, NAN), dq(T * H * D, NAN), dk(T * KVH * D, NAN),
      dv(T * KVH * D, NAN);
  attention_forward_cpu(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), in.cu.data(), S, p.shape(), pre);
  expect_close_scaled(out, want.out, K, "out");
  expect_close_scaled(lse, want.lse, K, "lse");
  attention_backward_cpu(dq.data(), dk.data(), dv.data(), in.dout.data(), out.data(), lse.data(), in.q.data(),
                         in.k.data(), in.v.data(), in.cu.data(), S, p.shape(), pre);
  // The floor: 1e-3 of the largest |dq| (|dk|) could be, P summing to 1 and
  // |dS| <= 2 D max|dout| max|v|, times max|k| (|q|) / sqrt(D). Tensors with non-zero values
  // are far above it and keep their own scale.
  auto max_abs = [](const std::vector<float>& x) {
    double m = 0;
    for (float e : x) m = std::max(m, static_cast<double>(std::fabs(e)));
    return m;
  };
  const double ds = 2.0 * static_cast<double>(D) * max_abs(in.dout) * max_abs(in.v) / std::sqrt(static_cast<double>(D));
  expect_close_scaled(dq, want.dq, K, "dq", 1e-3 * ds * max_abs(in.k));
  expect_close_scaled(dk, want.dk, K, "dk", 1e-3 * ds * max_abs(in.q));
  expect_close_scaled(dv, want.dv, K, "dv");

  if (p.finite_differences) {
    const std::vector<double> q = widen(in.q), k = widen(in.k), v = widen(in.v);
    auto objective = [&](const std::vector<double>& qq, const std::vector<double>& kk, const std::vector<double>& vv) {
      return dot(ref_attention(qq, kk, vv, nullptr, in.cu, p.shape(), p.prefix_seq, p.prefix_len).out, dout);
    };
    expect_matches_finite_differences(
        want.dq, finite_differences(q, [&](const std::vector<double>& x) { return objective(x, k, v); }), "float64 dq");
    expect_matches_finite_differences(
        want.dk, finite_differences(k, [&](const std::vector<double>& x) { return objective(q, x, v); }), "float64 dk");
    expect_matches_finite_differences(
        want.dv, finite_differences(v, [&](const std::vector<double>& x) { return objective(q, k, x); }), "float64 dv");
  }
  if (p.prefix_seq.empty()) return;

  // The shared batch against the same batch written out in full (each sharer's prefix rows
  // copied in front of its own): outputs and lse of every stored row agree exactly (the same
  // arithmetic in the same order), dq of the stored rows agree, and each prefix row's dk/dv
  // equals its own plus every sharer's copy. Copied prefix rows get dout 0 (they are not outputs
  // of the shared batch).
  std::vector<int32_t> wcu = {0}, origin;
  std::vector<bool> copy;
  for (int64_t s = 0; s < S; ++s) {
    for (int32_t j = 0; j < (p.prefix_seq[s] >= 0 ? p.prefix_len[s] : 0); ++j)
      origin.push_back(in.cu[p.prefix_seq[s]] + j), copy.push_back(true);
    for (int32_t t = in.cu[s]; t < in.cu[s + 1]; ++t) origin.push_back(t), copy.push_back(false);
    wcu.push_back(static_cast<int32_t>(origin.size()));
  }
  const int64_t W = wcu.back();
  auto rows_of = [&](const std::vector<float>& x, int64_t width, bool zero_copies) {
    std::vector<float> y(W * width);
    for (int64_t t = 0; t < W; ++t)
      if (!(zero_copies && copy[t])) std::copy_n(x.begin() + origin[t] * width, width, y.begin() + t * width);
    return y;
  };
  const std::vector<float> wq = rows_of(in.q, H * D, false), wk = rows_of(in.k, KVH * D, false),
                           wv = rows_of(in.v, KVH * D, false), wdout = rows_of(in.dout, H * D, true);
  std::vector<float> wout(W * H * D), wlse(W * H), wdq(W * H * D), wdk(W * KVH * D), wdv(W * KVH * D);
  attention_forward_cpu(wout.data(), wlse.data(), wq.data(), wk.data(), wv.data(), wcu.data(), S, p.shape());
  attention_backward_cpu(wdq.data(), wdk.data(), wdv.data(), wdout.data(), wout.data(), wlse.data(), wq.data(),
                         wk.data(), wv.data(), wcu.data(), S, p.shape());
  std::vector<float> want_out(T * H * D), want_lse(T * H), want_dq(T * H * D);
  std::vector<double> want_dk(T * KVH * D, 0.0), want_dv(T * KVH * D, 0.0);
  for (int64_t t = 0; t < W; ++t) {
    const int64_t o = origin[t];
    if (!copy[t]) {
      std::copy_n(wout.begin() + t * H * D, H * D, want_out.begin() + o * H * D);
      std::copy_n(wlse.begin() + t * H, H, want_lse.begin() + o * H);
      std::copy_n(wdq.begin() + t * H * D, H * D, want_dq.begin() + o * H * D);
    }
    for (int64_t e = 0; e < KVH * D; ++e) {
      want_dk[o * KVH * D + e] += wdk[t * KVH * D + e];
      want_dv[o * KVH * D + e] += wdv[t * KVH * D + e];
    }
  }
  EXPECT_EQ(out, want_out);
  EXPECT_EQ(lse, want_lse);
  // Backward sums group the query rows into tiles differently: fp32 reassociation only, a few
  // 1e-7 relative per op; 1e-5 of the largest entry still catches any wrong index, mask or
  // missing term (those are O(1) of the scale).
  EXPECT_LE(scaled_error(dq, widen(want_dq)), 1e-5);
  EXPECT_LE(scaled_error(dk, want_dk), 1e-5);
  EXPECT_LE(scaled_error(dv, want_dv), 1e-5);
  // A prefix owner's key gradient really has the sharers' part.
  double sharer_part = 0.0;
  for (int64_t e = 0; e < KVH * D; ++e) sharer_part += std::abs(want_dk[e] - wdk[e]);
  EXPECT_GT(sharer_part, 1e-3);
}

void run_attention_cpu() {
  for (const AttentionProblem& p : attention_problems())
    if (p.max_keys() <= kCpuMaxKeys) run_cpu_problem(p, p.finite_differences ? 42 : 7);
}

void run_prefix_cpu() {
  for (const AttentionProblem& p : prefix_problems())
    if (p.max_keys() <= kCpuMaxKeys) run_cpu_problem(p, 11);

  // Bad tables are errors naming the sequence: a prefix owner after its sharer, a nested prefix,
  // a prefix longer than its owner.
  const AttentionProblem p = prefix_problems().front();
  Rng rng(11);
  const AttentionInputs in = make_inputs(rng, p, Precision::F32);
  const int64_t T = in.cu.back(), H = p.heads, KVH = p.kv_heads, D = p.head_dim,
                S = static_cast<int64_t>(p.lens.size());
  std::vector<float> out(T * H * D), lse(T * H), dq(T * H * D), dk(T * KVH * D), dv(T * KVH * D);
  const std::vector<int32_t> later = {-1, 2, -1, -1, -1, -1}, nested = {-1, 0, 1, -1, -1, -1},
                             too_long = {0, 21, 0, 0, 0, 0};
  EXPECT_THROW(attention_forward_cpu(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), in.cu.data(), S,
                                     p.shape(), {later.data(), p.prefix_len.data()}),
               std::exception);
  EXPECT_THROW(attention_forward_cpu(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), in.cu.data(), S,
                                     p.shape(), {nested.data(), p.prefix_len.data()}),
               std::exception);
  EXPECT_THROW(attention_backward_cpu(dq.data(), dk.data(), dv.data(), in.dout.data(), out.data(), lse.data(),
                                      in.q.data(), in.k.data(), in.v.data(), in.cu.data(), S, p.shape(),
                                      {p.prefix_seq.data(), too_long.data()}),
               std::exception);
}

// --- CUDA --------------------------------------------------------------------------------------
void run_cuda_problem(const AttentionProblem& p, uint64_t seed) {
  Rng rng(seed);
  SCOPED_TRACE(describe(p, seed));
  const AttentionInputs in = make_inputs(rng, p, Precision::BF16);
  const std::vector<int32_t>& cu = in.cu;
  const int64_t T = cu.back(), H = p.heads, KVH = p.kv_heads, D = p.head_dim, S = static_cast<int64_t>(p.lens.size());
  const AttentionShape shape = p.shape();
  Tensor gq = to_gpu_bf16(in.q, {T, H, D}), gk = to_gpu_bf16(in.k, {T, KVH, D}), gv = to_gpu_bf16(in.v, {T, KVH, D});
  Tensor gcu = from_ints(cu, {S + 1}, cuda_device(0));
  SharedPrefixesCuda gpre;
  Tensor gpre_seq, gpre_len, goffsets, gsharers;
  if (!p.prefix_seq.empty()) {
    std::vector<int32_t> sharer_offsets, sharers;
    shared_prefix_sharers({p.prefix_seq.data(), p.prefix_len.data()}, cu.data(), S, sharer_offsets, sharers);
    sharers.push_back(-1);  // never read: keeps the tensor non-empty
    gpre_seq = from_ints(p.prefix_seq, {S}, cuda_device(0));
    gpre_len = from_ints(p.prefix_len, {S}, cuda_device(0));
    goffsets = from_ints(sharer_offsets, {S + 1}, cuda_device(0));
    gsharers = from_ints(sharers, {static_cast<int64_t>(sharers.size())}, cuda_device(0));
    gpre = {gpre_seq.data_as<int32_t>(), gpre_len.data_as<int32_t>(), goffsets.data_as<int32_t>(),
            gsharers.data_as<int32_t>()};
  }
  Tensor gout = poisoned_tensor({T, H, D}, DType::BF16), glse = poisoned_tensor({T, H}, DType::F32);
  attention_forward_cuda(gout.data_as<uint16_t>(), glse.data_as<float>(), gq.data_as<uint16_t>(),
                         gk.data_as<uint16_t>(), gv.data_as<uint16_t>(), gcu.data_as<int32_t>(), S, p.max_len(), shape,
                         {}, gpre);
  const std::vector<float> out = to_floats(gout), lse = to_floats(glse);
  const std::vector<double> q = widen(in.q), k = widen(in.k), v = widen(in.v), dout = widen(in.dout),
                            gpu_out = widen(out);
  // The backward reference takes delta from the kernel's own (bf16) out, as the kernel does.
  const RefAttention want = ref_attention(q, k, v, p.backward ? &dout : nullptr, cu, shape, p.prefix_seq, p.prefix_len,
                                          p.backward ? &gpu_out : nullptr);
  expect_close_per_sequence(out, want.out, H * D, cu, 1e-2, "out");
  for (size_t i = 0; i < lse.size(); ++i)
    ASSERT_NEAR(lse[i], want.lse[i], 1e-3) << "lse row " << i / H << " head " << i % H;
  if (!p.backward) return;

  Tensor gdout = to_gpu_bf16(in.dout, {T, H, D});
  Tensor gdq = poisoned_tensor({T, H, D}, DType::BF16), gdk = poisoned_tensor({T, KVH, D}, DType::BF16),
         gdv = poisoned_tensor({T, KVH, D}, DType::BF16);
  const size_t ws_bytes = attention_backward_workspace_bytes(T, shape);
  Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4) + 1}, DType::F32, cuda_device(0));
  auto run = [&] {
    attention_backward_cuda(gdq.data_as<uint16_t>(), gdk.data_as<uint16_t>(), gdv.data_as<uint16_t>(),
                            gdout.data_as<uint16_t>(), gout.data_as<uint16_t>(), glse.data_as<float>(),
                            gq.data_as<uint16_t>(), gk.data_as<uint16_t>(), gv.data_as<uint16_t>(),
                            gcu.data_as<int32_t>(), S, T, p.max_len(), shape, ws.data(), ws_bytes, {}, gpre);
  };
  run();
  const std::vector<float> dq = to_floats(gdq), dk = to_floats(gdk), dv = to_floats(gdv);
  expect_close_per_sequence(dq, want.dq, H * D, cu, 1e-2, "dq");
  expect_close_per_sequence(dk, want.dk, KVH * D, cu, 1e-2, "dk");
  expect_close_per_sequence(dv, want.dv, KVH * D, cu, 1e-2, "dv");

  // Deterministic: a second run gives the same bits.
  fill(gdq, NAN);
  fill(gdk, NAN);
  run();
  const std::vector<float> dq2 = to_floats(gdq), dk2 = to_floats(gdk);
  EXPECT_EQ(0, std::memcmp(dq.data(), dq2.data(), dq.size() * 4)) << "dq differs between two runs";
  EXPECT_EQ(0, std::memcmp(dk.data(), dk2.data(), dk.size() * 4)) << "dk differs between two runs";
}

// max_seqlen sizes the grid and cannot be checked against device-side cu_seqlens. With 100 for a
// 300-token sequence, the forward's one 128-row tile and the backward's two 64-row tiles cover
// rows 0..127, which must still be right (causal: a row never sees later rows; the backward's
// covered keys still collect every query); rows 128..299 must come back NaN.
void past_max_seqlen_rows_are_nan(uint64_t seed) {
  const int64_t T = 300, H = 2, KVH = 1, D = 64, max_seqlen = 100, covered = 128;
  const AttentionShape shape{H, KVH, D};
  Rng rng(seed);
  SCOPED_TRACE("max_seqlen 100 for 300 tokens, seed " + std::to_string(seed));
  const AttentionInputs in = make_inputs(rng, {{300}, H, KVH, D}, Precision::BF16);
  const std::vector<int32_t> cu = {0, static_cast<int32_t>(T)}, cu_covered = {0, static_cast<int32_t>(covered)};
  Tensor gq = to_gpu_bf16(in.q, {T, H, D}), gk = to_gpu_bf16(in.k, {T, KVH, D}), gv = to_gpu_bf16(in.v, {T, KVH, D});
  Tensor gdout = to_gpu_bf16(in.dout, {T, H, D}), gcu = from_ints(cu, {2}, cuda_device(0));
  auto forward = [&](const Tensor& out, const Tensor& lse, int64_t max_len) {
    attention_forward_cuda(out.data_as<uint16_t>(), lse.data_as<float>(), gq.data_as<uint16_t>(),
                           gk.data_as<uint16_t>(), gv.data_as<uint16_t>(), gcu.data_as<int32_t>(), 1, max_len, shape);
  };
  auto head = [](const std::vector<double>& x, int64_t n) { return std::vector<double>(x.begin(), x.begin() + n); };
  auto headf = [](const std::vector<float>& x, int64_t n) { return std::vector<float>(x.begin(), x.begin() + n); };

  Tensor gout = poisoned_tensor({T, H, D}, DType::BF16), glse = poisoned_tensor({T, H}, DType::F32);
  forward(gout, glse, max_seqlen);
  std::vector<float> out = to_floats(gout), lse = to_floats(glse);
  for (int64_t i = covered * H * D; i < T * H * D; ++i) ASSERT_TRUE(std::isnan(out[i])) << "out " << i;
  for (int64_t i = covered * H; i < T * H; ++i) ASSERT_TRUE(std::isnan(lse[i])) << "lse " << i;
  const std::vector<double> q = widen(in.q), k = widen(in.k), v = widen(in.v), dout = widen(in.dout);
  const RefAttention first = ref_attention(q, k, v, nullptr, cu, shape);
  expect_close_per_sequence(headf(out, covered * H * D), head(first.out, covered * H * D), H * D, cu_covered, 1e-2,
                            "covered out");

  // The backward gets a complete forward (its own max_seqlen is what is under test).
  forward(gout, glse, T);
  out = to_floats(gout);
  const std::vector<double> gpu_out = widen(out);
  const RefAttention want = ref_attention(q, k, v, &dout, cu, shape, {}, {}, &gpu_out);
  Tensor gdq = poisoned_tensor({T, H, D}, DType::BF16), gdk = poisoned_tensor({T, KVH, D}, DType::BF16),
         gdv = poisoned_tensor({T, KVH, D}, DType::BF16);
  const size_t ws_bytes = attention_backward_workspace_bytes(T, shape);
  Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4) + 1}, DType::F32, cuda_device(0));
  attention_backward_cuda(gdq.data_as<uint16_t>(), gdk.data_as<uint16_t>(), gdv.data_as<uint16_t>(),
                          gdout.data_as<uint16_t>(), gout.data_as<uint16_t>(), glse.data_as<float>(),
                          gq.data_as<uint16_t>(), gk.data_as<uint16_t>(), gv.data_as<uint16_t>(),
                          gcu.data_as<int32_t>(), 1, T, max_seqlen, shape, ws.data(), ws_bytes);
  const std::vector<float> dq = to_floats(gdq), dk = to_floats(gdk), dv = to_floats(gdv);
  for (int64_t i = covered * H * D; i < T * H * D; ++i) ASSERT_TRUE(std::isnan(dq[i])) << "dq " << i;
  for (int64_t i = covered * KVH * D; i < T * KVH * D; ++i) ASSERT_TRUE(std::isnan(dk[i]) && std::isnan(dv[i])) << i;
  expect_close_per_sequence(headf(dq, covered * H * D), head(want.dq, covered * H * D), H * D, cu_covered, 1e-2,
                            "covered dq");
  expect_close_per_sequence(headf(dk, covered * KVH * D), head(want.dk, covered * KVH * D), KVH * D, cu_covered, 1e-2,
                            "covered dk");
  expect_close_per_sequence(headf(dv, covered * KVH * D), head(want.dv, covered * KVH * D), KVH * D, cu_covered, 1e-2,
                            "covered dv");
}

void run_attention_cuda() {
  uint64_t seed = fresh_seed();
  for (const AttentionProblem& p : attention_problems())
    if (cuda_supports(p.head_dim)) run_cuda_problem(p, seed++);
  past_max_seqlen_rows_are_nan(seed);
  EXPECT_THROW(attention_forward_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1, {4, 4, 96}),
               std::exception)
      << "head_dim 96 must be refused";
}

void run_prefix_cuda() {
  uint64_t seed = fresh_seed();
  for (const AttentionProblem& p : prefix_problems())
    if (cuda_supports(p.head_dim)) run_cuda_problem(p, seed++);
}

// --- paged decode ------------------------------------------------------------------------------
struct PagedProblem {
  std::vector<int32_t> contexts;  // one sequence each; 0: a padding query (position -1)
  bool every_position;            // a query at every position of each sequence (else only the last)
  int64_t heads, kv_heads, head_dim, block_size;
  std::vector<int64_t> splits = {kPagedSplitTokens};  // CUDA's split_tokens (the CPU has no splits)
};

std::vector<PagedProblem> paged_problems() {
  std::vector<PagedProblem> v;
  v.push_back({{5, 1, 7}, true, 4, 2, 8, 3});  // the registry's case: blocks of 3, run-time D
  for (int64_t D : {64, 128, 24, 32}) v.push_back({{1, 5, 17, 38}, true, 4, 2, D, 16});
  // Contexts around the block size (16) and split sizes; many splits, one or two, none (no workspace).
  for (int64_t D : {64, 128})
    for (int64_t ratio : {1, 2, 4})
      v.push_back({{1, 16, 17, 63, 64, 65, 200, 1, 700}, false, 8, 8 / ratio, D, 16, {64, 512, 1 << 20}});
  v.push_back({{1300, 5, 2049}, false, 8, 2, 128, 16});      // the default split
  v.push_back({{1, 33, 300}, false, 16, 1, 128, 16, {64}});  // group 16: two chunks of 8 q heads per kv head
  v.push_back({{1, 33, 300}, false, 12, 2, 64, 16, {64}});   // group 6: a partial chunk
  v.push_back({{1, 33, 300}, false, 28, 4, 128, 16, {64}});  // group 7 (Qwen2.5-7B's 28 / 4)
  // Padding rows (CUDA graphs' fixed batch buckets) among real ones; long contexts in many splits
  // (9000 keys: 18 of 512 by the default rule, 141 of 64, 563 of 16); group 16 over two kv heads;
  // Qwen3-4B's heads (32 / 8).
  v.push_back({{0, 9000, 1, 0, 4100, 1025}, false, 32, 2, 128, 16, {16, 64, 512}});
  v.push_back({{4096, 0, 513, 1}, false, 32, 8, 128, 16, {kPagedSplitTokens}});
  v.push_back({{0, 2000, 0, 65}, false, 16, 4, 64, 16, {100, kPagedSplitTokens}});
  return v;
}

struct PagedInputs {
  std::vector<float> q, k_cache, v_cache;
  std::vector<int32_t> table, positions;
  int64_t num_blocks, max_blocks, max_context;
};

// Blocks handed out from a shuffled pool (three spare), one spare table column (-1, never read).
// The CPU's caches hold NaN outside the written contexts (a read past a context shows); CUDA's
// are random throughout, as its tiles may load (masked) keys past a context.
PagedInputs make_paged(Rng& rng, const PagedProblem& p, Backend backend) {
  const Precision prec = activation_precision(backend);
  const int64_t bs = p.block_size, H = p.heads, KVH = p.kv_heads, D = p.head_dim;
  PagedInputs in;
  in.max_context = *std::max_element(p.contexts.begin(), p.contexts.end());
  in.max_blocks = (in.max_context + bs - 1) / bs + 1;
  int64_t used = 0;
  for (int32_t c : p.contexts) used += (c + bs - 1) / bs;  // padding (c = 0) takes no block
  in.num_blocks = used + 3;
  std::vector<int32_t> pool(static_cast<size_t>(in.num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng.engine());
  const size_t cache = static_cast<size_t>(in.num_blocks * bs * KVH * D);
  in.k_cache = rng.normal(cache, 1.5, 0.0, prec);
  in.v_cache = rng.normal(cache, 1.0, 0.0, prec);
  std::vector<bool> written(static_cast<size_t>(in.num_blocks * bs), false);
  size_t next = 0;
  for (int32_t c : p.contexts) {
    if (c == 0) {
      // A padding query: its table points far past the cache, so a read of it would fault.
      in.table.insert(in.table.end(), static_cast<size_t>(in.max_blocks), int32_t{1} << 30);
      in.positions.push_back(-1);
      continue;
    }
    std::vector<int32_t> row(static_cast<size_t>(in.max_blocks), -1);
    for (int64_t b = 0; b < (c + bs - 1) / bs; ++b) row[b] = pool[next++];
    for (int64_t pos = 0; pos < c; ++pos) written[row[pos / bs] * bs + pos % bs] = true;
    for (int64_t pos = p.every_position ? 0 : c - 1; pos < c; ++pos) {
      in.table.insert(in.table.end(), row.begin(), row.end());
      in.positions.push_back(static_cast<int32_t>(pos));
    }
  }
  if (backend == Backend::Cpu)
    for (size_t slot = 0; slot < written.size(); ++slot)
      if (!written[slot])
        for (int64_t e = 0; e < KVH * D; ++e) in.k_cache[slot * KVH * D + e] = in.v_cache[slot * KVH * D + e] = NAN;
  in.q = rng.normal(in.positions.size() * H * D, 1.0, 0.0, prec);
  for (size_t i = 0; i < in.positions.size(); ++i)  // a padding query's q must not matter
    if (in.positions[i] < 0) std::fill(in.q.begin() + i * H * D, in.q.begin() + (i + 1) * H * D, NAN);
  return in;
}

std::string describe(const PagedProblem& p, uint64_t seed) {
  return "contexts [" + join(p.contexts) + "]" + (p.every_position ? " every position" : "") + " heads " +
         std::to_string(p.heads) + " kv_heads " + std::to_string(p.kv_heads) + " head_dim " +
         std::to_string(p.head_dim) + " block " + std::to_string(p.block_size) + " seed " + std::to_string(seed);
}

// A padding query's output is exact zeros (not merely close to the reference's zeros).
void expect_padding_zeros(const std::vector<float>& out, const std::vector<int32_t>& positions, int64_t row) {
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] >= 0) continue;
    for (int64_t e = 0; e < row; ++e) {
      ASSERT_EQ(out[i * row + e], 0.0f) << "padding query " << i << " element " << e;
    }
  }
}

void run_paged_cpu() {
  for (const PagedProblem& p : paged_problems()) {
    Rng rng(7);
    SCOPED_TRACE(describe(p, rng.seed()));
    const PagedInputs in = make_paged(rng, p, Backend::Cpu);
    const AttentionShape shape{p.heads, p.kv_heads, p.head_dim};
    const std::vector<double> want =
        ref_paged_attention(in.q, in.k_cache, in.v_cache, in.table, in.max_blocks, in.positions, p.block_size, shape);
    std::vector<float> out(in.q.size(), NAN);
    PagedQueries queries{static_cast<int64_t>(in.positions.size()), in.table.data(), in.max_blocks, in.positions.data(),
                         p.block_size};
    paged_attention_cpu(out.data(), in.q.data(), in.k_cache.data(), in.v_cache.data(), queries, shape);
    expect_padding_zeros(out, in.positions, p.heads * p.head_dim);
    expect_close_scaled(out, want, p.head_dim + in.max_context, "out");
  }
}

// Batch invariance (kernels/attention.h): each query of a batch, launched alone with max_context
// its own context, gives the same output bits as in the batch (with a padding row and a larger
// max_context). The split of a context may depend on the context, never on the batch.
void paged_batch_invariance(uint64_t seed) {
  const PagedProblem p{{4096, 0, 300, 1, 1025, 65}, false, 32, 8, 128, 16};
  Rng rng(seed);
  SCOPED_TRACE("batch invariance, " + describe(p, rng.seed()));
  const PagedInputs in = make_paged(rng, p, Backend::Cuda);
  const int64_t N = static_cast<int64_t>(in.positions.size()), H = p.heads, D = p.head_dim, big = in.max_context + 3000;
  const AttentionShape shape{p.heads, p.kv_heads, D};
  // A table as wide as `big` needs (max_context <= max_blocks * block_size); the extra columns
  // are never read.
  const int64_t max_blocks = (big + p.block_size - 1) / p.block_size;
  std::vector<int32_t> wide(static_cast<size_t>(N * max_blocks), -1);
  for (int64_t i = 0; i < N; ++i)
    std::copy(in.table.begin() + i * in.max_blocks, in.table.begin() + (i + 1) * in.max_blocks,
              wide.begin() + i * max_blocks);
  Tensor gq = to_gpu_bf16(in.q, {N, H, D}), gk = to_gpu_bf16(in.k_cache, {in.num_blocks * p.block_size, p.kv_heads, D}),
         gv = to_gpu_bf16(in.v_cache, {in.num_blocks * p.block_size, p.kv_heads, D});
  auto run = [&](int64_t first, int64_t count, int64_t max_context) {
    Tensor gtable = from_ints(std::vector<int32_t>(wide.begin() + first * max_blocks,
                                                   wide.begin() + (first + count) * max_blocks),
                              {count, max_blocks}, cuda_device(0));
    Tensor gpos = from_ints(std::vector<int32_t>(in.positions.begin() + first, in.positions.begin() + first + count),
                            {count}, cuda_device(0));
    Tensor qs = narrow(gq, 0, first, count);
    Tensor gout = poisoned_tensor({count, H, D}, DType::BF16);
    const size_t ws_bytes = paged_attention_workspace_bytes(count, shape, max_context);
    Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4) + 1}, DType::F32, cuda_device(0));
    fill(ws, NAN);
    PagedQueries dev{count, gtable.data_as<int32_t>(), max_blocks, gpos.data_as<int32_t>(), p.block_size};
    paged_attention_cuda(gout.data_as<uint16_t>(), qs.data_as<uint16_t>(), gk.data_as<uint16_t>(),
                         gv.data_as<uint16_t>(), dev, shape, max_context, ws.data(), ws_bytes);
    return to_floats(gout);
  };
  const std::vector<float> batch = run(0, N, big);
  for (int64_t i = 0; i < N; ++i) {
    if (in.positions[i] < 0) continue;
    const std::vector<float> alone = run(i, 1, in.positions[i] + 1);
    for (int64_t e = 0; e < H * D; ++e)
      ASSERT_EQ(std::memcmp(&alone[e], &batch[i * H * D + e], sizeof(float)), 0)
          << "query " << i << " (context " << in.positions[i] + 1 << ") element " << e << ": alone " << alone[e]
          << ", in the batch " << batch[i * H * D + e];
  }
}

void run_paged_cuda() {
  uint64_t seed = fresh_seed();
  for (const PagedProblem& p : paged_problems()) {
    if (!cuda_supports(p.head_dim)) continue;
    for (int64_t split : p.splits) {
      Rng rng(seed++);
      SCOPED_TRACE(describe(p, rng.seed()) + " split " + std::to_string(split));
      const PagedInputs in = make_paged(rng, p, Backend::Cuda);
      const AttentionShape shape{p.heads, p.kv_heads, p.head_dim};
      const int64_t N = static_cast<int64_t>(in.positions.size()), H = p.heads, KVH = p.kv_heads, D = p.head_dim;
      const std::vector<double> want =
          ref_paged_attention(in.q, in.k_cache, in.v_cache, in.table, in.max_blocks, in.positions, p.block_size, shape);
      Tensor gq = to_gpu_bf16(in.q, {N, H, D}), gk = to_gpu_bf16(in.k_cache, {in.num_blocks * p.block_size, KVH, D}),
             gv = to_gpu_bf16(in.v_cache, {in.num_blocks * p.block_size, KVH, D});
      Tensor gtable = from_ints(in.table, {N, in.max_blocks}, cuda_device(0)),
             gpos = from_ints(in.positions, {N}, cuda_device(0));
      Tensor gout = poisoned_tensor({N, H, D}, DType::BF16);
      const size_t ws_bytes = paged_attention_workspace_bytes(N, shape, in.max_context, split);
      Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4) + 1}, DType::F32, cuda_device(0));
      fill(ws, NAN);  // a split the reduce reads but nothing wrote would show
      PagedQueries dev{N, gtable.data_as<int32_t>(), in.max_blocks, gpos.data_as<int32_t>(), p.block_size};
      paged_attention_cuda(gout.data_as<uint16_t>(), gq.data_as<uint16_t>(), gk.data_as<uint16_t>(),
                           gv.data_as<uint16_t>(), dev, shape, in.max_context, ws.data(), ws_bytes, split);
      std::vector<int32_t> cu(static_cast<size_t>(N + 1));
      std::iota(cu.begin(), cu.end(), 0);  // one "sequence" per query: checked query by query
      const std::vector<float> got = to_floats(gout);
      expect_padding_zeros(got, in.positions, H * D);
      expect_close_per_sequence(got, want, H * D, cu, 5e-3, "out");
    }
  }
  paged_batch_invariance(seed++);

  // A position past the max_context the grid was sized for cannot be checked on the host (the
  // positions live on the device); the kernel marks that query's output NaN instead of returning
  // attention over a truncated context. The other query is unaffected.
  const int64_t N = 2, H = 4, KVH = 2, D = 64, bs = 16, max_blocks = 8, split = 16, max_context = 40;
  Rng rng(seed);
  SCOPED_TRACE("past max_context, seed " + std::to_string(rng.seed()));
  std::vector<int32_t> table(static_cast<size_t>(N * max_blocks));
  std::iota(table.begin(), table.end(), 0);
  const std::vector<int32_t> positions = {99, 20};  // 100 keys need 7 splits of 16; the grid has 3
  Tensor gq = to_gpu_bf16(rng.normal(N * H * D, 1.0, 0.0, Precision::BF16), {N, H, D});
  Tensor gk =
      to_gpu_bf16(rng.normal(N * max_blocks * bs * KVH * D, 1.0, 0.0, Precision::BF16), {N * max_blocks * bs, KVH, D});
  Tensor gv =
      to_gpu_bf16(rng.normal(N * max_blocks * bs * KVH * D, 1.0, 0.0, Precision::BF16), {N * max_blocks * bs, KVH, D});
  Tensor gtable = from_ints(table, {N, max_blocks}, cuda_device(0)), gpos = from_ints(positions, {N}, cuda_device(0));
  Tensor gout = empty({N, H, D}, DType::BF16, cuda_device(0));
  fill(gout, 0.0f);
  const AttentionShape shape{H, KVH, D};
  const size_t ws_bytes = paged_attention_workspace_bytes(N, shape, max_context, split);
  Tensor ws = empty({static_cast<int64_t>(ws_bytes / 4) + 1}, DType::F32, cuda_device(0));
  PagedQueries dev{N, gtable.data_as<int32_t>(), max_blocks, gpos.data_as<int32_t>(), bs};
  paged_attention_cuda(gout.data_as<uint16_t>(), gq.data_as<uint16_t>(), gk.data_as<uint16_t>(), gv.data_as<uint16_t>(),
                       dev, shape, max_context, ws.data(), ws_bytes, split);
  const std::vector<float> out = to_floats(gout);
  for (int64_t i = 0; i < H * D; ++i) ASSERT_TRUE(std::isnan(out[i])) << "query 0 element " << i;
  for (int64_t i = H * D; i < 2 * H * D; ++i) ASSERT_TRUE(std::isfinite(out[i])) << "query 1 element " << i;
}

}  // namespace

OpCase attention_case() { return {"attention", run_attention_cpu, run_attention_cuda}; }
OpCase attention_prefix_case() { return {"attention_prefix", run_prefix_cpu, run_prefix_cuda}; }
OpCase paged_attention_case() { return {"paged_attention", run_paged_cpu, run_paged_cuda}; }

}  // namespace sqlrl::testing
