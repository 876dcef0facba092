// CUDA masked log-prob (fused lm_head + log-softmax + gather) against the CPU path and a float64
// reference, on shapes whose token and vocab counts leave partial chunks.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/logprob.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace sqlrl {
namespace {

using namespace sqlrl::testing;

struct Problem {
  int64_t T, C, V;
  std::vector<float> hidden, weight;  // bf16-rounded
  std::vector<int32_t> targets;
};

Problem make_problem(int64_t T, int64_t C, int64_t V, Rng& rng) {
  Problem p{T, C, V, round_bf16(rng.uniform(static_cast<size_t>(T * C), -1.0f, 1.0f)),
            round_bf16(rng.uniform(static_cast<size_t>(V * C), -0.5f, 0.5f)),
            rng.ints(static_cast<size_t>(T), 0, static_cast<int32_t>(V - 1))};
  p.targets[0] = static_cast<int32_t>(V - 1);  // the last column of the last vocab chunk
  return p;
}

// float64 reference: logits (times scale), lse, logprob, entropy, and the backward for given g
// (dlogprob) and h (dentropy), with M* = sums of |terms| for the error budgets.
struct Reference {
  std::vector<double> lse, logprob, entropy, dhidden, dweight, dhidden_mag, dweight_mag;
};

Reference reference(const Problem& p, const std::vector<float>& g, const std::vector<float>& h, double scale) {
  Reference r;
  const int64_t T = p.T, C = p.C, V = p.V;
  r.lse.resize(T), r.logprob.resize(T), r.entropy.resize(T);
  r.dhidden.assign(T * C, 0.0), r.dhidden_mag.assign(T * C, 0.0);
  r.dweight.assign(V * C, 0.0), r.dweight_mag.assign(V * C, 0.0);
  std::vector<double> logits(V), d(V);
  for (int64_t t = 0; t < T; ++t) {
    double m = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      double z = 0;
      for (int64_t c = 0; c < C; ++c) z += double{p.hidden[t * C + c]} * p.weight[v * C + c];
      logits[v] = z * scale;
      m = std::max(m, logits[v]);
    }
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(logits[v] - m);
    double lse = m + std::log(s), H = 0;
    for (int64_t v = 0; v < V; ++v) H -= std::exp(logits[v] - lse) * (logits[v] - lse);
    r.lse[t] = lse, r.logprob[t] = logits[p.targets[t]] - lse, r.entropy[t] = H;
    for (int64_t v = 0; v < V; ++v) {
      double log_p = logits[v] - lse, prob = std::exp(log_p);
      d[v] = g.empty() ? 0.0 : g[t] * ((v == p.targets[t] ? 1.0 : 0.0) - prob);
      if (!h.empty()) d[v] -= h[t] * prob * (log_p + H);
      d[v] *= scale;
    }
    for (int64_t v = 0; v < V; ++v)
      for (int64_t c = 0; c < C; ++c) {
        r.dhidden[t * C + c] += d[v] * p.weight[v * C + c];
        r.dhidden_mag[t * C + c] += std::fabs(d[v] * p.weight[v * C + c]);
        r.dweight[v * C + c] += d[v] * p.hidden[t * C + c];
        r.dweight_mag[v * C + c] += std::fabs(d[v] * p.hidden[t * C + c]);
      }
  }
  return r;
}

// Forward: logits are f32 dot products of C bf16 products (error <= C 2^-24 sum|h w| ~ 1e-6 of
// the logit scale here) followed by an f32 log-sum-exp: 1e-4 absolute on values of order log V
// leaves a wide margin while catching any wrong element or chunk seam.
constexpr double kForwardAtol = 1e-4, kForwardRtol = 1e-5;

// Backward: dlogits are stored in bf16 (<= 2^-9 relative each) and summed in f32 by the GEMMs, so
// an element's error is <= 2^-9 of the sum of the magnitudes of its terms; 2^-8 of that budget,
// plus 2^-8 relative for dhidden's own bf16 rounding.
void expect_backward_close(const std::vector<float>& got, const std::vector<double>& want,
                           const std::vector<double>& mag, const std::vector<float>& start, double rtol,
                           const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double expected = want[i] + start[i];
    double budget = 1e-6 + 0x1p-8 * mag[i] + rtol * std::fabs(expected);
    double ratio = std::isnan(got[i]) ? INFINITY : std::fabs(got[i] - expected) / budget;
    if (ratio > worst) worst = ratio, worst_i = i;
  }
  EXPECT_LE(worst, 1.0) << what << ": element " << worst_i << " is " << worst << "x its budget";
}

void check_logprob(int64_t T, int64_t C, int64_t V, int64_t chunk_tokens, int64_t chunk_vocab, bool with_entropy,
                   uint64_t seed, float logit_scale = 1.0f) {
  SCOPED_TRACE(::testing::Message() << "T " << T << " C " << C << " V " << V << " chunks " << chunk_tokens << "x"
                                    << chunk_vocab << " entropy " << with_entropy << " seed " << seed
                                    << " logit_scale " << logit_scale);
  Rng rng(seed);
  Problem p = make_problem(T, C, V, rng);
  // Gradients with a mask: every third token carries none (and token 0 always carries one).
  std::vector<float> g = rng.uniform(static_cast<size_t>(T), -1.0f, 1.0f), h;
  for (int64_t t = 1; t < T; t += 3) g[t] = 0.0f;
  if (with_entropy) {
    h = rng.uniform(static_cast<size_t>(T), -0.5f, 0.5f);
    for (int64_t t = 1; t < T; t += 3) h[t] = 0.0f;
  }
  Reference ref = reference(p, g, h, logit_scale);

  LogprobCudaShape shape{T, C, V, chunk_tokens, chunk_vocab, logit_scale};
  size_t ws_bytes = logprob_cuda_workspace_bytes(shape);
  Tensor ws = gpu_bytes(ws_bytes);
  Tensor gh = gpu(p.hidden, DType::BF16), gw = gpu(p.weight, DType::BF16), gt = gpu_ints(p.targets);
  Tensor lp = poisoned(T, DType::F32), lse = poisoned(T, DType::F32), ent = poisoned(T, DType::F32);
  logprob_forward_cuda(f32_ptr(lp), f32_ptr(lse), f32_ptr(ent), bf16_ptr(gh), bf16_ptr(gw), gt.data_as<int32_t>(),
                       shape, ws.data(), ws_bytes, default_stream());
  expect_close(to_floats(lp), ref.logprob, kForwardAtol, kForwardRtol, "logprob");
  expect_close(to_floats(lse), ref.lse, kForwardAtol, kForwardRtol, "lse");
  expect_close(to_floats(ent), ref.entropy, kForwardAtol, kForwardRtol, "entropy");

  if (!with_entropy) {  // the CPU path (no entropy term) on the same inputs
    std::vector<float> cpu_lp(T), cpu_lse(T), scratch(static_cast<size_t>(std::min<int64_t>(T, 8) * V));
    LogprobShape cpu_shape{T, C, V, 8, logit_scale};
    logprob_forward_cpu(cpu_lp.data(), cpu_lse.data(), p.hidden.data(), p.weight.data(), p.targets.data(), cpu_shape,
                        scratch.data());
    expect_close(to_floats(lp), cpu_lp, kForwardAtol, kForwardRtol, "logprob vs CPU");
    std::vector<float> dh_cpu(static_cast<size_t>(T * C), 0.0f), dw_cpu(static_cast<size_t>(V * C), 0.0f);
    logprob_backward_cpu(dh_cpu.data(), dw_cpu.data(), g.data(), p.hidden.data(), p.weight.data(), p.targets.data(),
                         cpu_lse.data(), cpu_shape, scratch.data());
    // The CPU's f32 backward is far tighter than the bf16 budget: it stands in for the reference.
    std::vector<float> zeros_h(dh_cpu.size(), 0.0f), zeros_w(dw_cpu.size(), 0.0f);
    Tensor dh = gpu(zeros_h, DType::BF16), dw = gpu(zeros_w, DType::F32), gg = gpu(g, DType::F32);
    logprob_backward_cuda(bf16_ptr(dh), f32_ptr(dw), f32_ptr(gg), nullptr, bf16_ptr(gh), bf16_ptr(gw),
                          gt.data_as<int32_t>(), f32_ptr(lse), nullptr, shape, ws.data(), ws_bytes, default_stream());
    expect_backward_close(to_floats(dh), widen(dh_cpu), ref.dhidden_mag, zeros_h, 1.01 / 256, "dhidden vs CPU");
    expect_backward_close(to_floats(dw), widen(dw_cpu), ref.dweight_mag, zeros_w, 0.0, "dweight vs CPU");
  }

  // Accumulating into non-zero gradients; masked rows of dhidden must keep their exact bits.
  auto dh0 = round_bf16(rng.uniform(static_cast<size_t>(T * C), -0.1f, 0.1f));
  auto dw0 = rng.uniform(static_cast<size_t>(V * C), -0.1f, 0.1f);
  Tensor dh = gpu(dh0, DType::BF16), dw = gpu(dw0, DType::F32), gg = gpu(g, DType::F32);
  Tensor gH = with_entropy ? gpu(h, DType::F32) : Tensor{};
  logprob_backward_cuda(bf16_ptr(dh), f32_ptr(dw), f32_ptr(gg), with_entropy ? f32_ptr(gH) : nullptr, bf16_ptr(gh),
                        bf16_ptr(gw), gt.data_as<int32_t>(), f32_ptr(lse), f32_ptr(ent), shape, ws.data(), ws_bytes,
                        default_stream());
  std::vector<float> dh_got = to_floats(dh), dw_got = to_floats(dw);
  expect_backward_close(dh_got, ref.dhidden, ref.dhidden_mag, dh0, 1.01 / 256, "dhidden");
  expect_backward_close(dw_got, ref.dweight, ref.dweight_mag, dw0, 0.0, "dweight");
  for (int64_t t = 1; t < T; t += 3)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(dh_got[t * C + c], dh0[t * C + c]) << "masked row " << t << " touched";
}

TEST(CudaLogprob, ForwardAndBackwardMatchReferenceAcrossChunkSeams) {
  SQLRL_REQUIRE_CUDA();
  uint64_t seed = fresh_seed();
  check_logprob(37, 64, 1003, 16, 256, false, seed++);   // partial token and vocab chunks
  check_logprob(1, 64, 1003, 16, 4096, false, seed++);   // one token, one vocab tile
  check_logprob(17, 72, 517, 64, 100, false, seed++);    // a chunk larger than T; C not a power of two
}

TEST(CudaLogprob, EntropyAndItsGradient) {
  SQLRL_REQUIRE_CUDA();
  check_logprob(29, 64, 777, 8, 128, true, fresh_seed());
}

// GRPO's log-probs at the sampling temperature T: logits / T, gradients with the 1/T factor.
TEST(CudaLogprob, ScaledLogitsMatchTheReferenceAndTheCpu) {
  SQLRL_REQUIRE_CUDA();
  uint64_t seed = fresh_seed();
  check_logprob(37, 64, 1003, 16, 256, false, seed++, 1.0f / 0.6f);
  check_logprob(29, 64, 777, 8, 128, true, seed++, 1.0f / 0.6f);
}

TEST(CudaLogprob, AllMaskedBackwardTouchesNothing) {
  SQLRL_REQUIRE_CUDA();
  Rng rng(fresh_seed());
  Problem p = make_problem(9, 64, 300, rng);
  LogprobCudaShape shape{9, 64, 300, 4, 128};
  size_t ws_bytes = logprob_cuda_workspace_bytes(shape);
  Tensor ws = gpu_bytes(ws_bytes);
  auto dh0 = round_bf16(rng.uniform(9 * 64, -1.0f, 1.0f));
  auto dw0 = rng.uniform(300 * 64, -1.0f, 1.0f);
  Tensor gh = gpu(p.hidden, DType::BF16), gw = gpu(p.weight, DType::BF16), gt = gpu_ints(p.targets);
  Tensor dh = gpu(dh0, DType::BF16), dw = gpu(dw0, DType::F32), g = gpu(std::vector<float>(9, 0.0f), DType::F32);
  Tensor lse = gpu(std::vector<float>(9, 1.0f), DType::F32);
  logprob_backward_cuda(bf16_ptr(dh), f32_ptr(dw), f32_ptr(g), nullptr, bf16_ptr(gh), bf16_ptr(gw),
                        gt.data_as<int32_t>(), f32_ptr(lse), nullptr, shape, ws.data(), ws_bytes, default_stream());
  EXPECT_EQ(to_floats(dh), dh0);
  EXPECT_EQ(to_floats(dw), dw0);
}

}  // namespace
}  // namespace sqlrl
