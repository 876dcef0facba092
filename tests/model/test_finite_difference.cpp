// Backward of the f32 model against central finite differences of an independent float64
// reference of the same network (written here, plain loops), on 1-layer models small enough
// to perturb every parameter.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>

#include "fixture.h"
#include "model/lora.h"

namespace sqlrl {
namespace {

using Vec = std::vector<double>;

struct RefModel {
  const QwenModel& m;
  const Vec& p;  // parameters in the model's table layout, as doubles
  const double* at(const std::string& short_name) const {
    for (const ParamView& v : m.table)
      if (v.spec.name == short_name) return p.data() + v.offset;
    return nullptr;
  }
};

Vec rmsnorm(const Vec& x, const double* w, int64_t rows, int64_t dim, double eps) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += x[r * dim + i] * x[r * dim + i];
    double s = 1.0 / std::sqrt(ss / dim + eps);
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = w[i] * x[r * dim + i] * s;
  }
  return y;
}

Vec linear(const Vec& x, const double* w, const double* b, int64_t T, int64_t in, int64_t out) {
  Vec y(static_cast<size_t>(T * out));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? b[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) s += x[t * in + i] * w[o * in + i];
      y[t * out + o] = s;
    }
  return y;
}

void rope(Vec& x, const std::vector<int32_t>& pos, int64_t heads, int64_t D, double theta) {
  for (size_t t = 0; t < pos.size(); ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        double angle = pos[t] * std::pow(theta, -2.0 * i / D);
        double* v = x.data() + (t * heads + h) * D;
        double a = v[i], b = v[i + D / 2];
        v[i] = a * std::cos(angle) - b * std::sin(angle);
        v[i + D / 2] = b * std::cos(angle) + a * std::sin(angle);
      }
}

// The logits [T, V] of the float64 network.
Vec reference_logits(const RefModel& r, const PackedBatch& b) {
  const QwenConfig& c = r.m.config;
  int64_t T = b.num_tokens(), C = c.hidden_size, H = c.num_attention_heads, KVH = c.num_key_value_heads,
          D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  double eps = c.rms_norm_eps;
  Vec x(static_cast<size_t>(T * C));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < C; ++i) x[t * C + i] = r.at("embed")[b.tokens[t] * C + i];
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    auto P = [&](const char* n) { return r.at("L" + std::to_string(l) + "." + n); };
    Vec h = rmsnorm(x, P("attn_norm"), T, C, eps);
    Vec q = linear(h, P("wq"), P("bq"), T, C, H * D), k = linear(h, P("wk"), P("bk"), T, C, KVH * D),
        v = linear(h, P("wv"), P("bv"), T, C, KVH * D);
    if (c.has_qk_norm()) {
      q = rmsnorm(q, P("q_norm"), T * H, D, eps);
      k = rmsnorm(k, P("k_norm"), T * KVH, D, eps);
    }
    rope(q, b.positions, H, D, c.rope_theta);
    rope(k, b.positions, KVH, D, c.rope_theta);
    Vec att(static_cast<size_t>(T * H * D), 0.0);
    for (int64_t s = 0; s < b.num_seqs(); ++s)
      for (int64_t i = b.cu_seqlens[s]; i < b.cu_seqlens[s + 1]; ++i)
        for (int64_t hh = 0; hh < H; ++hh) {
          int64_t kv = hh / (H / KVH);
          Vec sc;
          double mx = -INFINITY, sum = 0;
          for (int64_t j = b.cu_seqlens[s]; j <= i; ++j) {
            double d = 0;
            for (int64_t e = 0; e < D; ++e) d += q[(i * H + hh) * D + e] * k[(j * KVH + kv) * D + e];
            sc.push_back(d / std::sqrt(static_cast<double>(D)));
            mx = std::max(mx, sc.back());
          }
          for (double& e : sc) sum += (e = std::exp(e - mx));
          for (int64_t j = b.cu_seqlens[s]; j <= i; ++j)
            for (int64_t e = 0; e < D; ++e)
              att[(i * H + hh) * D + e] += sc[j - b.cu_seqlens[s]] / sum * v[(j * KVH + kv) * D + e];
        }
    Vec o = linear(att, P("wo"), P("bo"), T, H * D, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    h = rmsnorm(x, P("mlp_norm"), T, C, eps);
    Vec g = linear(h, P("w_gate"), nullptr, T, C, I), u = linear(h, P("w_up"), nullptr, T, C, I);
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
    Vec dn = linear(g, P("w_down"), nullptr, T, I, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += dn[i];
  }
  Vec hf = rmsnorm(x, r.at("final_norm"), T, C, eps);
  return linear(hf, c.tie_word_embeddings ? r.at("embed") : r.at("lm_head"), nullptr, T, C, V);
}

// Sum over tokens of weight[t] * log p(target[t]) + entropy_weight[t] * H_t (entropy_weight may be
// empty), p = softmax(logit_scale * logits), H_t = -sum_v p log p.
double reference_objective(const RefModel& r, const PackedBatch& b, const std::vector<int32_t>& targets,
                           const std::vector<float>& weight, double logit_scale = 1.0,
                           const std::vector<float>& entropy_weight = {}) {
  const int64_t T = b.num_tokens(), V = r.m.config.vocab_size;
  Vec logits = reference_logits(r, b);
  for (double& z : logits) z *= logit_scale;
  double obj = 0;
  for (int64_t t = 0; t < T; ++t) {
    double mx = -INFINITY, sum = 0;
    for (int64_t v2 = 0; v2 < V; ++v2) mx = std::max(mx, logits[t * V + v2]);
    for (int64_t v2 = 0; v2 < V; ++v2) sum += std::exp(logits[t * V + v2] - mx);
    const double lse = mx + std::log(sum);
    obj += weight[t] * (logits[t * V + targets[t]] - lse);
    if (!entropy_weight.empty())
      for (int64_t v2 = 0; v2 < V; ++v2)
        obj -= entropy_weight[t] * std::exp(logits[t * V + v2] - lse) * (logits[t * V + v2] - lse);
  }
  return obj;
}

QwenConfig tiny_config(QwenArch arch, bool tied) {
  QwenConfig c;
  c.arch = arch;
  c.vocab_size = 19;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.tie_word_embeddings = tied;
  c.rope_theta = 100.0;
  c.rms_norm_eps = 1e-5;
  return c;
}

// entropy: the objective also carries sum_t e_t H_t (the GRPO entropy bonus's term), with rows
// that have only the entropy term, only the log-prob term, both, and neither.
void finite_difference_check(const QwenConfig& config, float logit_scale = 1.0f, bool entropy = false) {
  QwenModel model = make_model(config);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (const ParamView& v : model.table)
    for (int64_t i = 0; i < v.spec.numel(); ++i)
      model.params[v.offset + i] = (v.spec.name.find("norm") != std::string::npos ? 1.0f : 0.0f) + normal(rng);
  PackedBatch batch = pack_sequences({{1, 5, 7, 2, 11, 3}, {4, 18}, {9, 9, 0, 12, 6}});
  std::vector<int32_t> targets = {5, 7, 2, 11, 3, 8, 18, 1, 9, 0, 12, 6, 15};
  std::vector<float> weight = {0.5f, -1.0f, 0.25f, 1.0f, 0.0f, 0.75f, 1.0f, -0.5f, 0.3f, 1.0f, 0.0f, 0.6f, -0.2f};
  std::vector<float> eweight;
  if (entropy) eweight = {-0.4f, 0.0f, 0.7f, 0.0f, 0.9f, -0.3f, 0.5f, 0.0f, -0.8f, 0.2f, 0.0f, 0.4f, 1.0f};
  int64_t T = batch.num_tokens();
  TrainState state = make_train_state(config, testing::options(T, 4));
  std::vector<float> lp(static_cast<size_t>(T)), ent(static_cast<size_t>(T));
  forward_logprobs(model, state, batch, targets, lp.data(), entropy ? ent.data() : nullptr, logit_scale);
  alloc_grads(model);
  backward_logprobs(model, state, batch, targets, weight.data(), entropy ? eweight.data() : nullptr,
                    entropy ? ent.data() : nullptr);

  Vec p(model.params.begin(), model.params.end());
  RefModel ref{model, p};
  // The f32 forward agrees with the float64 reference.
  double obj = reference_objective(ref, batch, targets, weight, logit_scale, eweight), ours = 0;
  for (int64_t t = 0; t < T; ++t) ours += weight[t] * lp[t] + (entropy ? eweight[t] * ent[t] : 0.0f);
  EXPECT_NEAR(ours, obj, 1e-5 * std::fabs(obj) + 1e-5);
  const double h = 1e-5;
  double worst = 0;
  for (const ParamView& v : model.table) {
    for (int64_t i = 0; i < v.spec.numel(); ++i) {
      double keep = p[v.offset + i];
      p[v.offset + i] = keep + h;
      double up = reference_objective(ref, batch, targets, weight, logit_scale, eweight);
      p[v.offset + i] = keep - h;
      double down = reference_objective(ref, batch, targets, weight, logit_scale, eweight);
      p[v.offset + i] = keep;
      double fd = (up - down) / (2 * h), got = model.grads[v.offset + i];
      double err = std::fabs(got - fd) / (1e-4 + 1e-3 * std::fabs(fd));
      worst = std::max(worst, err);
      EXPECT_LE(err, 1.0) << v.spec.hf_name << "[" << i << "]: backward " << got << ", finite difference " << fd;
    }
  }
  std::printf("%s: %lld parameters, worst |grad - fd| / (1e-4 + 1e-3 |fd|) = %.3f\n", arch_name(config.arch),
              static_cast<long long>(model.num_params), worst);
}

TEST(FiniteDifference, Qwen3OneLayerTied) { finite_difference_check(tiny_config(QwenArch::Qwen3, true)); }
TEST(FiniteDifference, Qwen2OneLayerUntied) { finite_difference_check(tiny_config(QwenArch::Qwen2, false)); }
// GRPO's log-probs at sampling temperature 0.6: softmax(logits / 0.6), the backward through the
// scale (forward_logprobs keeps it in the state for backward_logprobs).
TEST(FiniteDifference, Qwen3LogitsAtSamplingTemperature) {
  finite_difference_check(tiny_config(QwenArch::Qwen3, true), 1.0f / 0.6f);
}
// The entropy bonus's gradient (GRPO entropy-coef) through the whole model, at the sampling
// temperature's logit scale: dH/dz = -p (log p + H), times the scale.
TEST(FiniteDifference, Qwen3EntropyTermAtSamplingTemperature) {
  finite_difference_check(tiny_config(QwenArch::Qwen3, true), 1.0f / 0.6f, true);
}
TEST(FiniteDifference, Qwen2EntropyTermUntied) { finite_difference_check(tiny_config(QwenArch::Qwen2, false), 1.0f, true); }
TEST(FiniteDifference, Qwen3WithAttentionBias) {
  QwenConfig c = tiny_config(QwenArch::Qwen3, false);
  c.attention_bias = true;
  finite_difference_check(c);
}

// The LoRA backward (base frozen): every entry of every A and B of an all-linear adapter, both
// non-zero, against central differences of the float64 network whose projections are
// W + s B A (which is what PEFT's unmerged adapter computes). The same budget as above.
void lora_finite_difference_check(const QwenConfig& config) {
  QwenModel model = make_model(config);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (const ParamView& v : model.table)
    for (int64_t i = 0; i < v.spec.numel(); ++i)
      model.params[v.offset + i] = (v.spec.name.find("norm") != std::string::npos ? 1.0f : 0.0f) + normal(rng);
  LoraConfig lc;
  lc.rank = 2;
  lc.alpha = 3;  // scale 1.5: a dropped or doubled scale shows
  lc.target_pattern = "all-linear";
  LoraAdapter adapter = make_adapter(lc, config);
  for (float& x : adapter.params) x = normal(rng);
  PackedBatch batch = pack_sequences({{1, 5, 7, 2, 11, 3}, {4, 18}, {9, 9, 0, 12, 6}});
  std::vector<int32_t> targets = {5, 7, 2, 11, 3, 8, 18, 1, 9, 0, 12, 6, 15};
  std::vector<float> weight = {0.5f, -1.0f, 0.25f, 1.0f, 0.0f, 0.75f, 1.0f, -0.5f, 0.3f, 1.0f, 0.0f, 0.6f, -0.2f};
  const int64_t T = batch.num_tokens();
  TrainState state = make_train_state(config, testing::options(T, 4));
  std::vector<float> lp(static_cast<size_t>(T));
  forward_logprobs(model, state, batch, targets, lp.data(), nullptr, 1.0f, &adapter);
  alloc_lora_grads(adapter);
  backward_logprobs(model, state, batch, targets, weight.data(), nullptr, nullptr, &adapter);
  EXPECT_TRUE(model.grads.empty());

  const Vec base(model.params.begin(), model.params.end());
  Vec ad(adapter.params.begin(), adapter.params.end());
  const double s = lora_scale(lc);
  const char* field[kLoraModules] = {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"};
  auto offset_of = [&](const std::string& short_name) {
    for (const ParamView& v : model.table)
      if (v.spec.name == short_name) return v.offset;
    throw std::runtime_error("no parameter " + short_name);
  };
  auto objective = [&]() {
    Vec p = base;
    for (size_t v = 0; v + 1 < adapter.table.size(); v += 2) {
      const LoraView& va = adapter.table[v];
      const auto [in, out] = lora_module_dims(config, va.module);
      double* W = p.data() + offset_of("L" + std::to_string(va.layer) + "." + field[static_cast<int>(va.module)]);
      const double *A = ad.data() + va.offset, *B = ad.data() + adapter.table[v + 1].offset;
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i)
          for (int64_t j = 0; j < lc.rank; ++j) W[o * in + i] += s * B[o * lc.rank + j] * A[j * in + i];
    }
    return reference_objective(RefModel{model, p}, batch, targets, weight);
  };
  double obj = objective(), ours = 0;
  for (int64_t t = 0; t < T; ++t) ours += weight[t] * lp[t];
  EXPECT_NEAR(ours, obj, 1e-5 * std::fabs(obj) + 1e-5);
  const double h = 1e-5;
  double worst = 0;
  for (const LoraView& v : adapter.table)
    for (int64_t i = 0; i < v.numel(); ++i) {
      double& x = ad[v.offset + i];
      const double keep = x;
      x = keep + h;
      const double up = objective();
      x = keep - h;
      const double down = objective();
      x = keep;
      const double fd = (up - down) / (2 * h), got = adapter.grads[v.offset + i];
      const double err = std::fabs(got - fd) / (1e-4 + 1e-3 * std::fabs(fd));
      worst = std::max(worst, err);
      EXPECT_LE(err, 1.0) << v.hf_name << "[" << i << "]: backward " << got << ", finite difference " << fd;
    }
  std::printf("%s LoRA r %lld: %lld adapter parameters, worst |grad - fd| / (1e-4 + 1e-3 |fd|) = %.3f\n",
              arch_name(config.arch), static_cast<long long>(lc.rank), static_cast<long long>(adapter.num_params),
              worst);
}

TEST(LoraFiniteDifference, Qwen3OneLayerTied) { lora_finite_difference_check(tiny_config(QwenArch::Qwen3, true)); }
TEST(LoraFiniteDifference, Qwen2OneLayerUntied) { lora_finite_difference_check(tiny_config(QwenArch::Qwen2, false)); }

}  // namespace
}  // namespace sqlrl

namespace sqlrl {
namespace {

// A model with every parameter N(0, 0.3).
QwenModel normal_model(const QwenConfig& config, uint32_t seed) {
  QwenModel model = make_model(config);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (float& p : model.params) p = normal(rng);
  return model;
}

// The packed batch the log-prob tests share: three sequences, 13 positions, and their targets.
PackedBatch three_sequences() { return pack_sequences({{1, 5, 7, 2, 11, 3}, {4, 18}, {9, 9, 0, 12, 6}}); }
const std::vector<int32_t> kThreeTargets = {5, 7, 2, 11, 3, 8, 18, 1, 9, 0, 12, 6, 15};

// forward_logprobs_masked runs only the kept rows through the lm_head: their log-probs and the
// gradients of a loss on them must match the full forward (rounding only: the kept rows form a
// smaller GEMM, so 1e-6 relative), the other rows read 0.
TEST(MaskedLogprobs, KeptRowsMatchTheFullForwardAndGradients) {
  QwenConfig config = tiny_config(QwenArch::Qwen3, true);
  QwenModel full = normal_model(config, 11);
  QwenModel masked = full;
  PackedBatch batch = three_sequences();
  const std::vector<int32_t>& targets = kThreeTargets;
  std::vector<uint8_t> mask = {0, 0, 1, 1, 0, 1, 0, 1, 0, 0, 1, 1, 0};
  const int64_t T = batch.num_tokens();
  std::vector<float> dlogp(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) dlogp[t] = mask[t] ? 0.1f * static_cast<float>(t + 1) : 0.0f;
  TrainState sf = make_train_state(config, testing::options(T, 4)), sm = make_train_state(config, testing::options(T, 4));
  std::vector<float> lf(static_cast<size_t>(T)), lm(static_cast<size_t>(T), 123.0f);
  forward_logprobs(full, sf, batch, targets, lf.data());
  forward_logprobs_masked(masked, sm, batch, targets, mask.data(), lm.data());
  for (int64_t t = 0; t < T; ++t) {
    if (mask[t]) EXPECT_NEAR(lm[t], lf[t], 1e-6 * std::fabs(lf[t]) + 1e-6) << "row " << t;
    else EXPECT_EQ(lm[t], 0.0f) << "row " << t;
  }
  alloc_grads(full);
  alloc_grads(masked);
  backward_logprobs(full, sf, batch, targets, dlogp.data());
  backward_logprobs(masked, sm, batch, targets, dlogp.data());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < full.grads.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(full.grads[i] - masked.grads[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(full.grads[i])));
  }
  EXPECT_GT(scale, 0.0);
  EXPECT_LE(worst, 1e-5 * scale);
}

// forward_logprobs' entropy output against -sum p log p of the float64 network's softmax rows;
// asking for it leaves the log-probs bit for bit as they were.
TEST(LogprobEntropy, MatchesFloat64SoftmaxAndLeavesLogprobsUnchanged) {
  QwenConfig config = tiny_config(QwenArch::Qwen3, false);
  QwenModel model = normal_model(config, 5);
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (const ParamView& v : model.table)  // norm scales near 1, so the logits spread and rows differ
    if (v.spec.name.find("norm") != std::string::npos)
      for (int64_t i = 0; i < v.spec.numel(); ++i) model.params[v.offset + i] = 1.0f + 0.1f * normal(rng);
  PackedBatch batch = three_sequences();
  const std::vector<int32_t>& targets = kThreeTargets;
  const int64_t T = batch.num_tokens(), V = config.vocab_size;
  // Chunks of 4 rows: the last chunk is partial, so the entropy's row indexing is exercised.
  TrainState plain_state = make_train_state(config, testing::options(T, 4));
  TrainState with_state = make_train_state(config, testing::options(T, 4));
  std::vector<float> plain(static_cast<size_t>(T)), lp(static_cast<size_t>(T)), ent(static_cast<size_t>(T), -1.0f);
  forward_logprobs(model, plain_state, batch, targets, plain.data());
  forward_logprobs(model, with_state, batch, targets, lp.data(), ent.data());
  for (int64_t t = 0; t < T; ++t) {
    EXPECT_EQ(lp[t], plain[t]) << "row " << t;  // bitwise: the same sum in the same order
    EXPECT_EQ(with_state.vocab_lse[t], plain_state.vocab_lse[t]) << "row " << t;
  }

  Vec p(model.params.begin(), model.params.end());
  Vec logits = reference_logits(RefModel{model, p}, batch);
  double spread = 0;
  for (int64_t t = 0; t < T; ++t) {
    const double* row = logits.data() + t * V;
    double mx = -INFINITY, sum = 0, h = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, row[v]);
    for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    for (int64_t v = 0; v < V; ++v) {
      double pv = std::exp(row[v] - mx) / sum;
      h -= pv * std::log(pv);
    }
    spread = std::max(spread, std::fabs(h - std::log(static_cast<double>(V))));
    // The f32 network's logits carry ~1e-6 relative error (the log-prob objective above agrees to
    // 1e-5); H moves by at most max |d logit| per row, so 1e-5 absolute is ample.
    EXPECT_NEAR(ent[t], h, 1e-5) << "row " << t;
  }
  EXPECT_GT(spread, 1e-3);  // the rows are not all uniform (which any bug returning log V would pass)
}

}  // namespace
}  // namespace sqlrl
