// Shared by the CUDA model tests (and tests/rl_cuda): a random Qwen model whose weights are exactly
// representable in bf16 (so the CPU f32 model and the GPU bf16 copy hold the same numbers), a
// packed batch with an empty and a length-1 sequence, the comparisons, the bf16 error budget of
// the logits and where a sampling decision is within it of changing.
#pragma once
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "model/cuda_model.h"
#include "runtime/dtype.h"
#include "tests/test_util.h"

namespace sqlrl::testing {

inline QwenModel random_model(const QwenConfig& c, uint32_t seed) {
  QwenModel m = make_model(c);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const ParamView& view : m.table) {
    bool norm = view.spec.name.find("norm") != std::string::npos;
    bool bias = view.spec.shape.size() == 1 && !norm;
    // Norm weights near 1, biases and matrices ~ 1/sqrt(fan_in) so activations stay O(1).
    float scale = norm ? 0.1f : bias ? 0.05f : 1.0f / std::sqrt(static_cast<float>(view.spec.shape.back()));
    for (int64_t i = 0; i < view.spec.numel(); ++i) {
      float x = (norm ? 1.0f : 0.0f) + scale * normal(rng);
      m.params[view.offset + i] = bf16_bits_to_f32(f32_to_bf16_bits(x));
    }
  }
  return m;
}

// head_dim 64: the CUDA attention kernels take 64 or 128 (the HF fixtures have 16).
inline QwenModel random_model(QwenArch arch, uint32_t seed) {
  QwenConfig c;
  c.arch = arch;
  c.vocab_size = 512;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = arch == QwenArch::Qwen3;
  return random_model(c, seed);
}

// A shape where the indexing bugs of real checkpoints live and the 64-wide 2-layer model cannot
// show them: head_dim 128 (the other instantiation of every attention kernel), 8 query heads on 2
// KV heads (a GQA group of 4), hidden 512 with q_dim 1024 != hidden, an intermediate size that is
// not a power of two. The vocabulary stays small: the lm_head is not where these bugs are.
inline QwenConfig qwen_sized_config(QwenArch arch, int64_t layers) {
  QwenConfig c;
  c.arch = arch;
  c.vocab_size = 384;
  c.hidden_size = 512;
  c.intermediate_size = 768;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 128;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = arch == QwenArch::Qwen3;
  return c;
}

// Sequences of 17, 1, 0 and 40 tokens packed back to back; targets and mask random.
struct RandomBatch {
  PackedBatch batch;
  std::vector<int32_t> targets;
  std::vector<float> dlogprobs;  // -mask / count, the SFT/GRPO token-mean shape
};
// Random targets for every packed position, about two thirds of them trained (mask 1).
inline void random_targets(RandomBatch& b, std::mt19937& rng, int64_t vocab) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab) - 1);
  int64_t T = b.batch.num_tokens();
  std::vector<int> mask(static_cast<size_t>(T));
  int count = 0;
  for (int64_t t = 0; t < T; ++t) {
    b.targets.push_back(token(rng));
    mask[t] = (rng() % 3) != 0;
    count += mask[t];
  }
  for (int64_t t = 0; t < T; ++t) b.dlogprobs.push_back(-static_cast<float>(mask[t]) / std::max(count, 1));
}

inline RandomBatch random_batch(int64_t vocab, uint32_t seed, std::vector<int> lengths = {17, 1, 0, 40}) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab) - 1);
  std::vector<std::vector<int32_t>> seqs;
  for (int n : lengths) {
    seqs.emplace_back();
    for (int i = 0; i < n; ++i) seqs.back().push_back(token(rng));
  }
  RandomBatch b;
  b.batch = pack_sequences(seqs);
  random_targets(b, rng, vocab);
  return b;
}

// ||got - want|| / ||want||.
inline double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline double max_abs_diff(const float* got, const float* want, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(got[i])) return INFINITY;
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return worst;
}

// ---- The bf16 error budget of the GPU model's logits, from the actual magnitudes ----------------
//
// The GPU model holds the same bf16-exact weights as the CPU model and accumulates in f32 (errors
// ~2^-24, negligible); what differs is that it stores every activation in bf16, 8 significand
// bits, so each store moves a value x by at most u |x|, u = 2^-9. A logit is sum_c h[c] W[v,c]
// over the final norm's output h[c] = g[c] n[c] (g its weight, n the RMS-normalised last hidden
// state, rms 1), so its error is sum_c g[c] W[v,c] dn[c]. dn is what n collected from the R
// roundings on its way from the embedding (bf16_roundings): independent rounding errors add in
// quadrature, so each coordinate is off by ~sqrt(R) u times the vector's rms, 1, whatever its own
// value (an error carried through the layers does not shrink with the coordinate it lands on),
// independently of the others. The logit error is then a sum of independent terms with standard
// deviation sqrt(R) u ||g W[v]||_2 (the L2 norm of lm_head's row weighted by the final norm), and
// the budget is z = 12 of those:
//     |logit_gpu[t,v] - logit_cpu[t,v]| <= 12 sqrt(R) u sqrt(sum_c (g[c] W[v,c])^2).
// Gaussian tails would put the largest of the T x V elements near 4-5 of them; emulated
// (tools/cuda_emu_model; the figures each test prints) the worst reached 6.5, in the paged decode
// of six 200-token trajectories (520k elements) of tests/rl_cuda's model, so errors grow through
// the layers and attention beyond the quadrature sum, and 12 leaves ~1.8x over the worst seen for
// the GPU's own rounding draws. The worst elements of the other models used 0.25-0.35 of it (the
// 2-layer models of this folder), and a model whose final norm put nearly all weight on 4
// coordinates 0.5. (The aligned sum sqrt(R) u sum_c |g[c] W[v,c]| is no safer: it exceeds the L2
// form by ~0.8 sqrt(C) only while the weight is spread over many coordinates; on that
// 4-coordinate model the device went 3.6x over it.) Both the training forward and the paged
// decode stay within the budget; they do NOT agree with each other more closely than with the
// CPU: the flash kernel rounds the softmax probabilities to bf16 for its tensor-core product and
// the paged kernel keeps them in f32, so from the first attention on the two paths round different
// f32 values and their rounding errors are independent draws (emulated: decode vs full forward
// 0.85% of max |logit|, decode vs CPU 0.84%). Decode vs full forward is therefore held to the sum
// of the two budgets.
constexpr double kBf16Roundoff = 1.0 / 512;
constexpr double kBf16Sigmas = 12;  // z above

// bf16 stores on the path embedding -> final norm (cuda_train.cpp / cuda_infer.cpp). Per layer:
// the attention norm; q, k, v projections (with their biases: one rounding); Qwen3's q and k
// norms; RoPE of q and k; the attention's probabilities (flash: bf16 for the mma) and output;
// o_proj + residual (and + o bias: one more); the MLP norm; gate, up; SwiGLU; down + residual.
// Then the final norm. The embedding is a copy of bf16 weights: exact.
inline int bf16_roundings(const QwenConfig& c) {
  int per_layer = 1 + 3 + (c.has_qk_norm() ? 2 : 0) + 2 + 2 + 1 + (c.has_o_bias() ? 1 : 0) + 1 + 2 + 1 + 1;
  return per_layer * static_cast<int>(c.num_hidden_layers) + 1;
}

// CPU f32 logits [T, vocab] of a packed batch and, for every element, the budget above.
struct LogitsAndBudget {
  std::vector<float> logits, budget;
  int64_t vocab = 0;
  const float* logit_row(int64_t t) const { return logits.data() + t * vocab; }
  const float* budget_row(int64_t t) const { return budget.data() + t * vocab; }
};
inline LogitsAndBudget cpu_logits_and_budget(const QwenModel& host, const PackedBatch& batch) {
  const QwenConfig& c = host.config;
  const int64_t T = batch.num_tokens(), V = c.vocab_size, C = c.hidden_size;
  TrainOptions o;
  o.max_tokens = std::max<int64_t>(T, 1);
  TrainState state = make_train_state(c, o);
  LogitsAndBudget r;
  r.vocab = V;
  r.logits.resize(static_cast<size_t>(T * V));
  r.budget.resize(static_cast<size_t>(T * V));
  forward_logits(host, state, batch, r.logits.data());
  // bind_weights only makes views (lm_head == embed when tied); nothing is written through them.
  const ModelWeights w = QwenModel::bind_weights(host, const_cast<float*>(host.params.data()));
  const double k = kBf16Sigmas * std::sqrt(static_cast<double>(bf16_roundings(c))) * kBf16Roundoff;
  std::vector<float> row(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) {
    double sq = 0;
    for (int64_t i = 0; i < C; ++i) {
      const double gw = static_cast<double>(w.final_norm[i]) * w.lm_head[v * C + i];
      sq += gw * gw;
    }
    row[v] = static_cast<float>(k * std::sqrt(sq));
  }
  for (int64_t t = 0; t < T; ++t) std::copy(row.begin(), row.end(), r.budget.begin() + t * V);
  return r;
}
inline LogitsAndBudget cpu_logits_and_budget(const QwenModel& host, const std::vector<int32_t>& seq) {
  return cpu_logits_and_budget(host, pack_sequences({seq}));
}

// ---- Where a CPU sampling decision is within the budget of changing ------------------------------
//
// sample_token_cpu (and the device sampler, with the same Philox uniform u) draws y from a row of
// logits l, ids >= known masked, with neither top-k nor top-p, iff F(before y) <= u < F(before y)
// + p(y): p = softmax(l / T), F sums p over the ids ahead of y in candidate order (descending
// logit, ties by lower id). Greedy (T = 0) takes the first maximum. Let the device's logits be l'
// with |l' - l| <= b per element. Then the ids ahead of y in the device's order include every v
// with l_v - b_v > l_y + b_y (must) and no v with l_v + b_v < l_y - b_y (cannot). The probability
// mass of a set A under l' is increasing in A's logits and decreasing in the others', so it lies
// between
//     lower(A) = S-(A) / (S-(A) + S+(not A))   and   upper(A) = S+(A) / (S+(A) + S-(not A)),
// S+-(X) = sum over X of exp((l_v +- b_v) / T). Hence y is drawn whatever the errors when
// upper(may precede y) <= u < lower(must precede y + {y}), and can be drawn at all only when
// lower(must precede y) <= u < upper(may precede y + {y}). 1e-6 of slack on u covers the device
// summing probabilities in 2^-40 fixed point and the CPU rounding each to f32.
enum class DrawCase { Surely, Possibly };
inline bool bf16_draw_holds(const float* l, const float* b, int64_t known, int32_t y, float temperature, double u,
                            DrawCase which) {
  if (temperature == 0.0f) {
    for (int64_t v = 0; v < known; ++v) {
      if (v == y) continue;
      // Surely: y beats v for every perturbation. Possibly: some perturbation makes y the maximum
      // (a tie on the device may go either way: its order is not the CPU's bits).
      if (which == DrawCase::Surely ? !(l[y] - b[y] > l[v] + b[v]) : !(l[y] + b[y] >= l[v] - b[v])) return false;
    }
    return true;
  }
  const double inv_t = 1.0 / temperature;
  double top = -INFINITY;
  for (int64_t v = 0; v < known; ++v) top = std::max(top, static_cast<double>(l[v]) + b[v]);
  // Sums over: ids that must precede y, ids that may precede y, all ids.
  double must_p = 0, must_m = 0, may_p = 0, may_m = 0, all_p = 0, all_m = 0;
  const double y_p = std::exp((l[y] + b[y] - top) * inv_t), y_m = std::exp((l[y] - b[y] - top) * inv_t);
  for (int64_t v = 0; v < known; ++v) {
    const double wp = std::exp((l[v] + b[v] - top) * inv_t), wm = std::exp((l[v] - b[v] - top) * inv_t);
    all_p += wp, all_m += wm;
    if (v == y) continue;
    if (l[v] - b[v] > l[y] + b[y]) must_p += wp, must_m += wm;
    if (l[v] + b[v] >= l[y] - b[y]) may_p += wp, may_m += wm;
  }
  auto lower = [&](double in_m, double in_p) { return in_m / (in_m + (all_p - in_p)); };
  auto upper = [&](double in_m, double in_p) { return in_p / (in_p + (all_m - in_m)); };
  const double slack = 1e-6;
  if (which == DrawCase::Surely)
    return u >= upper(may_m, may_p) + slack && u < lower(must_m + y_m, must_p + y_p) - slack;
  return u >= lower(must_m, must_p) - slack && u < upper(may_m + y_m, may_p + y_p) + slack;
}

// max over elements of |got - want| / (scale * budget): <= 1 passes; a NaN fails (infinity).
inline double budget_ratio(const float* got, const float* want, const float* budget, int64_t n, double scale = 1) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(got[i])) return INFINITY;
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]) / (scale * budget[i]));
  }
  return worst;
}

}  // namespace sqlrl::testing
