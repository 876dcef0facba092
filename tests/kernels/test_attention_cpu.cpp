// The CPU attention kernels at the Qwen head sizes (64, 128), where they run the register-tiled
// code compiled for a fixed head_dim (test_ops covers head_dim 8, the run-time-D code), against a
// float64 reference forward and its analytic backward. Sequence lengths 1, 5, 17 and 38 cover
// partial query tiles (4 rows) and partial key tiles (16 columns).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/attention.h"

namespace sqlrl {
namespace {

struct Grads {
  std::vector<double> out, dq, dk, dv;
};

// out = softmax(q k^T / sqrt(D)) v causally per sequence; dq, dk, dv for the objective sum(out * dout).
Grads reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                const std::vector<float>& dout, const std::vector<int32_t>& cu, AttentionShape s) {
  const int64_t H = s.heads, KVH = s.kv_heads, D = s.head_dim, T = cu.back();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Grads g{std::vector<double>(T * H * D), std::vector<double>(T * H * D), std::vector<double>(T * KVH * D),
          std::vector<double>(T * KVH * D)};
  for (size_t seq = 0; seq + 1 < cu.size(); ++seq)
    for (int64_t h = 0; h < H; ++h) {
      int64_t kv = h / (H / KVH);
      auto Q = [&](int64_t t, int64_t d) { return static_cast<double>(q[(t * H + h) * D + d]); };
      auto K = [&](int64_t t, int64_t d) { return static_cast<double>(k[(t * KVH + kv) * D + d]); };
      auto V = [&](int64_t t, int64_t d) { return static_cast<double>(v[(t * KVH + kv) * D + d]); };
      auto dO = [&](int64_t t, int64_t d) { return static_cast<double>(dout[(t * H + h) * D + d]); };
      for (int64_t i = cu[seq]; i < cu[seq + 1]; ++i) {
        std::vector<double> p, dp;
        double m = -INFINITY, sum = 0.0, delta = 0.0;
        for (int64_t j = cu[seq]; j <= i; ++j) {
          double x = 0.0;
          for (int64_t d = 0; d < D; ++d) x += Q(i, d) * K(j, d);
          p.push_back(x * scale);
          m = std::max(m, p.back());
        }
        for (double& e : p) sum += (e = std::exp(e - m));
        for (double& e : p) e /= sum;
        for (int64_t j = cu[seq]; j <= i; ++j) {
          double x = 0.0;
          for (int64_t d = 0; d < D; ++d) {
            g.out[(i * H + h) * D + d] += p[j - cu[seq]] * V(j, d);
            x += dO(i, d) * V(j, d);
          }
          dp.push_back(x);
          delta += p[j - cu[seq]] * x;
        }
        for (int64_t j = cu[seq]; j <= i; ++j) {
          double pj = p[j - cu[seq]], ds = pj * (dp[j - cu[seq]] - delta) * scale;
          for (int64_t d = 0; d < D; ++d) {
            g.dq[(i * H + h) * D + d] += ds * K(j, d);
            g.dk[(j * KVH + kv) * D + d] += ds * Q(i, d);
            g.dv[(j * KVH + kv) * D + d] += pj * dO(i, d);
          }
        }
      }
    }
  return g;
}

double scaled_error(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0.0, scale = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

std::vector<float> random_normal(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& e : x) e = normal(rng);
  return x;
}

class AttentionCpu : public ::testing::TestWithParam<int64_t> {};

TEST_P(AttentionCpu, ForwardBackwardAndPagedMatchFloat64) {
  const AttentionShape shape{4, 2, GetParam()};
  const int64_t H = shape.heads, KVH = shape.kv_heads, D = shape.head_dim;
  const std::vector<int32_t> cu = {0, 1, 6, 23, 61};
  const int64_t T = cu.back(), S = static_cast<int64_t>(cu.size()) - 1;
  std::mt19937 rng(7);
  auto randn = [&](int64_t n) { return random_normal(rng, n); };
  std::vector<float> q = randn(T * H * D), k = randn(T * KVH * D), v = randn(T * KVH * D), dout = randn(T * H * D);
  Grads want = reference(q, k, v, dout, cu, shape);

  std::vector<float> out(T * H * D), lse(T * H), dq(T * H * D), dk(T * KVH * D), dv(T * KVH * D);
  attention_forward_cpu(out.data(), lse.data(), q.data(), k.data(), v.data(), cu.data(), S, shape);
  attention_backward_cpu(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(), k.data(),
                         v.data(), cu.data(), S, shape);
  // fp32 sums of up to 38 products of unit normals (|q.k| ~ sqrt(D) before the 1/sqrt(D) scale):
  // a few 1e-7 relative per op, 1e-5 of the largest entry leaves room and still catches any
  // wrong index, mask or missing term (those are O(1) of the scale).
  EXPECT_LE(scaled_error(out, want.out), 1e-5);
  EXPECT_LE(scaled_error(dq, want.dq), 1e-5);
  EXPECT_LE(scaled_error(dk, want.dk), 1e-5);
  EXPECT_LE(scaled_error(dv, want.dv), 1e-5);

  // Paged decode over the same keys, blocks of 16 handed out in reverse: every token queries
  // its own prefix, which is the varlen forward again.
  const int64_t bs = 16, max_blocks = 3;
  std::vector<float> kc(S * max_blocks * bs * KVH * D, NAN), vc(kc.size(), NAN);
  std::vector<int32_t> tables, positions;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = cu[s]; t < cu[s + 1]; ++t) {
      int64_t pos = t - cu[s];
      auto block = [&](int64_t b) { return static_cast<int32_t>(S * max_blocks - 1 - (s * max_blocks + b)); };
      int64_t slot = (block(pos / bs) * bs + pos % bs) * KVH * D;
      std::copy(k.begin() + t * KVH * D, k.begin() + (t + 1) * KVH * D, kc.begin() + slot);
      std::copy(v.begin() + t * KVH * D, v.begin() + (t + 1) * KVH * D, vc.begin() + slot);
      for (int64_t b = 0; b < max_blocks; ++b) tables.push_back(block(b));
      positions.push_back(static_cast<int32_t>(pos));
    }
  std::vector<float> paged(T * H * D);
  PagedQueries pq{T, tables.data(), max_blocks, positions.data(), bs};
  paged_attention_cpu(paged.data(), q.data(), kc.data(), vc.data(), pq, shape);
  EXPECT_LE(scaled_error(paged, want.out), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Kernels, AttentionCpu, ::testing::Values(64, 128, 24));

// A batch with shared prefixes against the same batch written out in full (each sharer's
// prefix rows copied in front of its own): outputs and lse of every stored row agree, dq of the
// stored rows agree, and each prefix row's dk/dv equals its own plus every sharer's copy.
// Sharers: a strict part of a sequence, all of it, a one-token prefix, and a plain sequence in
// between; lengths cross the 4-row and 16-key tile edges.
TEST_P(AttentionCpu, SharedPrefixesMatchTheWrittenOutBatch) {
  const AttentionShape shape{4, 2, GetParam()};
  const int64_t H = shape.heads, KVH = shape.kv_heads, D = shape.head_dim;
  const std::vector<int32_t> cu = {0, 20, 29, 34, 41, 44, 61};
  const std::vector<int32_t> pseq = {-1, 0, 0, -1, -1, 4}, plen = {0, 13, 20, 0, 0, 1};
  const int64_t T = cu.back(), S = static_cast<int64_t>(cu.size()) - 1;
  std::mt19937 rng(11);
  auto randn = [&](int64_t n) { return random_normal(rng, n); };
  std::vector<float> q = randn(T * H * D), k = randn(T * KVH * D), v = randn(T * KVH * D), dout = randn(T * H * D);
  std::vector<float> out(T * H * D), lse(T * H), dq(T * H * D), dk(T * KVH * D), dv(T * KVH * D);
  SharedPrefixes pre{pseq.data(), plen.data()};
  attention_forward_cpu(out.data(), lse.data(), q.data(), k.data(), v.data(), cu.data(), S, shape, pre);
  attention_backward_cpu(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(), k.data(),
                         v.data(), cu.data(), S, shape, pre);

  // Written out: row origin[t] of the shared batch for every row t; copied prefix rows get
  // dout 0 (they are not outputs of the shared batch).
  std::vector<int32_t> wcu = {0}, origin;
  std::vector<bool> copy;
  for (int64_t s = 0; s < S; ++s) {
    for (int32_t j = 0; j < plen[s]; ++j) origin.push_back(cu[pseq[s]] + j), copy.push_back(true);
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t) origin.push_back(t), copy.push_back(false);
    wcu.push_back(static_cast<int32_t>(origin.size()));
  }
  const int64_t W = wcu.back();
  auto rows_of = [&](const std::vector<float>& x, int64_t width, bool zero_copies) {
    std::vector<float> y(W * width);
    for (int64_t t = 0; t < W; ++t)
      if (!(zero_copies && copy[t])) std::copy_n(x.begin() + origin[t] * width, width, y.begin() + t * width);
    return y;
  };
  std::vector<float> wq = rows_of(q, H * D, false), wk = rows_of(k, KVH * D, false), wv = rows_of(v, KVH * D, false);
  std::vector<float> wdout = rows_of(dout, H * D, true);
  std::vector<float> wout(W * H * D), wlse(W * H), wdq(W * H * D), wdk(W * KVH * D), wdv(W * KVH * D);
  attention_forward_cpu(wout.data(), wlse.data(), wq.data(), wk.data(), wv.data(), wcu.data(), S, shape);
  attention_backward_cpu(wdq.data(), wdk.data(), wdv.data(), wdout.data(), wout.data(), wlse.data(), wq.data(),
                         wk.data(), wv.data(), wcu.data(), S, shape);

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
  // The forward of a stored row is the same arithmetic in the same order either way: exact.
  EXPECT_EQ(out, want_out);
  EXPECT_EQ(lse, want_lse);
  // Backward sums group the query rows into tiles differently: fp32 reassociation only.
  EXPECT_LE(scaled_error(dq, std::vector<double>(want_dq.begin(), want_dq.end())), 1e-5);
  EXPECT_LE(scaled_error(dk, want_dk), 1e-5);
  EXPECT_LE(scaled_error(dv, want_dv), 1e-5);
  // A prefix row's key gradient really has the sharers' part (0 has two sharers, 4 one).
  double sharer_part = 0.0;
  for (int64_t e = 0; e < KVH * D; ++e) sharer_part += std::abs(want_dk[e] - wdk[e]);
  EXPECT_GT(sharer_part, 1e-3);

  // Bad tables are errors naming the sequence.
  const std::vector<int32_t> later = {-1, 2, -1, -1, -1, -1}, nested = {-1, 0, 1, -1, -1, -1},
                             too_long = {0, 21, 0, 0, 0, 0};
  EXPECT_THROW(attention_forward_cpu(out.data(), lse.data(), q.data(), k.data(), v.data(), cu.data(), S, shape,
                                     {later.data(), plen.data()}), std::exception);
  EXPECT_THROW(attention_forward_cpu(out.data(), lse.data(), q.data(), k.data(), v.data(), cu.data(), S, shape,
                                     {nested.data(), plen.data()}), std::exception);
  EXPECT_THROW(attention_backward_cpu(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(),
                                      k.data(), v.data(), cu.data(), S, shape, {pseq.data(), too_long.data()}),
               std::exception);
}

}  // namespace
}  // namespace sqlrl
