// The kernel harness's ground truth: error budgets derived from the dtype, the one set of seeded
// random-input helpers, and one float64 reference per op, written from each op's formula (the
// headers in kernels/, verl's core_algos, torch.optim.AdamW), independent of kernels/*.
// tests/rl_grpo reuses the GRPO loss, aggregation-weight and AdamW references.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/sampling.h"
#include "runtime/dtype.h"
#include "runtime/philox.h"

namespace sqlrl::testing {

// ---------------------------------------------------------------------------------------------
// Error budgets
//
// Unit roundoff u: the largest relative error of one round-to-nearest, half an ulp at 1:
//   f32 (24 significant bits) u = 2^-24 ~ 6.0e-8,   bf16 (8 significant bits) u = 2^-8 ~ 3.9e-3,
//   f64 (53 significant bits) u = 2^-53 ~ 1.1e-16 (the gradient norm's float64 sums).
// A K-term sum of terms of like size carried in precision p commits K roundings of independent
// sign, so its error grows like u sqrt(K) relative to the result (a random walk; the worst case
// K u is not approached by random data). A kernel's result is such a reduction followed by a
// few elementwise roundings (exp, log, sqrt, a divide, the final store), each <= u relative:
//
//   rtol = factor * u * sqrt(K)
//
// with `factor` covering those extra roundings plus a margin; each op names its K and factor.
// Elements that cancel towards 0 carry the absolute error of the terms that cancelled, so every
// budget has an absolute floor of rtol times the output's RMS (the size of a typical term).
// ---------------------------------------------------------------------------------------------
enum class Precision { F32, BF16, F64 };

constexpr double unit_roundoff(Precision p) {
  return p == Precision::F32 ? 0x1p-24 : p == Precision::BF16 ? 0x1p-8 : 0x1p-53;
}

inline double reduction_rtol(Precision p, int64_t K, double factor) {
  return factor * unit_roundoff(p) * std::sqrt(static_cast<double>(std::max<int64_t>(K, 1)));
}

inline double rms(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return x.empty() ? 0.0 : std::sqrt(s / static_cast<double>(x.size()));
}

// ---------------------------------------------------------------------------------------------
// Random inputs
//
// One generator (mt19937_64) behind every input. A CPU case passes a fixed seed; the CUDA cases
// and the GRPO/AdamW cases draw a fresh one per run (Rng::fresh); either way the seed is printed
// on failure (every case puts it in its SCOPED_TRACE). Inputs a bf16 kernel reads are rounded
// to bf16 once, so every backend and the reference see the same numbers.
// ---------------------------------------------------------------------------------------------
inline float round_bf16(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }
inline std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = round_bf16(x);
  return v;
}
inline float round_to(Precision p, float x) { return p == Precision::BF16 ? round_bf16(x) : x; }

inline uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : seed_(seed), gen_(seed) {}
  static Rng fresh() { return Rng(fresh_seed()); }
  uint64_t seed() const { return seed_; }
  std::mt19937_64& engine() { return gen_; }
  uint64_t next() { return gen_(); }

  // N(mean, stddev^2), drawn in double and rounded to p (exact in p, hence in f32 and double).
  std::vector<float> normal(size_t n, double stddev = 1.0, double mean = 0.0, Precision p = Precision::F32) {
    std::normal_distribution<double> dist(mean, stddev);
    std::vector<float> v(n);
    for (float& x : v) x = round_to(p, static_cast<float>(dist(gen_)));
    return v;
  }
  // Uniform in [low, high), rounded to p.
  std::vector<float> uniform(size_t n, double low, double high, Precision p = Precision::F32) {
    std::uniform_real_distribution<double> dist(low, high);
    std::vector<float> v(n);
    for (float& x : v) x = round_to(p, static_cast<float>(dist(gen_)));
    return v;
  }
  // Uniform integers in [low, high].
  std::vector<int32_t> ints(size_t n, int32_t low, int32_t high) {
    std::uniform_int_distribution<int32_t> dist(low, high);
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = dist(gen_);
    return v;
  }
  int32_t uniform_int(int32_t low, int32_t high) { return std::uniform_int_distribution<int32_t>(low, high)(gen_); }

 private:
  uint64_t seed_;
  std::mt19937_64 gen_;
};

inline std::vector<double> widen(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// Central differences of a float64 objective f(x) at every element of x (h = 1e-6: truncation
// error ~h^2 |f'''| ~ 1e-12, float64 cancellation ~2^-53 |f| / h ~ 1e-10 |f|).
template <typename Objective>
std::vector<double> finite_differences(std::vector<double> x, Objective f, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = f(x);
    x[i] = keep - h;
    const double down = f(x);
    x[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---------------------------------------------------------------------------------------------
// matmul: out[T, O] = x[T, C] w[O, C]^T + b[O]; backward for dout: dx = dout w, dw = dout^T x,
// db = column sums of dout.
// ---------------------------------------------------------------------------------------------
inline std::vector<double> ref_matmul(const std::vector<double>& x, const std::vector<double>& w,
                                      const std::vector<double>& b, int64_t T, int64_t C, int64_t O) {
  std::vector<double> out(static_cast<size_t>(T * O));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < O; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (int64_t c = 0; c < C; ++c) s += x[t * C + c] * w[o * C + c];
      out[t * O + o] = s;
    }
  return out;
}

struct RefMatmulGrads {
  std::vector<double> dx, dw, db;
};
inline RefMatmulGrads ref_matmul_backward(const std::vector<double>& dout, const std::vector<double>& x,
                                          const std::vector<double>& w, int64_t T, int64_t C, int64_t O) {
  RefMatmulGrads g{std::vector<double>(T * C, 0.0), std::vector<double>(O * C, 0.0), std::vector<double>(O, 0.0)};
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < O; ++o) {
      const double d = dout[t * O + o];
      g.db[o] += d;
      for (int64_t c = 0; c < C; ++c) {
        g.dx[t * C + c] += d * w[o * C + c];
        g.dw[o * C + c] += d * x[t * C + c];
      }
    }
  return g;
}

// ---------------------------------------------------------------------------------------------
// rmsnorm: out = w * x * s per row, s = 1 / sqrt(mean(x^2) + eps). The backward takes the s the
// forward saved (as the kernels do): dx = s (g - xhat mean(g xhat)), xhat = x s, g = dout w;
// dw = sum over rows of dout x s.
// ---------------------------------------------------------------------------------------------
struct RefRmsnorm {
  std::vector<double> out, rstd;
};
inline RefRmsnorm ref_rmsnorm(const std::vector<double>& x, const std::vector<double>& w, int64_t rows, int64_t dim,
                              double eps) {
  RefRmsnorm r{std::vector<double>(x.size()), std::vector<double>(static_cast<size_t>(rows))};
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t c = 0; c < dim; ++c) ss += x[i * dim + c] * x[i * dim + c];
    r.rstd[i] = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
    for (int64_t c = 0; c < dim; ++c) r.out[i * dim + c] = w[c] * x[i * dim + c] * r.rstd[i];
  }
  return r;
}

struct RefRmsnormGrads {
  std::vector<double> dx, dw, dw_abs;  // dw_abs: sum of |terms| of each dw element (its error scale)
};
inline RefRmsnormGrads ref_rmsnorm_backward(const std::vector<double>& dout, const std::vector<double>& x,
                                            const std::vector<double>& w, const std::vector<double>& rstd, int64_t rows,
                                            int64_t dim) {
  RefRmsnormGrads g{std::vector<double>(x.size()), std::vector<double>(static_cast<size_t>(dim), 0.0),
                    std::vector<double>(static_cast<size_t>(dim), 0.0)};
  for (int64_t i = 0; i < rows; ++i) {
    const double s = rstd[i];
    double mean_gx = 0;
    for (int64_t c = 0; c < dim; ++c) mean_gx += dout[i * dim + c] * w[c] * x[i * dim + c] * s;
    mean_gx /= static_cast<double>(dim);
    for (int64_t c = 0; c < dim; ++c) {
      g.dx[i * dim + c] = s * (dout[i * dim + c] * w[c] - x[i * dim + c] * s * mean_gx);
      const double term = dout[i * dim + c] * x[i * dim + c] * s;
      g.dw[c] += term;
      g.dw_abs[c] += std::fabs(term);
    }
  }
  return g;
}

// ---------------------------------------------------------------------------------------------
// rope (rotate-half): for i < D/2, x'[i] = x[i] cos a - x[i + D/2] sin a, x'[i + D/2] =
// x[i + D/2] cos a + x[i] sin a. The angle is the op's definition (kernels/rope.h): inv_freq and
// position * inv_freq rounded to f32 as transformers computes them; cos and sin are exact here.
// sign -1 is the backward (the transpose rotation). x is [tokens, stride]: each token's heads
// first, the columns after heads * D untouched (the q part of a fused qkv buffer).
// ---------------------------------------------------------------------------------------------
inline std::vector<double> ref_rope(std::vector<double> x, const std::vector<int32_t>& positions, int64_t tokens,
                                    int64_t heads, int64_t D, int64_t stride, float theta, double sign) {
  const int64_t half = D / 2;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float inv_freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(D));
      const double a = static_cast<double>(static_cast<float>(positions[t]) * inv_freq);
      const double c = std::cos(a), s = sign * std::sin(a);
      for (int64_t h = 0; h < heads; ++h) {
        double* v = x.data() + t * stride + h * D;
        const double p = v[i], q = v[i + half];
        v[i] = p * c - q * s;
        v[i + half] = q * c + p * s;
      }
    }
  return x;
}

// ---------------------------------------------------------------------------------------------
// swiglu: out = silu(g) u = g sigmoid(g) u; dg = dout u sig (1 + g (1 - sig)), du = dout g sig.
// ---------------------------------------------------------------------------------------------
inline std::vector<double> ref_swiglu(const std::vector<double>& g, const std::vector<double>& u) {
  std::vector<double> out(g.size());
  for (size_t i = 0; i < g.size(); ++i) out[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
  return out;
}
inline void ref_swiglu_backward(const std::vector<double>& dout, const std::vector<double>& g,
                                const std::vector<double>& u, std::vector<double>& dg, std::vector<double>& du) {
  dg.resize(g.size());
  du.resize(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double sig = 1 / (1 + std::exp(-g[i]));
    dg[i] = dout[i] * u[i] * sig * (1 + g[i] * (1 - sig));
    du[i] = dout[i] * g[i] * sig;
  }
}

// ---------------------------------------------------------------------------------------------
// embedding: out[t] = table[tokens[t]]; backward dtable[tokens[t]] += dout[t] (mag: the sum of
// |terms| of each element, its error scale).
// ---------------------------------------------------------------------------------------------
inline std::vector<double> ref_embedding(const std::vector<double>& table, const std::vector<int32_t>& tokens,
                                         int64_t dim) {
  std::vector<double> out(tokens.size() * dim);
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int64_t c = 0; c < dim; ++c) out[t * dim + c] = table[tokens[t] * dim + c];
  return out;
}
inline void ref_embedding_backward(std::vector<double>& dtable, std::vector<double>& mag,
                                   const std::vector<double>& dout, const std::vector<int32_t>& tokens, int64_t dim) {
  mag.assign(dtable.size(), 0.0);
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int64_t c = 0; c < dim; ++c) {
      dtable[tokens[t] * dim + c] += dout[t * dim + c];
      mag[tokens[t] * dim + c] += std::fabs(dout[t * dim + c]);
    }
}

// ---------------------------------------------------------------------------------------------
// logprob: logits = scale * hidden weight^T; lse, logprob = logit[target] - lse, entropy
// H = -sum p log p; backward for g = dlogprob and h = dentropy (either may be empty):
// dlogit_v = scale (g ([v == target] - p_v) - h p_v (log p_v + H)), dhidden = dlogit weight,
// dweight = dlogit^T hidden; *_mag = sums of |terms| (the error scale of bf16-rounded dlogits).
// ---------------------------------------------------------------------------------------------
struct RefLogprob {
  std::vector<double> lse, logprob, entropy, dhidden, dweight, dhidden_mag, dweight_mag;
};
inline RefLogprob ref_logprob(const std::vector<double>& hidden, const std::vector<double>& weight,
                              const std::vector<int32_t>& targets, int64_t T, int64_t C, int64_t V, double scale,
                              const std::vector<double>& g, const std::vector<double>& h) {
  RefLogprob r;
  r.lse.resize(T), r.logprob.resize(T), r.entropy.resize(T);
  r.dhidden.assign(T * C, 0.0), r.dhidden_mag.assign(T * C, 0.0);
  r.dweight.assign(V * C, 0.0), r.dweight_mag.assign(V * C, 0.0);
  std::vector<double> logits(V), d(V);
  for (int64_t t = 0; t < T; ++t) {
    double m = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      double z = 0;
      for (int64_t c = 0; c < C; ++c) z += hidden[t * C + c] * weight[v * C + c];
      logits[v] = z * scale;
      m = std::max(m, logits[v]);
    }
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(logits[v] - m);
    const double lse = m + std::log(s);
    double H = 0;
    for (int64_t v = 0; v < V; ++v) H -= std::exp(logits[v] - lse) * (logits[v] - lse);
    r.lse[t] = lse, r.logprob[t] = logits[targets[t]] - lse, r.entropy[t] = H;
    if (g.empty() && h.empty()) continue;
    for (int64_t v = 0; v < V; ++v) {
      const double log_p = logits[v] - lse, prob = std::exp(log_p);
      d[v] = g.empty() ? 0.0 : g[t] * ((v == targets[t] ? 1.0 : 0.0) - prob);
      if (!h.empty()) d[v] -= h[t] * prob * (log_p + H);
      d[v] *= scale;
    }
    for (int64_t v = 0; v < V; ++v)
      for (int64_t c = 0; c < C; ++c) {
        r.dhidden[t * C + c] += d[v] * weight[v * C + c];
        r.dhidden_mag[t * C + c] += std::fabs(d[v] * weight[v * C + c]);
        r.dweight[v * C + c] += d[v] * hidden[t * C + c];
        r.dweight_mag[v * C + c] += std::fabs(d[v] * hidden[t * C + c]);
      }
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// attention (causal GQA, varlen, optional shared prefixes; kernels/attention.h):
// out = softmax(q k^T / sqrt(D)) v over the keys a query sees (its sequence's prefix rows, then
// its own rows up to itself), lse its natural log-sum-exp; the backward for dout with
// delta = rowsum(dout * out) and dS = P (dP - delta) / sqrt(D). delta_out (nullable) is the out
// the kernel under test is handed (the CUDA backward reads its own bf16 out): delta is taken from
// it, as the kernels do, instead of from the exact out.
// ---------------------------------------------------------------------------------------------
struct RefAttention {
  std::vector<double> out, lse, dq, dk, dv;
};
inline RefAttention ref_attention(const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v, const std::vector<double>* dout,
                                  const std::vector<int32_t>& cu, AttentionShape shape,
                                  const std::vector<int32_t>& prefix_seq = {},
                                  const std::vector<int32_t>& prefix_len = {},
                                  const std::vector<double>* delta_out = nullptr) {
  const int64_t H = shape.heads, KVH = shape.kv_heads, D = shape.head_dim, T = cu.back();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  RefAttention r;
  r.out.assign(T * H * D, 0.0), r.lse.assign(T * H, 0.0);
  if (dout) r.dq.assign(T * H * D, 0.0), r.dk.assign(T * KVH * D, 0.0), r.dv.assign(T * KVH * D, 0.0);
  std::vector<int64_t> keys;
  std::vector<double> p, dp;
  for (size_t s = 0; s + 1 < cu.size(); ++s)
    for (int64_t i = cu[s]; i < cu[s + 1]; ++i) {
      keys.clear();
      if (!prefix_seq.empty() && prefix_seq[s] >= 0)
        for (int64_t j = 0; j < prefix_len[s]; ++j) keys.push_back(cu[prefix_seq[s]] + j);
      for (int64_t j = cu[s]; j <= i; ++j) keys.push_back(j);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kv = h / (H / KVH);
        const double* qi = q.data() + (i * H + h) * D;
        p.assign(keys.size(), 0.0);
        double m = -INFINITY, sum = 0;
        for (size_t j = 0; j < keys.size(); ++j) {
          const double* kj = k.data() + (keys[j] * KVH + kv) * D;
          double x = 0;
          for (int64_t e = 0; e < D; ++e) x += qi[e] * kj[e];
          p[j] = x * scale;
          m = std::max(m, p[j]);
        }
        for (double& e : p) sum += (e = std::exp(e - m));
        for (double& e : p) e /= sum;
        r.lse[i * H + h] = m + std::log(sum);
        double* oi = r.out.data() + (i * H + h) * D;
        for (size_t j = 0; j < keys.size(); ++j) {
          const double* vj = v.data() + (keys[j] * KVH + kv) * D;
          for (int64_t e = 0; e < D; ++e) oi[e] += p[j] * vj[e];
        }
        if (!dout) continue;
        const double* gi = dout->data() + (i * H + h) * D;
        double delta = 0;
        for (int64_t e = 0; e < D; ++e) delta += gi[e] * (delta_out ? (*delta_out)[(i * H + h) * D + e] : oi[e]);
        dp.assign(keys.size(), 0.0);
        for (size_t j = 0; j < keys.size(); ++j) {
          const double* vj = v.data() + (keys[j] * KVH + kv) * D;
          for (int64_t e = 0; e < D; ++e) dp[j] += gi[e] * vj[e];
        }
        for (size_t j = 0; j < keys.size(); ++j) {
          const double ds = p[j] * (dp[j] - delta) * scale;
          const double* kj = k.data() + (keys[j] * KVH + kv) * D;
          double* dqi = r.dq.data() + (i * H + h) * D;
          double* dkj = r.dk.data() + (keys[j] * KVH + kv) * D;
          double* dvj = r.dv.data() + (keys[j] * KVH + kv) * D;
          for (int64_t e = 0; e < D; ++e) {
            dqi[e] += ds * kj[e];
            dkj[e] += ds * qi[e];
            dvj[e] += p[j] * gi[e];
          }
        }
      }
    }
  return r;
}

// Paged decode: query n attends to cache positions 0..positions[n] of its block table row (none, a
// zero output, for a padding row: positions[n] < 0)
// (position p lives in slot table[n][p / bs] * bs + p % bs of a [blocks * bs, KVH, D] cache).
inline std::vector<double> ref_paged_attention(const std::vector<float>& q, const std::vector<float>& k_cache,
                                               const std::vector<float>& v_cache, const std::vector<int32_t>& table,
                                               int64_t max_blocks, const std::vector<int32_t>& positions,
                                               int64_t block_size, AttentionShape shape) {
  const int64_t N = static_cast<int64_t>(positions.size()), H = shape.heads, KVH = shape.kv_heads, D = shape.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> out(N * H * D, 0.0), p;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = h / (H / KVH), len = positions[n] + 1;
      if (len <= 0) continue;  // a padding row: zeros
      auto slot = [&](int64_t pos) { return table[n * max_blocks + pos / block_size] * block_size + pos % block_size; };
      p.assign(len, 0.0);
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < len; ++j) {
        double x = 0;
        for (int64_t e = 0; e < D; ++e)
          x += static_cast<double>(q[(n * H + h) * D + e]) * k_cache[(slot(j) * KVH + kv) * D + e];
        p[j] = x * scale;
        m = std::max(m, p[j]);
      }
      for (double& e : p) sum += (e = std::exp(e - m));
      for (int64_t j = 0; j < len; ++j)
        for (int64_t e = 0; e < D; ++e) out[(n * H + h) * D + e] += p[j] / sum * v_cache[(slot(j) * KVH + kv) * D + e];
    }
  return out;
}

// ---------------------------------------------------------------------------------------------
// sampling: the full-sort sampler (candidate order: descending logit, ties by lower id; top-k;
// tempered probabilities exp(l / T - max) rounded to float as the sampler keeps them; the
// smallest prefix reaching top_p; the Philox draw of (seed, sequence, position) times the kept
// mass picks the token), greedy for T = 0 (the first maximum, logprob 0). The sampler's own
// arithmetic, step for step: the CPU kernel (which selects the nucleus without sorting) must
// return the same bits. logprob_t1 is log softmax(logits)[token] in float64, rounded.
// ---------------------------------------------------------------------------------------------
inline float ref_log_softmax_at(const float* logits, int64_t vocab, int32_t token) {
  double m = -INFINITY;
  for (int64_t v = 0; v < vocab; ++v) m = std::max(m, static_cast<double>(logits[v]));
  double sum = 0.0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - m);
  return static_cast<float>(static_cast<double>(logits[token]) - m - std::log(sum));
}

inline SampledToken ref_sample(const float* logits, int64_t vocab, const SamplingParams& params, uint64_t sequence_id,
                               uint64_t position) {
  SampledToken result;
  if (params.temperature == 0.0f) {
    result.token = static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
    result.logprob = 0.0f;
    result.logprob_t1 = ref_log_softmax_at(logits, vocab, result.token);
    return result;
  }
  const double inv_t = 1.0 / params.temperature;
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int64_t keep = vocab;
  if (params.top_k > 0 && params.top_k < vocab) {
    keep = params.top_k;
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  std::vector<float> probs(static_cast<size_t>(keep));
  double m = static_cast<double>(logits[order[0]]) * inv_t, sum = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    probs[i] = static_cast<float>(std::exp(static_cast<double>(logits[order[i]]) * inv_t - m));
    sum += probs[i];
  }
  if (params.top_p < 1.0f) {
    double cumulative = 0.0;
    int64_t cut = keep;
    for (int64_t i = 0; i < keep; ++i) {
      cumulative += probs[i] / sum;
      if (cumulative >= params.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    sum = 0.0;
    for (int64_t i = 0; i < keep; ++i) sum += probs[i];
  }
  const double target =
      static_cast<double>(uniform_from_bits(philox_draw(params.seed, sequence_id, position).v[0])) * sum;
  int64_t chosen = keep - 1;
  double cumulative = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    cumulative += probs[i];
    if (target < cumulative) {
      chosen = i;
      break;
    }
  }
  result.token = order[chosen];
  result.logprob = static_cast<float>(std::log(probs[chosen] / sum));
  result.logprob_t1 = ref_log_softmax_at(logits, vocab, result.token);
  return result;
}

// How far ref_sample's two fragile comparisons (the top-p cut and the draw) are from their
// boundaries, as a fraction of the kept mass: below ~1e-5 another implementation's float exp and
// summation order may legitimately pick a neighbour. 1 for greedy (exact float compares).
inline double ref_sample_margin(const float* logits, int64_t vocab, const SamplingParams& p, uint64_t seq,
                                uint64_t pos) {
  if (p.temperature == 0.0f) return 1.0;
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  int64_t keep = p.top_k > 0 && p.top_k < vocab ? p.top_k : vocab;
  double inv_t = 1.0 / p.temperature, m = logits[order[0]] * inv_t, sum = 0;
  std::vector<double> probs(static_cast<size_t>(keep));
  for (int64_t i = 0; i < keep; ++i) sum += probs[i] = static_cast<float>(std::exp(logits[order[i]] * inv_t - m));
  double margin = 1.0;
  if (p.top_p < 1.0f) {
    double cumulative = 0;
    for (int64_t i = 0; i < keep; ++i) {
      double before = cumulative / sum;
      cumulative += probs[i];
      margin = std::min(margin, std::fabs(cumulative / sum - p.top_p));
      if (cumulative / sum >= p.top_p) {
        margin = std::min(margin, std::fabs(p.top_p - before));
        keep = i + 1;
        break;
      }
    }
    sum = 0;
    for (int64_t i = 0; i < keep; ++i) sum += probs[i];
  }
  double target = static_cast<double>(uniform_from_bits(philox_draw(p.seed, seq, pos).v[0])) * sum, cumulative = 0;
  for (int64_t i = 0; i < keep; ++i) {
    margin = std::min(margin, std::fabs(cumulative - target) / sum);
    cumulative += probs[i];
    margin = std::min(margin, std::fabs(cumulative - target) / sum);
    if (target < cumulative) break;
  }
  return margin;
}

// ---------------------------------------------------------------------------------------------
// GRPO advantage (verl's compute_grpo_outcome_advantage): per group of G, A = (r - mean) /
// (std + eps) with the unbiased std, or r - mean; a group of one: mean 0, std 1.
// ---------------------------------------------------------------------------------------------
inline std::vector<double> ref_advantages(const std::vector<float>& r, int64_t groups, int64_t G, bool divide_std,
                                          double eps) {
  std::vector<double> a(r.size());
  for (int64_t g = 0; g < groups; ++g) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < G; ++i) mean += r[g * G + i];
    mean /= G;
    for (int64_t i = 0; i < G; ++i) var += (r[g * G + i] - mean) * (r[g * G + i] - mean);
    double sd = G > 1 ? std::sqrt(var / (G - 1)) : 1.0;
    if (G == 1) mean = 0;  // verl: mean 0, std 1 for a group of one
    for (int64_t i = 0; i < G; ++i)
      a[g * G + i] = divide_std ? (r[g * G + i] - mean) / (sd + eps) : r[g * G + i] - mean;
  }
  return a;
}

// ---------------------------------------------------------------------------------------------
// GRPO loss (rl/grpo/algos.h), per token under weights w_t (0 = not trained), verl's clamps:
// ratio = exp(clamp(logp - old, +-20)), pg = max(-A r, -A clip(r, 1 - lo, 1 + hi)), k3 KL.
// ---------------------------------------------------------------------------------------------
struct RefLoss {
  double loss = 0, tokens = 0, clipped = 0, ratio = 0, approx_kl = 0, ref_kl = 0;
  std::vector<double> dlogp;
};

inline RefLoss ref_grpo_loss_weighted(const std::vector<double>& logp, const std::vector<float>& old,
                                      const std::vector<float>* ref, const std::vector<float>& adv,
                                      const std::vector<double>& weights, double clip_low, double clip_high,
                                      double kl_coef, const std::vector<double>* is_weights = nullptr,
                                      double dual_clip = 0, int kl_estimator = 3) {
  RefLoss out;
  out.dlogp.assign(logp.size(), 0.0);
  for (size_t t = 0; t < logp.size(); ++t) {
    const double w = weights[t];
    if (w == 0) continue;
    double lr = logp[t] - old[t];
    double r = std::exp(std::clamp(lr, -20.0, 20.0));
    double rc = std::clamp(r, 1 - clip_low, 1 + clip_high);
    double a = adv[t], pg1 = -a * r, pg2 = -a * rc;
    bool clipped = pg2 > pg1;
    double pg = std::max(pg1, pg2);
    if (dual_clip > 0 && a < 0 && pg > -a * dual_clip) pg = -a * dual_clip, clipped = true;  // dual-clip cap
    // The rollout importance weight scales the policy term only (rl/grpo/algos.h).
    const double v = is_weights ? (*is_weights)[t] : 1.0;
    double l = v * pg, dl = clipped || std::fabs(lr) >= 20 ? 0.0 : -v * a * r;
    double kl = 0;
    if (kl_coef > 0 && kl_estimator != 3) {  // k1 = logp - ref, k2 = (logp - ref)^2 / 2
      const double d = (*ref)[t] - logp[t];
      kl = kl_estimator == 1 ? -d : 0.5 * d * d;
      l += kl_coef * kl;
      dl += kl_coef * (kl_estimator == 1 ? 1.0 : -d);
    } else if (kl_coef > 0) {
      double d = (*ref)[t] - logp[t], dc = std::clamp(d, -20.0, 20.0);
      double k = std::exp(dc) - dc - 1;
      kl = std::clamp(k, -10.0, 10.0);
      l += kl_coef * kl;
      if (std::fabs(d) < 20 && std::fabs(k) < 10) dl += kl_coef * (1 - std::exp(d));
    }
    out.loss += w * l;
    out.dlogp[t] = w * dl;
    out.tokens += 1, out.clipped += clipped, out.ratio += r, out.approx_kl += old[t] - logp[t], out.ref_kl += kl;
  }
  return out;
}

// The aggregation weights from their definitions: token_mean w = 1/denominator, else
// 1/(n_s denominator), n_s the masked tokens of t's sequence; 0 where the mask is 0.
inline std::vector<double> ref_loss_weights(const std::vector<uint8_t>& mask, const std::vector<int32_t>& cu,
                                            bool token_mean, double denominator) {
  std::vector<double> w(mask.size(), 0.0);
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    double n = 0;
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t) n += mask[t];
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t)
      if (mask[t]) w[t] = token_mean ? 1.0 / denominator : 1.0 / (n * denominator);
  }
  return w;
}

inline RefLoss ref_grpo_loss(const std::vector<double>& logp, const std::vector<float>& old,
                             const std::vector<float>* ref, const std::vector<float>& adv,
                             const std::vector<uint8_t>& mask, const std::vector<int32_t>& cu, double clip_low,
                             double clip_high, double kl_coef, bool token_mean, double denominator) {
  return ref_grpo_loss_weighted(logp, old, ref, adv, ref_loss_weights(mask, cu, token_mean, denominator), clip_low,
                                clip_high, kl_coef);
}

// ---------------------------------------------------------------------------------------------
// AdamW (torch.optim.AdamW, decoupled weight decay), one step from `step` (counting from 1); the
// gradient norm's square (float64 sum of f32 squares, exact products) and
// torch.nn.utils.clip_grad_norm_'s coefficient min(1, max_norm / (norm + 1e-6)).
// ---------------------------------------------------------------------------------------------
struct RefAdam {
  std::vector<double> p, m, v;
};

inline void ref_adamw_step(RefAdam& s, const std::vector<float>& g, double scale, double lr, double b1, double b2,
                           double eps, double wd, int64_t step) {
  for (size_t i = 0; i < s.p.size(); ++i) {
    double gi = g[i] * scale;
    s.p[i] *= 1 - lr * wd;
    s.m[i] = b1 * s.m[i] + (1 - b1) * gi;
    s.v[i] = b2 * s.v[i] + (1 - b2) * gi * gi;
    double mh = s.m[i] / (1 - std::pow(b1, step)), vh = s.v[i] / (1 - std::pow(b2, step));
    s.p[i] -= lr * mh / (std::sqrt(vh) + eps);
  }
}

inline double ref_grad_sq_sum(const std::vector<float>& g) {
  double s = 0;
  for (float x : g) s += static_cast<double>(x) * x;
  return s;
}
inline double ref_clip_coefficient(double sq_sum, double max_norm) {
  return max_norm > 0 ? std::min(1.0, max_norm / (std::sqrt(sq_sum) + 1e-6)) : 1.0;
}

}  // namespace sqlrl::testing
