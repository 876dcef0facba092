// One registry of op cases, in the spirit of ggml's test-backend-ops: each case declares its
// inputs, a float64 reference written here, and how a backend runs forward and backward. Every
// case runs on every backend present (the CUDA kernels add a second Backend to backends());
// forward is compared with the reference, and backward with central finite differences of the
// float64 reference objective sum(out * dout).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/logprob.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace sqlrl {
namespace {

using F = std::vector<float>;
using D = std::vector<double>;

F to_f(const D& d) { return F(d.begin(), d.end()); }

struct OpCase {
  std::string name;
  std::vector<D> inputs;  // float inputs (differentiable ones listed in grad_inputs)
  std::vector<size_t> grad_inputs;
  std::function<D(const std::vector<D>&)> reference;  // float64, flattened outputs
  // A backend's forward (flattened outputs) and backward (gradients of grad_inputs given dout).
  std::function<F(const std::vector<F>&)> forward;
  std::function<std::vector<F>(const std::vector<F>&, const F&)> backward;
};

struct Backend {
  std::string name;
  std::function<std::vector<OpCase>()> cases;
};

D random_vec(std::mt19937& rng, size_t n, double scale = 1.0, double offset = 0.0) {
  std::normal_distribution<double> normal(0.0, 1.0);
  D v(n);
  for (double& x : v) x = static_cast<double>(static_cast<float>(offset + scale * normal(rng)));  // exact in f32
  return v;
}

const std::vector<int32_t> kCu = {0, 5, 6, 13};  // three sequences: 5, 1, 7 tokens
const std::vector<int32_t> kPositions = {0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 5, 6};
const std::vector<int32_t> kTokens = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9};

std::vector<OpCase> cpu_cases() {
  std::mt19937 rng(42);
  std::vector<OpCase> cases;
  {  // matmul with bias
    const int64_t T = 7, C = 12, O = 9;
    cases.push_back({"matmul", {random_vec(rng, T * C), random_vec(rng, O * C), random_vec(rng, O)}, {0, 1, 2},
                     [=](const std::vector<D>& in) {
                       D out(T * O);
                       for (int64_t t = 0; t < T; ++t)
                         for (int64_t o = 0; o < O; ++o) {
                           double s = in[2][o];
                           for (int64_t c = 0; c < C; ++c) s += in[0][t * C + c] * in[1][o * C + c];
                           out[t * O + o] = s;
                         }
                       return out;
                     },
                     [=](const std::vector<F>& in) {
                       F out(T * O);
                       matmul_forward_cpu(out.data(), in[0].data(), in[1].data(), in[2].data(), T, C, O);
                       return out;
                     },
                     [=](const std::vector<F>& in, const F& dout) {
                       std::vector<F> g = {F(T * C, 0), F(O * C, 0), F(O, 0)};
                       matmul_backward_cpu(g[0].data(), g[1].data(), g[2].data(), dout.data(), in[0].data(), in[1].data(),
                                           T, C, O);
                       return g;
                     }});
  }
  {  // rmsnorm
    const int64_t R = 6, C = 10;
    const float eps = 1e-5f;
    cases.push_back({"rmsnorm", {random_vec(rng, R * C), random_vec(rng, C, 0.2, 1.0)}, {0, 1},
                     [=](const std::vector<D>& in) {
                       D out(R * C);
                       for (int64_t r = 0; r < R; ++r) {
                         double ss = 0;
                         for (int64_t i = 0; i < C; ++i) ss += in[0][r * C + i] * in[0][r * C + i];
                         for (int64_t i = 0; i < C; ++i) out[r * C + i] = in[1][i] * in[0][r * C + i] / std::sqrt(ss / C + eps);
                       }
                       return out;
                     },
                     [=](const std::vector<F>& in) {
                       F out(R * C), rstd(R);
                       rmsnorm_forward_cpu(out.data(), rstd.data(), in[0].data(), in[1].data(), R, C, eps);
                       return out;
                     },
                     [=](const std::vector<F>& in, const F& dout) {
                       F out(R * C), rstd(R);
                       rmsnorm_forward_cpu(out.data(), rstd.data(), in[0].data(), in[1].data(), R, C, eps);
                       std::vector<F> g = {F(R * C, 0), F(C, 0)};
                       rmsnorm_backward_cpu(g[0].data(), g[1].data(), dout.data(), in[0].data(), in[1].data(), rstd.data(), R, C);
                       return g;
                     }});
  }
  {  // rope
    const int64_t T = 13, H = 3, Dh = 8;
    const float theta = 500.0f;
    cases.push_back({"rope", {random_vec(rng, T * H * Dh)}, {0},
                     [=](const std::vector<D>& in) {
                       D x = in[0];
                       for (int64_t t = 0; t < T; ++t)
                         for (int64_t h = 0; h < H; ++h)
                           for (int64_t i = 0; i < Dh / 2; ++i) {
                             double a = kPositions[t] * std::pow(static_cast<double>(theta), -2.0 * i / Dh);
                             double* v = x.data() + (t * H + h) * Dh;
                             double p = in[0][(t * H + h) * Dh + i], q = in[0][(t * H + h) * Dh + i + Dh / 2];
                             v[i] = p * std::cos(a) - q * std::sin(a);
                             v[i + Dh / 2] = q * std::cos(a) + p * std::sin(a);
                           }
                       return x;
                     },
                     [=](const std::vector<F>& in) {
                       F x = in[0];
                       rope_forward_cpu(x.data(), kPositions.data(), T, H, Dh, theta);
                       return x;
                     },
                     [=](const std::vector<F>&, const F& dout) {
                       F g = dout;
                       rope_backward_cpu(g.data(), kPositions.data(), T, H, Dh, theta);
                       return std::vector<F>{g};
                     }});
  }
  {  // varlen causal GQA attention
    const int64_t T = 13, H = 4, KVH = 2, Dh = 8;
    AttentionShape shape{H, KVH, Dh};
    cases.push_back({"attention_varlen_gqa",
                     {random_vec(rng, T * H * Dh), random_vec(rng, T * KVH * Dh), random_vec(rng, T * KVH * Dh)},
                     {0, 1, 2},
                     [=](const std::vector<D>& in) {
                       D out(T * H * Dh, 0.0);
                       for (int64_t s = 0; s + 1 < static_cast<int64_t>(kCu.size()); ++s)
                         for (int64_t i = kCu[s]; i < kCu[s + 1]; ++i)
                           for (int64_t h = 0; h < H; ++h) {
                             int64_t kv = h / (H / KVH);
                             D sc;
                             double m = -INFINITY, sum = 0;
                             for (int64_t j = kCu[s]; j <= i; ++j) {
                               double d = 0;
                               for (int64_t e = 0; e < Dh; ++e) d += in[0][(i * H + h) * Dh + e] * in[1][(j * KVH + kv) * Dh + e];
                               sc.push_back(d / std::sqrt(static_cast<double>(Dh)));
                               m = std::max(m, sc.back());
                             }
                             for (double& e : sc) sum += (e = std::exp(e - m));
                             for (int64_t j = kCu[s]; j <= i; ++j)
                               for (int64_t e = 0; e < Dh; ++e)
                                 out[(i * H + h) * Dh + e] += sc[j - kCu[s]] / sum * in[2][(j * KVH + kv) * Dh + e];
                           }
                       return out;
                     },
                     [=](const std::vector<F>& in) {
                       F out(T * H * Dh), lse(T * H);
                       attention_forward_cpu(out.data(), lse.data(), in[0].data(), in[1].data(), in[2].data(), kCu.data(), 3, shape);
                       return out;
                     },
                     [=](const std::vector<F>& in, const F& dout) {
                       F out(T * H * Dh), lse(T * H);
                       attention_forward_cpu(out.data(), lse.data(), in[0].data(), in[1].data(), in[2].data(), kCu.data(), 3, shape);
                       std::vector<F> g = {F(T * H * Dh), F(T * KVH * Dh), F(T * KVH * Dh)};
                       attention_backward_cpu(g[0].data(), g[1].data(), g[2].data(), dout.data(), out.data(), lse.data(),
                                              in[0].data(), in[1].data(), in[2].data(), kCu.data(), 3, shape);
                       return g;
                     }});
    // Paged attention over the same keys/values scattered into blocks of 3: must equal varlen.
    cases.push_back({"attention_paged",
                     {random_vec(rng, T * H * Dh), random_vec(rng, T * KVH * Dh), random_vec(rng, T * KVH * Dh)},
                     {},
                     cases.back().reference,
                     [=](const std::vector<F>& in) {
                       const int64_t bs = 3, max_blocks = 3, num_blocks = 16;
                       F kc(num_blocks * bs * KVH * Dh, NAN), vc(num_blocks * bs * KVH * Dh, NAN);
                       std::vector<int32_t> tables;
                       int32_t next = 15;  // hand out blocks from the end, out of order
                       std::vector<std::vector<int32_t>> seq_blocks(3);
                       for (auto& sb : seq_blocks)
                         for (int64_t b = 0; b < max_blocks; ++b) sb.push_back(next--);
                       for (int64_t s = 0; s < 3; ++s)
                         for (int64_t t = kCu[s]; t < kCu[s + 1]; ++t) {
                           int64_t p = t - kCu[s], slot = (seq_blocks[s][p / bs] * bs + p % bs) * KVH * Dh;
                           std::copy(in[1].begin() + t * KVH * Dh, in[1].begin() + (t + 1) * KVH * Dh, kc.begin() + slot);
                           std::copy(in[2].begin() + t * KVH * Dh, in[2].begin() + (t + 1) * KVH * Dh, vc.begin() + slot);
                           tables.insert(tables.end(), seq_blocks[s].begin(), seq_blocks[s].end());
                         }
                       F out(T * H * Dh);
                       PagedQueries q{T, tables.data(), max_blocks, kPositions.data(), bs};
                       paged_attention_cpu(out.data(), in[0].data(), kc.data(), vc.data(), q, shape);
                       return out;
                     },
                     nullptr});
  }
  {  // swiglu
    const int64_t N = 40;
    cases.push_back({"swiglu", {random_vec(rng, N, 2.0), random_vec(rng, N)}, {0, 1},
                     [=](const std::vector<D>& in) {
                       D out(N);
                       for (int64_t i = 0; i < N; ++i) out[i] = in[0][i] / (1 + std::exp(-in[0][i])) * in[1][i];
                       return out;
                     },
                     [=](const std::vector<F>& in) {
                       F out(N);
                       swiglu_forward_cpu(out.data(), in[0].data(), in[1].data(), N);
                       return out;
                     },
                     [=](const std::vector<F>& in, const F& dout) {
                       std::vector<F> g = {F(N), F(N)};
                       swiglu_backward_cpu(g[0].data(), g[1].data(), dout.data(), in[0].data(), in[1].data(), N);
                       return g;
                     }});
  }
  {  // embedding (repeated tokens accumulate)
    const int64_t V = 10, C = 6, T = 13;
    cases.push_back({"embedding", {random_vec(rng, V * C)}, {0},
                     [=](const std::vector<D>& in) {
                       D out(T * C);
                       for (int64_t t = 0; t < T; ++t)
                         for (int64_t c = 0; c < C; ++c) out[t * C + c] = in[0][kTokens[t] * C + c];
                       return out;
                     },
                     [=](const std::vector<F>& in) {
                       F out(T * C);
                       embedding_forward_cpu(out.data(), in[0].data(), kTokens.data(), T, V, C);
                       return out;
                     },
                     [=](const std::vector<F>&, const F& dout) {
                       std::vector<F> g = {F(V * C, 0)};
                       embedding_backward_cpu(g[0].data(), dout.data(), kTokens.data(), T, V, C);
                       return g;
                     }});
  }
  // fused chunked log-prob (chunk 4 over 13 tokens: a ragged last chunk), unscaled and at the
  // logit scale of sampling temperature 0.6
  for (float scale : {1.0f, 1.0f / 0.6f}) {
    const int64_t T = 13, C = 8, V = 10;
    LogprobShape shape{T, C, V, 4, scale};
    cases.push_back({scale == 1.0f ? "logprob_fused" : "logprob_fused_scaled", {random_vec(rng, T * C), random_vec(rng, V * C)}, {0, 1},
                     [=](const std::vector<D>& in) {
                       D out(T);
                       for (int64_t t = 0; t < T; ++t) {
                         D z(V);
                         double m = -INFINITY, sum = 0;
                         for (int64_t v = 0; v < V; ++v) {
                           for (int64_t c = 0; c < C; ++c) z[v] += in[0][t * C + c] * in[1][v * C + c];
                           z[v] *= scale;
                           m = std::max(m, z[v]);
                         }
                         for (int64_t v = 0; v < V; ++v) sum += std::exp(z[v] - m);
                         out[t] = z[kTokens[t]] - m - std::log(sum);
                       }
                       return out;
                     },
                     [=](const std::vector<F>& in) {
                       F out(T), lse(T), scratch(4 * V);
                       logprob_forward_cpu(out.data(), lse.data(), in[0].data(), in[1].data(), kTokens.data(), shape,
                                           scratch.data());
                       return out;
                     },
                     [=](const std::vector<F>& in, const F& dout) {
                       F out(T), lse(T), scratch(4 * V);
                       logprob_forward_cpu(out.data(), lse.data(), in[0].data(), in[1].data(), kTokens.data(), shape,
                                           scratch.data());
                       F masked = dout;
                       masked[2] = 0.0f;  // a masked token: skipped by the backward, still correct
                       std::vector<F> g = {F(T * C, 0), F(V * C, 0)};
                       logprob_backward_cpu(g[0].data(), g[1].data(), masked.data(), in[0].data(), in[1].data(),
                                            kTokens.data(), lse.data(), shape, scratch.data());
                       return g;
                     }});
  }
  return cases;
}

std::vector<Backend> backends() { return {{"cpu", cpu_cases}}; }


TEST(OpRegistry, ForwardMatchesFloat64AndBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(3);
  for (const Backend& backend : backends()) {
    for (const OpCase& op : backend.cases()) {
      std::vector<F> in;
      for (const D& d : op.inputs) in.push_back(to_f(d));
      D want = op.reference(op.inputs);
      F got = op.forward(in);
      ASSERT_EQ(got.size(), want.size()) << backend.name << "/" << op.name;
      double worst = 0, nmse_num = 0, nmse_den = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, std::fabs(got[i] - want[i]) / (1e-5 + 1e-4 * std::fabs(want[i])));
        nmse_num += (got[i] - want[i]) * (got[i] - want[i]);
        nmse_den += want[i] * want[i];
      }
      EXPECT_LE(worst, 1.0) << backend.name << "/" << op.name << " forward";
      EXPECT_LE(nmse_num / std::max(nmse_den, 1e-30), 1e-10) << backend.name << "/" << op.name << " NMSE";
      if (!op.backward) continue;
      // dout with the masked-logprob convention: a weight per output.
      D dout = random_vec(rng, want.size());
      F dout_f = to_f(dout);
      std::vector<F> grads = op.backward(in, dout_f);
      if (op.name.starts_with("logprob_fused")) dout[2] = 0.0;  // its backward masks token 2
      double worst_g = 0;
      for (size_t gi = 0; gi < op.grad_inputs.size(); ++gi) {
        size_t which = op.grad_inputs[gi];
        std::vector<D> x = op.inputs;
        for (size_t e = 0; e < x[which].size(); ++e) {
          const double h = 1e-6, keep = x[which][e];
          auto objective = [&] {
            D out = op.reference(x);
            double s = 0;
            for (size_t i = 0; i < out.size(); ++i) s += out[i] * dout[i];
            return s;
          };
          x[which][e] = keep + h;
          double up = objective();
          x[which][e] = keep - h;
          double down = objective();
          x[which][e] = keep;
          double fd = (up - down) / (2 * h);
          double err = std::fabs(grads[gi][e] - fd) / (1e-4 + 1e-3 * std::fabs(fd));
          worst_g = std::max(worst_g, err);
          EXPECT_LE(err, 1.0) << backend.name << "/" << op.name << " d input " << which << "[" << e << "]: got "
                              << grads[gi][e] << ", finite difference " << fd;
        }
      }
      std::printf("%s/%-22s forward %.3f of budget, backward %.3f of budget\n", backend.name.c_str(), op.name.c_str(),
                  worst, worst_g);
    }
  }
}

}  // namespace
}  // namespace sqlrl
