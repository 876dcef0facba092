// attention_forward_cpu / attention_backward_cpu compute one fixed function of their inputs on
// every path (each ISA clone, head_dim compiled or read at run time, any vector width): that of
// this scalar transcription, in its order. Training's bits depend on it (the demo's results, a
// resumed run, N ranks against --grad-accum N), and so do the claims that a kernel change "keeps
// every bit". A path that reassociated a sum (another vector width summing across lanes, keys in
// another order) would still agree with the float64 reference (op_attention.cpp) to a few ulps,
// and fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/vec.h"

namespace sqlrl {
namespace {

constexpr int64_t kTile = 4;  // queries per tile: keys past a tile's causal limit still add 0 * x

template <bool Fma>
float dot(const float* a, const float* b, int64_t D) {
  float s = 0.0f;
  for (int64_t d = 0; d < D; ++d) s = cpu::madd<Fma>(a[d], b[d], s);
  return s;
}

// Rows of one (sequence, head): row(i) = base + i * stride.
struct Rows {
  const float* base;
  int64_t stride;
  const float* operator()(int64_t i) const { return base + i * stride; }
};

// Forward of one (sequence, head): scores as d-ascending FMA chains times the scale; softmax with
// exp_fast over the causal keys, summed left to right; out as key-ascending FMA chains over every
// key of the tile (those past a query's limit weigh 0).
template <bool Fma>
void forward(float* out, float* lse, int64_t out_stride, Rows q, Rows k, Rows v, int64_t len, int64_t D) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int64_t i = 0; i < len; ++i) {
    const int64_t n = std::min(len, (i / kTile + 1) * kTile), valid = i + 1;
    std::vector<float> p(static_cast<size_t>(n), 0.0f);
    for (int64_t j = 0; j < valid; ++j) p[j] = dot<Fma>(q(i), k(j), D) * scale;
    float m = p[0], sum = 0.0f;
    for (int64_t j = 1; j < valid; ++j) m = p[j] > m ? p[j] : m;
    for (int64_t j = 0; j < valid; ++j) p[j] = cpu::exp_fast<Fma>(p[j] - m);
    for (int64_t j = 0; j < valid; ++j) sum += p[j];
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < valid; ++j) p[j] *= inv;
    lse[i] = m + std::log(sum);
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < n; ++j) acc = cpu::madd<Fma>(p[j], v(j)[d], acc);
      out[i * out_stride + d] = acc;
    }
  }
}

// Backward of one (sequence, head), adding into dk / dv [len, D] (heads of a kv group in turn):
// tiles of kTile queries; a tile's padding rows repeat its last query with weight 0.
template <bool Fma>
void backward(float* dq, int64_t dq_stride, float* dk, float* dv, Rows q, Rows k, Rows v, Rows dout, Rows out,
              const float* lse, int64_t len, int64_t D) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int64_t i0 = 0; i0 < len; i0 += kTile) {
    const int64_t rows = std::min(kTile, len - i0), n = i0 + rows;
    std::vector<float> p(static_cast<size_t>(kTile * n), 0.0f), ds(p.size(), 0.0f);
    int64_t qi[kTile];
    for (int64_t r = 0; r < kTile; ++r) {
      qi[r] = std::min(i0 + r, len - 1);
      if (r >= rows) continue;
      const int64_t i = i0 + r;
      const float delta = dot<Fma>(dout(i), out(i), D);
      for (int64_t j = 0; j <= i; ++j) {
        const float pj = cpu::exp_fast<Fma>(dot<Fma>(q(i), k(j), D) * scale - lse[i]);
        p[r * n + j] = pj;
        ds[r * n + j] = pj * (dot<Fma>(dout(i), v(j), D) * 1.0f - delta) * scale;
      }
      for (int64_t d = 0; d < D; ++d) {
        float acc = 0.0f;
        for (int64_t j = 0; j < n; ++j) acc = cpu::madd<Fma>(ds[r * n + j], k(j)[d], acc);
        dq[i * dq_stride + d] = acc;
      }
    }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t r = 0; r < kTile; ++r)
        for (int64_t d = 0; d < D; ++d) {
          dk[j * D + d] = cpu::madd<Fma>(ds[r * n + j], q(qi[r])[d], dk[j * D + d]);
          dv[j * D + d] = cpu::madd<Fma>(p[r * n + j], dout(qi[r])[d], dv[j * D + d]);
        }
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(AttentionOrder, EveryPathComputesTheTranscriptionsBits) {
  const bool fma = cpu::cpu_isa() != cpu::Isa::Baseline;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::vector<int32_t> lens = {1, 6, 37, 70};
  std::vector<int32_t> cu{0};
  for (int32_t l : lens) cu.push_back(cu.back() + l);
  const int64_t T = cu.back(), S = static_cast<int64_t>(lens.size()), KVH = 2;
  int64_t checked = 0;
  // 32 / 64 / 128: compiled head_dims; 24 and 8: read at run time.
  for (int64_t D : {32, 64, 128, 24, 8})
    for (int64_t group : {1, 3}) {
      SCOPED_TRACE("head_dim " + std::to_string(D) + " group " + std::to_string(group));
      const int64_t H = KVH * group;
      auto random = [&](int64_t count, float sd) {
        std::vector<float> x(static_cast<size_t>(count));
        for (float& e : x) e = sd * normal(rng);
        return x;
      };
      const std::vector<float> q = random(T * H * D, 1.0f), k = random(T * KVH * D, 1.5f), v = random(T * KVH * D, 1.0f),
                               dout = random(T * H * D, 1.0f);
      std::vector<float> out(q.size()), lse(static_cast<size_t>(T * H)), dq(q.size()), dk(k.size()), dv(v.size());
      attention_forward_cpu(out.data(), lse.data(), q.data(), k.data(), v.data(), cu.data(), S, {H, KVH, D});
      attention_backward_cpu(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(), k.data(),
                             v.data(), cu.data(), S, {H, KVH, D});
      std::vector<float> want_out(out.size()), want_lse(lse.size()), want_dq(dq.size()), want_dk(dk.size()),
          want_dv(dv.size());
      for (int64_t s = 0; s < S; ++s) {
        const int64_t t0 = cu[s], len = lens[s];
        for (int64_t kvh = 0; kvh < KVH; ++kvh) {
          const Rows kr{k.data() + (t0 * KVH + kvh) * D, KVH * D}, vr{v.data() + (t0 * KVH + kvh) * D, KVH * D};
          std::vector<float> dk_acc(static_cast<size_t>(len * D), 0.0f), dv_acc(dk_acc.size(), 0.0f), head_lse(len);
          for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
            const int64_t row0 = t0 * H + h;
            const Rows qr{q.data() + row0 * D, H * D};
            (fma ? forward<true> : forward<false>)(want_out.data() + row0 * D, head_lse.data(), H * D, qr, kr, vr, len, D);
            for (int64_t i = 0; i < len; ++i) want_lse[(t0 + i) * H + h] = head_lse[i];
            // The kernel's own out and lse: the backward is checked on its inputs, not on ours.
            std::vector<float> kernel_lse(static_cast<size_t>(len));
            for (int64_t i = 0; i < len; ++i) kernel_lse[i] = lse[(t0 + i) * H + h];
            (fma ? backward<true> : backward<false>)(want_dq.data() + row0 * D, H * D, dk_acc.data(), dv_acc.data(), qr,
                                                     kr, vr, {dout.data() + row0 * D, H * D},
                                                     {out.data() + row0 * D, H * D}, kernel_lse.data(), len, D);
          }
          for (int64_t j = 0; j < len; ++j) {
            std::copy_n(dk_acc.begin() + j * D, D, want_dk.begin() + ((t0 + j) * KVH + kvh) * D);
            std::copy_n(dv_acc.begin() + j * D, D, want_dv.begin() + ((t0 + j) * KVH + kvh) * D);
          }
        }
      }
      EXPECT_TRUE(same_bits(out, want_out)) << "out";
      EXPECT_TRUE(same_bits(lse, want_lse)) << "lse";
      EXPECT_TRUE(same_bits(dq, want_dq)) << "dq";
      EXPECT_TRUE(same_bits(dk, want_dk)) << "dk";
      EXPECT_TRUE(same_bits(dv, want_dv)) << "dv";
      ++checked;
    }
  std::printf("%lld shapes bit for bit (%s clone)\n", static_cast<long long>(checked),
              cpu::cpu_isa() == cpu::Isa::Avx512 ? "AVX-512" : cpu::cpu_isa() == cpu::Isa::Avx2 ? "AVX2" : "SSE2");
}

}  // namespace
}  // namespace sqlrl
