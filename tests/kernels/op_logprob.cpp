// logprob (kernels/logprob.h): the fused lm_head + log-softmax + gather (log-probs, lse, entropy)
// in token chunks, and its backward (accumulating dhidden and dweight, masked tokens skipped),
// on the CPU and on CUDA (which also differentiates the entropy).
//
// Shapes: the registry's 13 tokens in chunks of 4 (a ragged last chunk; checked by finite
// differences), unscaled and at the logit scale of sampling temperature 0.6 (there with and
// without the entropy term); token and vocab
// counts that leave partial chunks on CUDA (1003 over 256-column tiles, one token, a chunk
// larger than T, C = 72 not a power of two), with and without entropy. Every third token carries
// no gradient (a mask), and token 0's target is the vocabulary's last id. With entropy, some rows
// carry only the entropy gradient (g = 0, h != 0) and some only the log-prob's (h = 0): both
// kernels (CPU and CUDA) differentiate sum_t g_t logp_t + h_t H_t against one float64 reference.
//
// Tolerances.
//  CPU (f32): f32_tol with K = C + V + T: the logits' C-term dot products, the V-term
//    log-sum-exp, and dweight's sum over T tokens.
//  CUDA forward: logits are f32 dot products of C bf16 products (error <= C u_f32 sum|h w| ~
//    1e-6 of the logit scale here), then an f32 log-sum-exp: 1e-4 absolute (+1e-5 relative) on
//    values of order log V leaves a wide margin and still catches any wrong element or chunk seam.
//  CUDA backward: dlogits are stored in bf16 (<= u_bf16 / 2 = 2^-9 relative each) and summed in
//    f32 by the GEMMs, so an element's error is <= 2^-9 of the sum of the magnitudes of its
//    terms; u_bf16 = 2^-8 of that sum is the budget, plus 1.01 u_bf16 relative for dhidden's own
//    bf16 rounding, plus 1e-6.
#include "kernels/logprob.h"
#include "tests/kernels/cases.h"

namespace sqlrl::testing {
namespace {

struct LogprobCase {
  int64_t T, C, V, chunk_tokens, chunk_vocab;
  bool entropy;
  float scale;
  std::vector<int32_t> targets;  // empty: random, targets[0] = V - 1
  bool finite_differences = false;
};

const std::vector<int32_t> kTargets = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9};

const std::vector<LogprobCase> kShapes = {
    {13, 8, 10, 4, 4, false, 1.0f, kTargets, true},  {13, 8, 10, 4, 4, false, 1.0f / 0.6f, kTargets, true},
    {13, 8, 10, 4, 4, true, 1.0f / 0.6f, kTargets, true},
    {37, 64, 1003, 16, 256, false, 1.0f, {}},         // partial token and vocab chunks
    {1, 64, 1003, 16, 4096, false, 1.0f, {}},         // one token, one vocab tile
    {17, 72, 517, 64, 100, false, 1.0f, {}},          // a chunk larger than T; C not a power of two
    {29, 64, 777, 8, 128, true, 1.0f, {}},            // entropy and its gradient
    {37, 64, 1003, 16, 256, false, 1.0f / 0.6f, {}},  // GRPO's log-probs at the sampling temperature
    {29, 64, 777, 8, 128, true, 1.0f / 0.6f, {}},
};

struct LogprobInputs {
  std::vector<float> hidden, weight, g, h;  // g = dlogprob, h = dentropy (entropy shapes only)
  std::vector<int32_t> targets;
};

LogprobInputs make_inputs(Rng& rng, const LogprobCase& s, Precision p) {
  LogprobInputs in;
  in.hidden = rng.uniform(static_cast<size_t>(s.T * s.C), -1.0, 1.0, p);
  in.weight = rng.uniform(static_cast<size_t>(s.V * s.C), -0.5, 0.5, p);
  in.targets = s.targets;
  if (in.targets.empty()) {
    in.targets = rng.ints(static_cast<size_t>(s.T), 0, static_cast<int32_t>(s.V - 1));
    in.targets[0] = static_cast<int32_t>(s.V - 1);  // the last column of the last vocab chunk
  }
  // Every third token carries no gradient (token 0 always carries one).
  in.g = rng.uniform(static_cast<size_t>(s.T), -1.0, 1.0);
  for (int64_t t = 1; t < s.T; t += 3) in.g[t] = 0.0f;
  if (s.entropy) {
    in.h = rng.uniform(static_cast<size_t>(s.T), -0.5, 0.5);
    for (int64_t t = 1; t < s.T; t += 3) in.h[t] = 0.0f;
    for (int64_t t = 3; t < s.T; t += 6) in.g[t] = 0.0f;  // the entropy term alone
    for (int64_t t = 5; t < s.T; t += 6) in.h[t] = 0.0f;  // the log-prob term alone
  }
  return in;
}

std::string describe(const LogprobCase& s, const Rng& rng) {
  return "T " + std::to_string(s.T) + " C " + std::to_string(s.C) + " V " + std::to_string(s.V) + " chunks " +
         std::to_string(s.chunk_tokens) + "x" + std::to_string(s.chunk_vocab) + " entropy " +
         std::to_string(s.entropy) + " logit_scale " + std::to_string(s.scale) + " seed " + std::to_string(rng.seed());
}

RefLogprob reference(const LogprobInputs& in, const LogprobCase& s, bool with_g, bool with_h) {
  return ref_logprob(widen(in.hidden), widen(in.weight), in.targets, s.T, s.C, s.V, s.scale,
                     with_g ? widen(in.g) : std::vector<double>{}, with_h ? widen(in.h) : std::vector<double>{});
}

void run_cpu() {
  for (const LogprobCase& s : kShapes) {
    Rng rng(42);
    SCOPED_TRACE(describe(s, rng));
    const LogprobInputs in = make_inputs(rng, s, Precision::F32);
    const int64_t K = s.C + s.V + s.T;
    const RefLogprob want = reference(in, s, true, s.entropy);
    LogprobShape shape{s.T, s.C, s.V, s.chunk_tokens, s.scale};
    std::vector<float> scratch(static_cast<size_t>(std::min(s.T, s.chunk_tokens) * s.V));
    std::vector<float> lp(s.T, NAN), lse(s.T, NAN), ent(s.T, NAN);
    logprob_forward_cpu(lp.data(), lse.data(), in.hidden.data(), in.weight.data(), in.targets.data(), shape,
                        scratch.data(), ent.data());
    expect_close_f32(lp, want.logprob, K, "logprob");
    expect_close_f32(lse, want.lse, K, "lse");
    expect_close_f32(ent, want.entropy, K, "entropy");
    std::vector<float> lp2(s.T, NAN), lse2(s.T, NAN);  // without entropy: the same bits
    logprob_forward_cpu(lp2.data(), lse2.data(), in.hidden.data(), in.weight.data(), in.targets.data(), shape,
                        scratch.data());
    EXPECT_EQ(lp2, lp);
    EXPECT_EQ(lse2, lse);

    // Backward (with the entropy term on entropy shapes) into non-zero gradients; masked rows
    // keep their bits.
    const std::vector<float> dh0 = rng.uniform(in.hidden.size(), -0.1, 0.1),
                             dw0 = rng.uniform(in.weight.size(), -0.1, 0.1);
    std::vector<float> dh = dh0, dw = dw0;
    logprob_backward_cpu(dh.data(), dw.data(), in.g.data(), in.hidden.data(), in.weight.data(), in.targets.data(),
                         lse.data(), shape, scratch.data(), s.entropy ? in.h.data() : nullptr,
                         s.entropy ? ent.data() : nullptr);
    expect_close_f32(dh, plus(dh0, want.dhidden), K, "dhidden");
    expect_close_f32(dw, plus(dw0, want.dweight), K, "dweight");
    for (int64_t t = 1; t < s.T; t += 3)
      for (int64_t c = 0; c < s.C; ++c)
        ASSERT_EQ(dh[t * s.C + c], dh0[t * s.C + c]) << "masked row " << t << " touched";

    if (s.finite_differences) {
      const std::vector<double> hd = widen(in.hidden), wd = widen(in.weight), gd = widen(in.g);
      const std::vector<double> ed = s.entropy ? widen(in.h) : std::vector<double>(s.T, 0.0);
      auto objective = [&](const std::vector<double>& h, const std::vector<double>& w) {
        const RefLogprob r = ref_logprob(h, w, in.targets, s.T, s.C, s.V, s.scale, {}, {});
        return dot(r.logprob, gd) + dot(r.entropy, ed);
      };
      expect_matches_finite_differences(
          want.dhidden, finite_differences(hd, [&](const std::vector<double>& h) { return objective(h, wd); }),
          "float64 dhidden");
      expect_matches_finite_differences(
          want.dweight, finite_differences(wd, [&](const std::vector<double>& w) { return objective(hd, w); }),
          "float64 dweight");
    }
  }
}

constexpr double kForwardAtol = 1e-4, kForwardRtol = 1e-5;
constexpr double kBf16Rtol = 1.01 * unit_roundoff(Precision::BF16);

void expect_backward_close(const std::vector<float>& got, const std::vector<double>& want,
                           const std::vector<double>& mag, const std::vector<float>& start, double rtol,
                           const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double expected = want[i] + start[i];
    const double budget = 1e-6 + unit_roundoff(Precision::BF16) * mag[i] + rtol * std::fabs(expected);
    const double ratio = std::isnan(got[i]) ? INFINITY : std::fabs(got[i] - expected) / budget;
    if (ratio > worst) worst = ratio, worst_i = i;
  }
  EXPECT_LE(worst, 1.0) << what << ": element " << worst_i << " is " << worst << "x its budget";
  worst_budget_ratio() = std::max(worst_budget_ratio(), worst);
}

void run_cuda() {
  uint64_t seed = fresh_seed();
  for (const LogprobCase& s : kShapes) {
    Rng rng(seed++);
    SCOPED_TRACE(describe(s, rng));
    const LogprobInputs in = make_inputs(rng, s, Precision::BF16);
    const RefLogprob want = reference(in, s, true, s.entropy);

    LogprobCudaShape shape{s.T, s.C, s.V, s.chunk_tokens, s.chunk_vocab, s.scale};
    const size_t ws_bytes = logprob_cuda_workspace_bytes(shape);
    Tensor ws = gpu_bytes(ws_bytes);
    Tensor gh = gpu(in.hidden, DType::BF16), gw = gpu(in.weight, DType::BF16), gt = gpu_ints(in.targets);
    Tensor lp = poisoned(s.T, DType::F32), lse = poisoned(s.T, DType::F32), ent = poisoned(s.T, DType::F32);
    logprob_forward_cuda(f32_ptr(lp), f32_ptr(lse), f32_ptr(ent), bf16_ptr(gh), bf16_ptr(gw), gt.data_as<int32_t>(),
                         shape, ws.data(), ws_bytes, default_stream());
    expect_close(to_floats(lp), want.logprob, {kForwardAtol, kForwardRtol}, "logprob");
    expect_close(to_floats(lse), want.lse, {kForwardAtol, kForwardRtol}, "lse");
    expect_close(to_floats(ent), want.entropy, {kForwardAtol, kForwardRtol}, "entropy");

    Tensor gg = gpu(in.g, DType::F32);
    if (!s.entropy) {  // from zero gradients
      const std::vector<float> zeros_h(in.hidden.size(), 0.0f), zeros_w(in.weight.size(), 0.0f);
      Tensor dh = gpu(zeros_h, DType::BF16), dw = gpu(zeros_w, DType::F32);
      logprob_backward_cuda(bf16_ptr(dh), f32_ptr(dw), f32_ptr(gg), nullptr, bf16_ptr(gh), bf16_ptr(gw),
                            gt.data_as<int32_t>(), f32_ptr(lse), nullptr, shape, ws.data(), ws_bytes, default_stream());
      expect_backward_close(to_floats(dh), want.dhidden, want.dhidden_mag, zeros_h, kBf16Rtol, "dhidden from zero");
      expect_backward_close(to_floats(dw), want.dweight, want.dweight_mag, zeros_w, 0.0, "dweight from zero");
    }

    // Accumulating into non-zero gradients; masked rows of dhidden must keep their exact bits.
    const std::vector<float> dh0 = rng.uniform(in.hidden.size(), -0.1, 0.1, Precision::BF16),
                             dw0 = rng.uniform(in.weight.size(), -0.1, 0.1);
    Tensor dh = gpu(dh0, DType::BF16), dw = gpu(dw0, DType::F32);
    Tensor gH = s.entropy ? gpu(in.h, DType::F32) : Tensor{};
    logprob_backward_cuda(bf16_ptr(dh), f32_ptr(dw), f32_ptr(gg), s.entropy ? f32_ptr(gH) : nullptr, bf16_ptr(gh),
                          bf16_ptr(gw), gt.data_as<int32_t>(), f32_ptr(lse), f32_ptr(ent), shape, ws.data(), ws_bytes,
                          default_stream());
    const std::vector<float> dh_got = to_floats(dh), dw_got = to_floats(dw);
    expect_backward_close(dh_got, want.dhidden, want.dhidden_mag, dh0, kBf16Rtol, "dhidden");
    expect_backward_close(dw_got, want.dweight, want.dweight_mag, dw0, 0.0, "dweight");
    for (int64_t t = 1; t < s.T; t += 3)
      for (int64_t c = 0; c < s.C; ++c)
        ASSERT_EQ(dh_got[t * s.C + c], dh0[t * s.C + c]) << "masked row " << t << " touched";
  }

  // All tokens masked: the backward touches nothing.
  Rng rng(seed);
  SCOPED_TRACE("all masked, seed " + std::to_string(rng.seed()));
  const LogprobCase s{9, 64, 300, 4, 128, false, 1.0f, {}};
  const LogprobInputs in = make_inputs(rng, s, Precision::BF16);
  LogprobCudaShape shape{9, 64, 300, 4, 128};
  const size_t ws_bytes = logprob_cuda_workspace_bytes(shape);
  Tensor ws = gpu_bytes(ws_bytes);
  const std::vector<float> dh0 = rng.uniform(9 * 64, -1.0, 1.0, Precision::BF16),
                           dw0 = rng.uniform(300 * 64, -1.0, 1.0);
  Tensor gh = gpu(in.hidden, DType::BF16), gw = gpu(in.weight, DType::BF16), gt = gpu_ints(in.targets);
  Tensor dh = gpu(dh0, DType::BF16), dw = gpu(dw0, DType::F32), g = gpu(std::vector<float>(9, 0.0f), DType::F32);
  Tensor lse = gpu(std::vector<float>(9, 1.0f), DType::F32);
  logprob_backward_cuda(bf16_ptr(dh), f32_ptr(dw), f32_ptr(g), nullptr, bf16_ptr(gh), bf16_ptr(gw),
                        gt.data_as<int32_t>(), f32_ptr(lse), nullptr, shape, ws.data(), ws_bytes, default_stream());
  EXPECT_EQ(to_floats(dh), dh0);
  EXPECT_EQ(to_floats(dw), dw0);
}

}  // namespace

OpCase logprob_case() { return {"logprob", run_cpu, run_cuda}; }

}  // namespace sqlrl::testing
