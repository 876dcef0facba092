// LoRA adapters on the CUDA model (model/cuda_lora.h) against the CPU path (model/lora.h +
// train.h + infer.h, itself held against PEFT in tests/model/test_lora*.cpp): random bf16-exact
// Qwen2 (biases, untied) and Qwen3 (q/k norm, tied) models of 3 layers (head_dim 64), 308 tokens
// in sequences of 97, 1, 0, 150 and 60, and a rank-8 adapter (alpha 16: scale 2) on all seven
// projections of every layer with non-zero A (PEFT's init) and B (Philox normals), both
// bf16-exact so the CPU's f32 and the device's bf16 copy hold the same numbers.
//
// Budgets: those of test_train.cpp / test_infer.cpp for the same comparisons without an adapter
// (model_cuda_util.h), with R, the bf16 stores along a path, counted for the adapter: each adapted
// projection adds one store (its output is stored again once its low-rank term is added) and one
// more of the term itself (u = x A^T is stored in bf16 before its product with B), 14 per layer.
//  - logits: per element 12 sqrt(R) u ||g W[v]||_2 (u = 2^-9; model_cuda_util.h says why);
//  - log-probs: b[target] + max_v b[v] (a log-prob is a logit minus a log-sum-exp);
//  - the adapter's effect (with adapter minus without, on the device vs on the CPU) is off by
//    at most the two runs' errors: per element b_lora + b_base, and in L2 a third of the L2 norm
//    of those per-element budgets (each budget is 12 standard deviations of its element's error,
//    so the L2 error of the difference is at most 2/12 of it in expectation; 1/3 leaves 2x). The
//    test requires that L2 bound to be under 0.4 of the effect's own norm (measured on the CPU:
//    0.13 for logits, 0.29 for log-probs), so an adapter ignored on the device (an error of the
//    whole effect) fails by 2.5x, and one applied at half or twice its scale fails too;
//  - the adapter's gradients: kGradSigmas sqrt(2R) u relative L2 per tensor and over the whole
//    vector (test_train.cpp's large-model budget: forward and backward stores in quadrature).
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/adamw.h"
#include "model/cuda_lora.h"
#include "model/lora.h"
#include "model_cuda_util.h"
#include "runtime/random.h"
#include "runtime/tensor.h"
#include "tests/model/fixture.h"

namespace sqlrl {
namespace {

using namespace sqlrl::testing;

constexpr double kGradSigmas = 4;  // as test_train.cpp's CudaModelTrainLarge
// B's standard deviation: with scale 2, rank 8 and u = x A^T of variance ~1/3 (A ~ U(+-1/sqrt(in))
// against RMS-normalised inputs), the low-rank term has rms 2 sqrt(8/3) 0.1 ~ 0.33 against the
// base product's ~1: a third of each projection. Through 3 layers that moves the logits by about
// their own rms (CPU, measured: effect rms 0.92 / 1.03 against logits rms 1.0, Qwen2 / Qwen3).
constexpr float kBStd = 0.1f;
// The largest L2 bound on an effect's error, as a share of the effect, that still makes the
// effect checks fail an ignored or mis-scaled adapter (see check_effect).
constexpr double kDiscrimination = 0.4;

int lora_roundings(const QwenConfig& c) {
  return bf16_roundings(c) + 2 * kLoraModules * static_cast<int>(c.num_hidden_layers);
}

QwenConfig lora_test_config(QwenArch arch) {
  QwenConfig c;
  c.arch = arch;
  c.vocab_size = 512;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = arch == QwenArch::Qwen3;
  return c;
}

float bf16_exact(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }

struct LoraCase {
  QwenModel host;
  LoraAdapter adapter;
  RandomBatch b;
  int64_t T() const { return b.batch.num_tokens(); }
  int64_t V() const { return host.config.vocab_size; }
};

LoraCase make_case(QwenArch arch, uint32_t seed) {
  LoraCase k;
  k.host = random_model(lora_test_config(arch), seed);
  LoraConfig lc;
  lc.rank = 8;
  lc.alpha = 16;
  lc.target_pattern = "all-linear";
  k.adapter = init_adapter(lc, k.host.config, seed);
  uint64_t stream = 0;
  for (const LoraView& v : k.adapter.table)
    if (v.is_b)
      fill_normal(wrap(k.adapter.params.data() + v.offset, {v.numel()}, DType::F32, cpu_device(), nullptr), seed + 1,
                  stream++, 0.0f, kBStd);
  for (float& p : k.adapter.params) p = bf16_exact(p);
  k.b = random_batch(k.V(), seed + 2, {97, 1, 0, 150, 60});
  return k;
}

// Per vocabulary entry v: 12 sqrt(R) u ||g W[v]||_2 (model_cuda_util.h).
std::vector<float> logit_budget(const QwenModel& host, int roundings) {
  const QwenConfig& c = host.config;
  const ModelWeights w = QwenModel::bind_weights(host, const_cast<float*>(host.params.data()));
  const double k = kBf16Sigmas * std::sqrt(static_cast<double>(roundings)) * kBf16Roundoff;
  std::vector<float> row(static_cast<size_t>(c.vocab_size));
  for (int64_t v = 0; v < c.vocab_size; ++v) {
    double sq = 0;
    for (int64_t i = 0; i < c.hidden_size; ++i) {
      const double gw = static_cast<double>(w.final_norm[i]) * w.lm_head[v * c.hidden_size + i];
      sq += gw * gw;
    }
    row[static_cast<size_t>(v)] = static_cast<float>(k * std::sqrt(sq));
  }
  return row;
}

std::vector<float> cpu_logits(const QwenModel& host, const PackedBatch& batch, const LoraAdapter* lora) {
  const int64_t T = batch.num_tokens();
  TrainState s = make_train_state(host.config, options(T));
  std::vector<float> out(static_cast<size_t>(T * host.config.vocab_size));
  forward_logits(host, s, batch, out.data(), lora);
  return out;
}

std::vector<float> cpu_logprobs(const QwenModel& host, const RandomBatch& b, const LoraAdapter* lora) {
  const int64_t T = b.batch.num_tokens();
  TrainState s = make_train_state(host.config, options(T));
  std::vector<float> lp(static_cast<size_t>(T));
  forward_logprobs(host, s, b.batch, b.targets, lp.data(), nullptr, 1.0f, lora);
  return lp;
}

// The adapter's gradients of the masked token-mean log-prob, on the CPU.
std::vector<float> cpu_adapter_grads(QwenModel& host, LoraAdapter& adapter, const RandomBatch& b) {
  const int64_t T = b.batch.num_tokens();
  TrainState s = make_train_state(host.config, options(T));
  std::vector<float> lp(static_cast<size_t>(T));
  forward_logprobs(host, s, b.batch, b.targets, lp.data(), nullptr, 1.0f, &adapter);
  alloc_lora_grads(adapter);
  backward_logprobs(host, s, b.batch, b.targets, b.dlogprobs.data(), nullptr, nullptr, &adapter);
  return adapter.grads;
}

std::vector<float> gpu_logits(const CudaModel& m, const PackedBatch& batch, const CudaLora* lora) {
  CudaTrainState s = make_cuda_train_state(m, options(batch.num_tokens()));
  std::vector<float> out(static_cast<size_t>(batch.num_tokens() * m.config().vocab_size), NAN);
  forward_logits_cuda(m, s, batch, out.data(), lora);
  return out;
}

std::vector<float> gpu_logprobs(const CudaModel& m, const RandomBatch& b, const CudaLora* lora) {
  CudaTrainState s = make_cuda_train_state(m, options(b.batch.num_tokens(), 16));
  std::vector<float> lp(static_cast<size_t>(b.batch.num_tokens()), NAN);
  forward_logprobs_cuda(m, s, b.batch, b.targets, lp.data(), nullptr, 1.0f, lora);
  return lp;
}

// The adapter's gradients on the device (zeroed first), optionally recomputing layers.
std::vector<float> gpu_adapter_grads(CudaModel& m, CudaLora& lora, const RandomBatch& b,
                                     std::vector<bool> recompute = {}) {
  const int64_t T = b.batch.num_tokens();
  CudaTrainState s = make_cuda_train_state(m, options(T, 16, std::move(recompute)));
  std::vector<float> lp(static_cast<size_t>(T), NAN);
  forward_logprobs_cuda(m, s, b.batch, b.targets, lp.data(), nullptr, 1.0f, &lora);
  zero_lora_grads_cuda(lora);
  backward_logprobs_cuda(m, s, b.batch, b.targets, b.dlogprobs.data(), nullptr, &lora);
  return download_lora_grads(lora);
}

double l2(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

// The adapter's effect on a tensor of results (rows x vocab or rows x 1): device vs CPU, against
// per-element budgets with and without the adapter. Returns the worst per-element ratio (<= 1
// passes) and sets `l2_ratio` (the effect's L2 error over a third of the budgets' L2 norm, <= 1
// passes) and `discrimination` (that L2 bound over the effect's own norm: the test is only
// meaningful when an ignored adapter, error = the whole effect, would fail: required < 0.4).
struct EffectCheck {
  double element = 0, l2_ratio = 0, discrimination = 0;
};
EffectCheck check_effect(const std::vector<float>& gpu_with, const std::vector<float>& gpu_without,
                         const std::vector<float>& cpu_with, const std::vector<float>& cpu_without,
                         const std::vector<float>& budget_sum) {
  EffectCheck r;
  const std::vector<float> eg = minus(gpu_with, gpu_without), ec = minus(cpu_with, cpu_without);
  r.element = budget_ratio(eg.data(), ec.data(), budget_sum.data(), static_cast<int64_t>(eg.size()));
  const double bound = l2(budget_sum) / 3;
  r.l2_ratio = l2(minus(eg, ec)) / bound;
  if (std::isnan(r.l2_ratio)) r.l2_ratio = INFINITY;
  r.discrimination = bound / l2(ec);
  return r;
}

// Budgets per element of [rows, V] logits: b_lora (adapter) and b_lora + b_base (its effect).
struct LogitBudgets {
  std::vector<float> with, sum;
};
LogitBudgets logit_budgets(const QwenModel& host, int64_t rows) {
  const std::vector<float> bl = logit_budget(host, lora_roundings(host.config)),
                           bb = logit_budget(host, bf16_roundings(host.config));
  LogitBudgets r;
  for (int64_t t = 0; t < rows; ++t)
    for (size_t v = 0; v < bl.size(); ++v) r.with.push_back(bl[v]), r.sum.push_back(bl[v] + bb[v]);
  return r;
}

// Per token: b[target] + max_v b[v] (+ 1e-4 of f32 slack), with R for the adapter or not.
std::vector<float> logprob_budget(const QwenModel& host, const RandomBatch& b, int roundings) {
  const std::vector<float> row = logit_budget(host, roundings);
  const float top = *std::max_element(row.begin(), row.end());
  std::vector<float> out;
  for (int32_t t : b.targets) out.push_back(row[static_cast<size_t>(t)] + top + 1e-4f);
  return out;
}

class CudaLoraTest : public ::testing::TestWithParam<QwenArch> {};

// Runs without a device: the fixture's adapter must move the CPU logits and log-probs far beyond
// what bf16 may move them, or the effect checks below would pass with the adapter ignored.
TEST_P(CudaLoraTest, FixtureAdapterMovesTheModelBeyondTheBf16Budget) {
  LoraCase k = make_case(GetParam(), 41);
  const std::vector<float> with = cpu_logits(k.host, k.b.batch, &k.adapter), base = cpu_logits(k.host, k.b.batch, nullptr);
  const LogitBudgets bud = logit_budgets(k.host, k.T());
  const std::vector<float> effect = minus(with, base);
  const double discrimination = l2(bud.sum) / 3 / l2(effect);
  const std::vector<float> lp_with = cpu_logprobs(k.host, k.b, &k.adapter), lp_base = cpu_logprobs(k.host, k.b, nullptr);
  const std::vector<float> lb = logprob_budget(k.host, k.b, lora_roundings(k.host.config)),
                           lbb = logprob_budget(k.host, k.b, bf16_roundings(k.host.config));
  std::vector<float> lp_sum(lb.size());
  for (size_t i = 0; i < lb.size(); ++i) lp_sum[i] = lb[i] + lbb[i];
  const double lp_discrimination = l2(lp_sum) / 3 / l2(minus(lp_with, lp_base));
  std::printf("adapter effect: logits rms %.3g (logits rms %.3g), L2 bound / effect %.3g; log-probs L2 bound / effect "
              "%.3g (both must be < %.2g)\n",
              l2(effect) / std::sqrt(static_cast<double>(effect.size())),
              l2(base) / std::sqrt(static_cast<double>(base.size())), discrimination, lp_discrimination,
              kDiscrimination);
  EXPECT_LT(discrimination, kDiscrimination);
  EXPECT_LT(lp_discrimination, kDiscrimination);
}

// (a) Log-probs (and logits) with the adapter, and the adapter's effect on both.
TEST_P(CudaLoraTest, LogprobsAndLogitsWithAdapterMatchCpu) {
  SQLRL_REQUIRE_CUDA();
  LoraCase k = make_case(GetParam(), 42);
  const int64_t T = k.T(), V = k.V();
  CudaModel m = upload_model(k.host);
  CudaLora lora = upload_lora(k.adapter, m, /*grads=*/false);

  const std::vector<float> cw = cpu_logits(k.host, k.b.batch, &k.adapter), cb = cpu_logits(k.host, k.b.batch, nullptr);
  const std::vector<float> gw = gpu_logits(m, k.b.batch, &lora), gb = gpu_logits(m, k.b.batch, nullptr);
  const LogitBudgets bud = logit_budgets(k.host, T);
  const double r_total = budget_ratio(gw.data(), cw.data(), bud.with.data(), T * V);
  const EffectCheck e = check_effect(gw, gb, cw, cb, bud.sum);

  const std::vector<float> lcw = cpu_logprobs(k.host, k.b, &k.adapter), lcb = cpu_logprobs(k.host, k.b, nullptr);
  const std::vector<float> lgw = gpu_logprobs(m, k.b, &lora), lgb = gpu_logprobs(m, k.b, nullptr);
  const std::vector<float> lb = logprob_budget(k.host, k.b, lora_roundings(k.host.config)),
                           lbb = logprob_budget(k.host, k.b, bf16_roundings(k.host.config));
  std::vector<float> lsum(lb.size());
  for (size_t i = 0; i < lb.size(); ++i) lsum[i] = lb[i] + lbb[i];
  const double r_lp = budget_ratio(lgw.data(), lcw.data(), lb.data(), T);
  const EffectCheck le = check_effect(lgw, lgb, lcw, lcb, lsum);
  std::printf("with adapter: logits %.3g, log-probs %.3g of the bf16 budget; adapter effect on logits: worst element "
              "%.3g, L2 %.3g of budget (bound / effect %.3g); on log-probs: %.3g, L2 %.3g (bound / effect %.3g)\n",
              r_total, r_lp, e.element, e.l2_ratio, e.discrimination, le.element, le.l2_ratio, le.discrimination);
  EXPECT_LE(r_total, 1.0);
  EXPECT_LE(r_lp, 1.0);
  EXPECT_LE(e.element, 1.0);
  EXPECT_LE(e.l2_ratio, 1.0);
  EXPECT_LT(e.discrimination, kDiscrimination);
  EXPECT_LE(le.element, 1.0);
  EXPECT_LE(le.l2_ratio, 1.0);
  EXPECT_LT(le.discrimination, kDiscrimination);
}

// (b) dA and dB of every adapted projection against the CPU backward's, the whole vector and
// each tensor; layers recomputed in the backward give the same bits; the base's own gradient
// buffer (allocated here) is never written: the base is frozen.
TEST_P(CudaLoraTest, AdapterGradientsMatchCpu) {
  SQLRL_REQUIRE_CUDA();
  LoraCase k = make_case(GetParam(), 43);
  const std::vector<float> want = cpu_adapter_grads(k.host, k.adapter, k.b);
  CudaModel m = upload_model(k.host);  // with a (zeroed) base gradient buffer
  CudaLora lora = upload_lora(k.adapter, m);
  const std::vector<float> got = gpu_adapter_grads(m, lora, k.b);
  const std::vector<float> again = gpu_adapter_grads(m, lora, k.b, std::vector<bool>(3, true));
  const double budget = kGradSigmas * std::sqrt(2.0 * lora_roundings(k.host.config)) * kBf16Roundoff;
  const double whole = relative_l2(got, want);
  double worst = 0;
  std::string worst_name;
  for (const LoraView& v : k.adapter.table) {
    auto at = [&](const std::vector<float>& g) {
      return std::vector<float>(g.begin() + v.offset, g.begin() + v.offset + v.numel());
    };
    const double err = relative_l2(at(got), at(want));
    EXPECT_LE(err, budget) << "gradient of " << v.hf_name;
    EXPECT_GT(l2(at(want)), 0.0) << v.hf_name << ": a zero reference gradient checks nothing";
    if (!(err <= worst)) worst = err, worst_name = v.hf_name;
  }
  std::printf("%zu adapter gradients: whole vector relative L2 %.3g, worst tensor %.3g (%s), budget %.3g\n",
              k.adapter.table.size(), whole, worst, worst_name.c_str(), budget);
  EXPECT_LE(whole, budget);
  EXPECT_EQ(0, std::memcmp(got.data(), again.data(), sizeof(float) * got.size())) << "recomputed layers";
  int64_t written = 0;
  for (float g : download_grads(m)) written += g != 0.0f;
  EXPECT_EQ(written, 0) << "the backward with an adapter wrote base gradients";
}

// (c) Prefill and paged decode with the adapter (two sequences, blocks of 16, a prefill ending
// inside a block) against CPU forward_cached with it, call for call; and the adapter's effect.
TEST_P(CudaLoraTest, CachedForwardWithAdapterMatchesCpu) {
  SQLRL_REQUIRE_CUDA();
  LoraCase k = make_case(GetParam(), 44);
  const int64_t V = k.V();
  RandomBatch rb = random_batch(V, 45, {37, 20, 6, 6});
  const auto& t = rb.batch.tokens;
  const std::vector<int32_t> p0(t.begin(), t.begin() + 37), p1(t.begin() + 37, t.begin() + 57),
      d0(t.begin() + 57, t.begin() + 63), d1(t.begin() + 63, t.end());
  CudaModel m = upload_model(k.host, 0, CudaStream{}, false);
  CudaLora lora = upload_lora(k.adapter, m, false);
  // Every call's logits, concatenated: [prefill rows (all positions), then 2 rows per decode step].
  auto run_gpu = [&](const CudaLora* l) {
    CudaKVCache cache = make_cuda_kv_cache(m, 16, 16);
    const int64_t a = kv_new_sequence(cache.book), b = kv_new_sequence(cache.book);
    Tensor logits;
    forward_cached_cuda(m, cache, {{a, p0}, {b, p1}}, logits, true, l);
    std::vector<float> out = to_floats(logits);
    for (size_t i = 0; i < d0.size(); ++i) {
      forward_cached_cuda(m, cache, {{a, {d0[i]}}, {b, {d1[i]}}}, logits, false, l);
      std::vector<float> step = to_floats(logits);
      out.insert(out.end(), step.begin(), step.end());
    }
    return out;
  };
  auto run_cpu = [&](const LoraAdapter* l) {
    PagedKVCache cache = make_kv_cache(k.host.config, 16, 16);
    const int64_t a = kv_new_sequence(cache), b = kv_new_sequence(cache);
    std::vector<float> logits;
    forward_cached(k.host, cache, {{a, p0}, {b, p1}}, logits, true, l);
    std::vector<float> out = logits;
    for (size_t i = 0; i < d0.size(); ++i) {
      forward_cached(k.host, cache, {{a, {d0[i]}}, {b, {d1[i]}}}, logits, false, l);
      out.insert(out.end(), logits.begin(), logits.end());
    }
    return out;
  };
  const std::vector<float> gw = run_gpu(&lora), gb = run_gpu(nullptr), cw = run_cpu(&k.adapter), cb = run_cpu(nullptr);
  ASSERT_EQ(gw.size(), cw.size());
  const int64_t rows = static_cast<int64_t>(cw.size()) / V;
  ASSERT_EQ(rows, 57 + 2 * static_cast<int64_t>(d0.size()));
  const LogitBudgets bud = logit_budgets(k.host, rows);
  const double r_total = budget_ratio(gw.data(), cw.data(), bud.with.data(), rows * V);
  const EffectCheck e = check_effect(gw, gb, cw, cb, bud.sum);
  std::printf("paged prefill + decode with adapter: %.3g of the bf16 budget; effect: worst element %.3g, L2 %.3g "
              "(bound / effect %.3g)\n",
              r_total, e.element, e.l2_ratio, e.discrimination);
  EXPECT_LE(r_total, 1.0);
  EXPECT_LE(e.element, 1.0);
  EXPECT_LE(e.l2_ratio, 1.0);
  EXPECT_LT(e.discrimination, kDiscrimination);
}

// (d) With B = 0 the adapter adds exactly zero after each base product: the device computes the
// base model's numbers (compared as values: +0 and -0 are equal), in training and in decode.
TEST_P(CudaLoraTest, ZeroBGivesTheBaseModelExactly) {
  SQLRL_REQUIRE_CUDA();
  LoraCase k = make_case(GetParam(), 46);
  for (const LoraView& v : k.adapter.table)
    if (v.is_b) std::fill_n(k.adapter.params.begin() + v.offset, v.numel(), 0.0f);
  CudaModel m = upload_model(k.host);
  CudaLora lora = upload_lora(k.adapter, m, false);
  auto differ = [](const std::vector<float>& a, const std::vector<float>& b) {
    int64_t n = a.size() == b.size() ? 0 : 1;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += !(a[i] == b[i]);
    return n;
  };
  EXPECT_EQ(differ(gpu_logits(m, k.b.batch, &lora), gpu_logits(m, k.b.batch, nullptr)), 0) << "training logits";
  EXPECT_EQ(differ(gpu_logprobs(m, k.b, &lora), gpu_logprobs(m, k.b, nullptr)), 0) << "log-probs";
  std::vector<std::vector<float>> cached;
  for (const CudaLora* l : {(const CudaLora*)&lora, (const CudaLora*)nullptr}) {
    CudaKVCache cache = make_cuda_kv_cache(m, 8, 16);
    // An adapter's decode step runs the unfused path (model/cuda_decode.h applies none); the
    // base's would take the fused kernels, which round elsewhere: compare like with like.
    cache.decode_mode = CudaDecodeMode::unfused;
    const int64_t h = kv_new_sequence(cache.book);
    Tensor logits;
    const std::vector<int32_t> prompt(k.b.batch.tokens.begin(), k.b.batch.tokens.begin() + 40);
    forward_cached_cuda(m, cache, {{h, prompt}}, logits, true, l);
    cached.push_back(to_floats(logits));
    forward_cached_cuda(m, cache, {{h, {k.b.batch.tokens[40]}}}, logits, false, l);
    std::vector<float> step = to_floats(logits);
    cached.back().insert(cached.back().end(), step.begin(), step.end());
  }
  EXPECT_EQ(differ(cached[0], cached[1]), 0) << "paged prefill + decode";
}

// (e) One AdamW step over the adapter (clipped, reusing grad_norm_cuda's sum) matches the CPU
// AdamW on the same gradients, refreshes the adapter's bf16 copy, and leaves the base's master
// and bf16 weights as they were.
TEST_P(CudaLoraTest, AdamWStepMovesOnlyTheAdapterAndMatchesCpu) {
  SQLRL_REQUIRE_CUDA();
  LoraCase k = make_case(GetParam(), 47);
  CudaModel m = upload_model(k.host);
  CudaLora lora = upload_lora(k.adapter, m);
  const std::vector<float> base_master = to_floats(m.master), base_bf16 = to_floats(m.weights);
  const std::vector<float> grads = gpu_adapter_grads(m, lora, k.b);
  AdamWConfig config;
  CudaAdamW opt = make_cuda_adamw(lora, config);
  ASSERT_EQ(opt.m.numel(), k.adapter.num_params);
  const double sq = grad_sq_sum_cpu(grads.data(), k.adapter.num_params);
  const double norm = grad_norm_cuda(lora, opt);
  // The same f64 sum of squares in another order: relative differences near 1e-15.
  EXPECT_NEAR(norm, std::sqrt(sq), 1e-9 * std::sqrt(sq));
  ASSERT_GT(norm, 0.0);
  const float max_norm = static_cast<float>(0.5 * norm);  // clips
  adamw_step_cuda(lora, opt, 1e-3f, max_norm, /*sq_sum_ready=*/true);
  std::vector<float> mom(grads.size(), 0.0f), vel(grads.size(), 0.0f), params = k.adapter.params;
  adamw_cpu(params.data(), mom.data(), vel.data(), grads.data(), k.adapter.num_params, config, 1, 1e-3f,
            clip_coefficient(sq, max_norm));
  LoraAdapter back = make_adapter(k.adapter.config, k.host.config);
  download_lora(lora, back);
  // f32 element-wise update, the same formula: within a few f32 ulps of the parameter.
  double worst = 0;
  int64_t moved = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    worst = std::max(worst, std::fabs(back.params[i] - params[i]) / (std::fabs(params[i]) + 1e-3));
    moved += back.params[i] != k.adapter.params[i];
  }
  EXPECT_LE(worst, 1e-5);
  EXPECT_GT(moved, static_cast<int64_t>(params.size()) / 2);
  const std::vector<float> bf16 = to_floats(lora.weights);
  int64_t wrong = 0;
  for (size_t i = 0; i < bf16.size(); ++i) wrong += bf16[i] != bf16_exact(back.params[i]);
  EXPECT_EQ(wrong, 0) << "the adapter's bf16 copy is not the rounding of its updated master";
  EXPECT_EQ(0, std::memcmp(base_master.data(), to_floats(m.master).data(), sizeof(float) * base_master.size()))
      << "the base's master weights moved";
  EXPECT_EQ(0, std::memcmp(base_bf16.data(), to_floats(m.weights).data(), sizeof(float) * base_bf16.size()))
      << "the base's bf16 weights moved";
}

// (f) A frozen base (upload_frozen_model: bf16 weights only, no master, no gradients) trains the
// adapter: the same gradient bits as over a full upload, a step that changes the adapter's
// log-probs as the CPU's updated adapter does, and the base's bytes untouched throughout.
TEST_P(CudaLoraTest, FrozenBaseTrainsTheAdapter) {
  SQLRL_REQUIRE_CUDA();
  LoraCase k = make_case(GetParam(), 48);
  CudaModel full = upload_model(k.host);
  CudaModel frozen = upload_frozen_model(k.host);
  ASSERT_FALSE(frozen.master.defined());
  ASSERT_FALSE(frozen.grads.defined());
  const std::vector<float> base_bf16 = to_floats(frozen.weights);
  CudaLora on_full = upload_lora(k.adapter, full), lora = upload_lora(k.adapter, frozen);
  const std::vector<float> want = gpu_adapter_grads(full, on_full, k.b);
  const std::vector<float> got = gpu_adapter_grads(frozen, lora, k.b);
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size()))
      << "a frozen base gives other adapter gradients than a full upload";
  const std::vector<float> before = gpu_logprobs(frozen, k.b, &lora);
  CudaAdamW opt = make_cuda_adamw(lora, AdamWConfig{});
  adamw_step_cuda(lora, opt, 1e-2f, 1.0f);
  const std::vector<float> after = gpu_logprobs(frozen, k.b, &lora);
  int64_t changed = 0;
  for (size_t i = 0; i < after.size(); ++i) changed += after[i] != before[i];
  EXPECT_GT(changed, static_cast<int64_t>(after.size()) / 2) << "the step did not reach the forward";
  // The updated adapter on the CPU: the device's log-probs with it within the bf16 budget.
  LoraAdapter stepped = make_adapter(k.adapter.config, k.host.config);
  download_lora(lora, stepped);
  for (float& p : stepped.params) p = bf16_exact(p);  // what the device's GEMMs read
  const std::vector<float> cpu_after = cpu_logprobs(k.host, k.b, &stepped);
  const std::vector<float> lb = logprob_budget(k.host, k.b, lora_roundings(k.host.config));
  const double r = budget_ratio(after.data(), cpu_after.data(), lb.data(), k.T());
  std::printf("frozen base, after one step: log-probs %.3g of the bf16 budget\n", r);
  EXPECT_LE(r, 1.0);
  EXPECT_EQ(0, std::memcmp(base_bf16.data(), to_floats(frozen.weights).data(), sizeof(float) * base_bf16.size()))
      << "the frozen base's weights moved";
  // The CudaModel AdamW refuses a frozen base by name instead of dereferencing a missing buffer.
  CudaAdamW base_opt = make_cuda_adamw(frozen, AdamWConfig{});
  EXPECT_THROW(adamw_step_cuda(frozen, base_opt, 1e-3f, 0.0f), Error);
}

// A backward must run with the adapter its forward ran with (the activations are the adapted
// model's); and a base without gradients cannot run a base backward.
TEST_P(CudaLoraTest, BackwardRefusesAMismatchedAdapter) {
  SQLRL_REQUIRE_CUDA();
  LoraCase k = make_case(GetParam(), 49);
  CudaModel m = upload_frozen_model(k.host);
  CudaLora lora = upload_lora(k.adapter, m);
  const int64_t T = k.T();
  CudaTrainState s = make_cuda_train_state(m, options(T));
  std::vector<float> lp(static_cast<size_t>(T));
  forward_logprobs_cuda(m, s, k.b.batch, k.b.targets, lp.data());
  EXPECT_THROW(backward_logprobs_cuda(m, s, k.b.batch, k.b.targets, k.b.dlogprobs.data(), nullptr, &lora), Error);
  forward_logprobs_cuda(m, s, k.b.batch, k.b.targets, lp.data(), nullptr, 1.0f, &lora);
  EXPECT_THROW(backward_logprobs_cuda(m, s, k.b.batch, k.b.targets, k.b.dlogprobs.data()), Error);
}

INSTANTIATE_TEST_SUITE_P(Arch, CudaLoraTest, ::testing::Values(QwenArch::Qwen2, QwenArch::Qwen3),
                         [](const auto& info) { return info.param == QwenArch::Qwen2 ? "Qwen2" : "Qwen3"; });

}  // namespace
}  // namespace sqlrl
