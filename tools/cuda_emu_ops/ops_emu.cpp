// Driver of tools/cuda_emu_ops/run.sh: the emulated CUDA launchers of RMSNorm, RoPE, SwiGLU,
// embedding, sampling, masked log-prob, the few-row product of decode steps and the fused decode
// prologue against the CPU kernels on small shapes (host memory plays device memory), with the
// tolerances of tests/kernels' CUDA cases. Outputs start as NaN.
#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/decode_qkv.h"
#include "kernels/embedding.h"
#include "kernels/logprob.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "kernels/swiglu.h"
#include "runtime/dtype.h"
#include "tools/cuda_emu/bf16_vectors.h"
#include "runtime/gemm.h"
using namespace sqlrl;

static std::mt19937_64 gen(777);
static int failures = 0;
static const CudaStream kStream{};

std::vector<float> uniform(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> x(n);
  for (auto& v : x) v = bf16_bits_to_f32(f32_to_bf16_bits(d(gen)));
  return x;
}
using emu::bits;
using emu::floats;
// mag (optional): per element, the sum of the magnitudes of the terms a bf16-rounded sum adds up;
// the budget then also allows 2^-8 of it (each term is rounded to bf16 once, <= 2^-9 relative).
void expect(const char* what, const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol,
            const std::vector<double>* mag = nullptr) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double budget = atol + rtol * std::fabs(want[i]) + (mag ? (*mag)[i] / 256.0 : 0.0);
    double r = std::isnan(got[i]) ? INFINITY : std::fabs(got[i] - want[i]) / budget;
    worst = std::max(worst, r);
  }
  bool ok = worst <= 1.0 && got.size() == want.size();
  failures += !ok;
  std::printf("%-44s %s (worst %.3g of budget)\n", what, ok ? "ok  " : "FAIL", worst);
}

// runtime/gemm's CUDA entry, emulated: bf16 A/B, f32 C, f32 accumulation.
namespace sqlrl {
void gemm_cuda(const GemmProblem& p, int, const CudaStream&) {
  auto a = static_cast<const uint16_t*>(p.a);
  auto b = static_cast<const uint16_t*>(p.b);
  auto c = static_cast<float*>(p.c);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      float s = 0;
      for (int64_t k = 0; k < p.k; ++k)
        s += bf16_bits_to_f32(p.trans_a ? a[k * p.lda + i] : a[i * p.lda + k]) *
             bf16_bits_to_f32(p.trans_b ? b[j * p.ldb + k] : b[k * p.ldb + j]);
      float& out = c[i * p.ldc + j];
      out = p.alpha * s + (p.beta != 0 ? p.beta * out : 0.0f);
    }
}
}  // namespace sqlrl

void rmsnorm(int64_t rows, int64_t dim) {
  auto x = uniform(rows * dim, -2, 2), w = uniform(dim, 0.5f, 1.5f), dout = uniform(rows * dim, -1, 1),
       dx0 = uniform(rows * dim, -0.5f, 0.5f), dw0 = uniform(dim, -1, 1);
  std::vector<float> out(rows * dim), rstd(rows), dx = dx0, dw = dw0;
  rmsnorm_forward_cpu(out.data(), rstd.data(), x.data(), w.data(), rows, dim, 1e-6f);
  rmsnorm_backward_cpu(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), rows, dim);
  auto xb = bits(x), wb = bits(w), db = bits(dout), dxb = bits(dx0);
  std::vector<uint16_t> ob(rows * dim, 0x7fc0);
  std::vector<float> rs(rows, NAN), dwg = dw0;
  rmsnorm_forward_cuda(ob.data(), rs.data(), xb.data(), wb.data(), rows, dim, 1e-6f, kStream);
  std::vector<char> ws(rmsnorm_backward_workspace_bytes(rows, dim) + 16);
  void* wsp = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 15) / 16 * 16);
  rmsnorm_backward_cuda(dxb.data(), dwg.data(), db.data(), xb.data(), wb.data(), rstd.data(), rows, dim, wsp,
                        ws.size() - 16, kStream);
  char name[64];
  std::snprintf(name, sizeof name, "rmsnorm %lldx%lld out", (long long)rows, (long long)dim);
  expect(name, floats(ob), out, 1e-5, 1.0 / 256);
  expect("  rstd", rs, rstd, 0, 2e-5);
  expect("  dx", floats(dxb), dx, 1e-5, 1.0 / 256);
  expect("  dweight", dwg, dw, 1e-4, 1e-4);
}

void rope(int64_t tokens, int64_t heads, int64_t dim, int64_t extra) {
  int64_t stride = heads * dim + extra;
  auto buf = uniform(tokens * stride, -2, 2);
  std::vector<int32_t> pos(tokens);
  for (auto& p : pos) p = static_cast<int32_t>(gen() % 40000);
  for (int dir = 0; dir < 2; ++dir) {
    std::vector<float> packed(tokens * heads * dim), want = buf;
    for (int64_t t = 0; t < tokens; ++t) std::copy_n(buf.begin() + t * stride, heads * dim, packed.begin() + t * heads * dim);
    if (dir == 0) rope_forward_cpu(packed.data(), pos.data(), tokens, heads, dim, 1e6f);
    else rope_backward_cpu(packed.data(), pos.data(), tokens, heads, dim, 1e6f);
    for (int64_t t = 0; t < tokens; ++t) std::copy_n(packed.begin() + t * heads * dim, heads * dim, want.begin() + t * stride);
    auto xb = bits(buf);
    if (dir == 0) rope_forward_cuda(xb.data(), pos.data(), tokens, heads, dim, stride, 1e6f, kStream);
    else rope_backward_cuda(xb.data(), pos.data(), tokens, heads, dim, stride, 1e6f, kStream);
    char name[64];
    std::snprintf(name, sizeof name, "rope %s %lldx%lldx%lld+%lld", dir ? "bwd" : "fwd", (long long)tokens,
                  (long long)heads, (long long)dim, (long long)extra);
    expect(name, floats(xb), want, 1e-5, 1.0 / 256);
  }
}

void swiglu(int64_t n, int64_t off) {
  auto g = uniform(n + off, -8, 8), u = uniform(n + off, -2, 2), d = uniform(n + off, -1, 1);
  std::vector<float> o(n), dg(n), du(n);
  swiglu_forward_cpu(o.data(), g.data() + off, u.data() + off, n);
  swiglu_backward_cpu(dg.data(), du.data(), d.data() + off, g.data() + off, u.data() + off, n);
  auto gb = bits(g), ub = bits(u), db = bits(d);
  std::vector<uint16_t> ob(n + off, 0x7fc0), dgb(n + off, 0x7fc0), dub(n + off, 0x7fc0);
  swiglu_forward_cuda(ob.data() + off, gb.data() + off, ub.data() + off, n, kStream);
  swiglu_backward_cuda(dgb.data() + off, dub.data() + off, db.data() + off, gb.data() + off, ub.data() + off, n, kStream);
  auto tail = [&](const std::vector<uint16_t>& v) { auto f = floats(v); return std::vector<float>(f.begin() + off, f.end()); };
  char name[64];
  std::snprintf(name, sizeof name, "swiglu n %lld offset %lld", (long long)n, (long long)off);
  expect(name, tail(ob), o, 1e-6, 1.0 / 256);
  expect("  dgate", tail(dgb), dg, 1e-6, 1.0 / 256);
  expect("  dup", tail(dub), du, 1e-6, 1.0 / 256);
}

void embedding(int64_t T, int64_t V, int64_t C) {
  auto table = uniform(V * C, -1, 1), dout = uniform(T * C, -1, 1), dt0 = uniform(V * C, -1, 1);
  std::vector<int32_t> tok(T);
  for (auto& t : tok) t = static_cast<int32_t>(gen() % V);
  std::vector<float> out(T * C), dt = dt0;
  embedding_forward_cpu(out.data(), table.data(), tok.data(), T, V, C);
  embedding_backward_cpu(dt.data(), dout.data(), tok.data(), T, V, C);
  auto tb = bits(table), db = bits(dout);
  std::vector<uint16_t> ob(T * C, 0x7fc0);
  std::vector<float> dtg = dt0;
  embedding_forward_cuda(ob.data(), tb.data(), tok.data(), T, V, C, kStream);
  std::vector<char> ws(embedding_backward_workspace_bytes(T, V) + 16);
  void* wsp = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 15) / 16 * 16);
  embedding_backward_cuda(dtg.data(), db.data(), tok.data(), T, V, C, wsp, ws.size() - 16, kStream);
  char name[64];
  std::snprintf(name, sizeof name, "embedding %lld tokens V %lld C %lld", (long long)T, (long long)V, (long long)C);
  expect(name, floats(ob), out, 0, 0 + 1e-30);
  expect("  backward", dtg, dt, 1e-5, 1e-5);
}

void logprob(int64_t T, int64_t C, int64_t V, int64_t ct, int64_t cv, float scale = 1.0f) {
  auto h = uniform(T * C, -1, 1), w = uniform(V * C, -0.5f, 0.5f);
  std::vector<int32_t> tg(T);
  for (auto& t : tg) t = static_cast<int32_t>(gen() % V);
  tg[0] = static_cast<int32_t>(V - 1);
  // g = dlogprob, e = dentropy: every third row carries neither; of the others, some carry only
  // the entropy term (t % 6 == 3) and some only the log-prob's (t % 6 == 5).
  std::vector<float> g(T), e(T);
  for (int64_t t = 0; t < T; ++t) {
    g[t] = t % 3 == 1 || t % 6 == 3 ? 0.0f : uniform(1, -1, 1)[0];
    e[t] = t % 3 == 1 || t % 6 == 5 ? 0.0f : uniform(1, -0.5f, 0.5f)[0];
  }
  std::vector<float> lp(T), lse(T), Hc(T), scratch(std::min<int64_t>(T, 8) * V), dh(T * C, 0), dw(V * C, 0);
  LogprobShape cs{T, C, V, 8, scale};
  logprob_forward_cpu(lp.data(), lse.data(), h.data(), w.data(), tg.data(), cs, scratch.data(), Hc.data());
  logprob_backward_cpu(dh.data(), dw.data(), g.data(), h.data(), w.data(), tg.data(), lse.data(), cs, scratch.data(),
                       e.data(), Hc.data());
  // Float64: the entropy, and the magnitudes the backward's bf16 dlogits are summed over
  // (|dlogit_tv w_vc| over v for dhidden, |dlogit_tv h_tc| over t for dweight).
  std::vector<float> H(T);
  std::vector<double> mag_dh(T * C, 0.0), mag_dw(V * C, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    double m = -INFINITY, s = 0, ent = 0;
    std::vector<double> z(V);
    for (int64_t v = 0; v < V; ++v) {
      double acc = 0;
      for (int64_t c = 0; c < C; ++c) acc += double(h[t * C + c]) * w[v * C + c];
      z[v] = acc * scale, m = std::max(m, z[v]);
    }
    for (double x : z) s += std::exp(x - m);
    const double lse = m + std::log(s);
    for (double x : z) ent -= std::exp(x - lse) * (x - lse);
    H[t] = static_cast<float>(ent);
    for (int64_t v = 0; v < V; ++v) {
      const double log_p = z[v] - lse, p = std::exp(log_p);
      const double d = scale * std::fabs(g[t] * ((v == tg[t]) - p) - e[t] * p * (log_p + ent));
      for (int64_t c = 0; c < C; ++c) {
        mag_dh[t * C + c] += d * std::fabs(w[v * C + c]);
        mag_dw[v * C + c] += d * std::fabs(h[t * C + c]);
      }
    }
  }
  auto hb = bits(h), wb = bits(w);
  LogprobCudaShape shape{T, C, V, ct, cv, scale};
  std::vector<char> ws(logprob_cuda_workspace_bytes(shape) + 256);
  void* wsp = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 255) / 256 * 256);
  std::vector<float> lpg(T, NAN), lseg(T, NAN), Hg(T, NAN), dwg(V * C, 0);
  std::vector<uint16_t> dhg(T * C, 0);
  logprob_forward_cuda(lpg.data(), lseg.data(), Hg.data(), hb.data(), wb.data(), tg.data(), shape, wsp, ws.size() - 256,
                       kStream);
  logprob_backward_cuda(dhg.data(), dwg.data(), g.data(), e.data(), hb.data(), wb.data(), tg.data(), lseg.data(),
                        Hg.data(), shape, wsp, ws.size() - 256, kStream);
  char name[80];
  std::snprintf(name, sizeof name, "logprob T %lld C %lld V %lld tiles %lldx%lld scale %g", (long long)T, (long long)C,
                (long long)V, (long long)ct, (long long)cv, scale);
  expect(name, lpg, lp, 1e-4, 1e-5);
  expect("  lse", lseg, lse, 1e-4, 1e-5);
  expect("  entropy", Hg, H, 1e-4, 1e-5);
  expect("  dhidden", floats(dhg), dh, 2e-3, 1.0 / 128, &mag_dh);
  expect("  dweight", dwg, dw, 2e-3, 1.0 / 128, &mag_dw);
}

#ifdef SQLRL_SAMPLING_COUNT_FALLBACKS
namespace sqlrl {
extern unsigned sampling_fallback_steps;  // kernels/cuda/sampling.cu: radix steps instead of gathered bins
}
#endif

// kind 0: uniform logits in [-8, 8], every 4th row on a 9-value grid (ties); 1: model-like rows
// (uniform in [-12, 0], 16 leaders at 8..23); 2: rows the bins cannot split (all equal, or two
// values), which take the radix fallback. pad > 0: ld = V + pad, the padding 1e30 (never read).
// The device's fast path must serve kinds 0 and 1 alone (0 radix steps), and kind 2 must use the
// fallback; the tokens must equal the CPU's either way.
void sampling(int64_t rows, int64_t V, int kind = 0, int64_t pad = 0) {
  std::vector<SamplingParams> settings = {{0.0f, 0, 1.0f, 1}, {1.0f, 0, 1.0f, 2}, {0.6f, 0, 0.95f, 3},
                                          {0.7f, 20, 1.0f, 4}, {1.3f, 50, 0.9f, 5}, {0.9f, 7, 1.0f, 6}};
  const int64_t ld = V + pad;
  std::vector<float> logits = uniform(rows * ld, -8, 8);
  std::vector<SamplingRequest> req(rows);
  for (int64_t r = 0; r < rows; ++r) {
    req[r].params = settings[r % settings.size()];
    req[r].params.seed += gen();
    req[r].sequence_id = r;
    req[r].position = gen() % 1000;
    float* row = logits.data() + r * ld;
    if (kind == 0 && r % 4 == 3)
      for (int64_t v = 0; v < V; ++v) row[v] = float(gen() % 9) * 0.5f;  // ties
    if (kind == 1) {
      for (int64_t v = 0; v < V; ++v) row[v] = -12.0f * float(gen() >> 40) * 0x1p-24f;
      for (int k = 0; k < 16; ++k) row[gen() % V] = 8.0f + k;
    }
    if (kind == 2)
      for (int64_t v = 0; v < V; ++v) row[v] = r % 2 == 0 ? 0.5f : (gen() % 4 == 0 ? 1.0f : -1.0f);
    for (int64_t v = V; v < ld; ++v) row[v] = 1e30f;
  }
  std::vector<SampledToken> got(rows, SampledToken{-1, NAN, NAN});
  std::vector<uint8_t> ws(sample_tokens_cuda_workspace_bytes(rows, V), 0xff);  // needs no initialisation
#ifdef SQLRL_SAMPLING_COUNT_FALLBACKS
  sampling_fallback_steps = 0;
#endif
  sample_tokens_cuda(got.data(), logits.data(), rows, V, ld, req.data(), ws.data(), ws.size(), kStream);
  unsigned fallback_steps = 0;
#ifdef SQLRL_SAMPLING_COUNT_FALLBACKS
  fallback_steps = sampling_fallback_steps;
  const bool path_ok = kind == 2 ? fallback_steps > 0 : fallback_steps == 0;
#else
  const bool path_ok = true;
#endif
  SamplingScratch sc;
  int bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    SampledToken want = sample_token_cpu(logits.data() + r * ld, V, req[r].params, req[r].sequence_id, req[r].position, sc);
    if (got[r].token != want.token || std::fabs(got[r].logprob - want.logprob) > 1e-5 ||
        std::fabs(got[r].logprob_t1 - want.logprob_t1) > 1e-5) {
      ++bad;
      std::printf("  row %lld: gpu %d %g %g cpu %d %g %g\n", (long long)r, got[r].token, got[r].logprob,
                  got[r].logprob_t1, want.token, want.logprob, want.logprob_t1);
    }
  }
  failures += bad > 0 || !path_ok;
  std::printf("sampling %lld rows V %lld ld %lld kind %d          %s (%d rows differ, %u radix steps%s)\n",
              (long long)rows, (long long)V, (long long)ld, kind, bad || !path_ok ? "FAIL" : "ok  ", bad, fallback_steps,
              path_ok ? "" : ": wrong path");
}

// The few-row product against matmul_forward_cpu on the same bf16 values (the emulator reports 2
// SMs, so the planner splits K at these small shapes too); then row 0 alone must give the same
// bits (batch invariance) and the tickets must be back at zero.
void matmul_rows(int64_t M, int64_t K, std::vector<int64_t> parts, bool bias, MatmulRowsEpilogue e,
                 MatmulRowsVariant variant) {
  const bool swiglu = e == MatmulRowsEpilogue::swiglu, f32 = e == MatmulRowsEpilogue::store_f32;
  int64_t total = 0;
  for (int64_t r : parts) total += r;
  const int64_t cols = swiglu ? parts[0] : total;
  auto x = uniform(M * K, -1, 1), old = uniform(M * cols, -4, 4);
  std::vector<std::vector<float>> w, b;
  std::vector<std::vector<uint16_t>> wb, bb;
  for (int64_t r : parts) {
    w.push_back(uniform(r * K, -0.1f, 0.1f));
    b.push_back(bias ? uniform(r, -0.5f, 0.5f) : std::vector<float>{});
    wb.push_back(bits(w.back()));
    bb.push_back(bits(b.back()));
  }
  // The CPU reference: each part's product (f32 sgemm), then the epilogue in f32.
  std::vector<float> dots(M * total);
  int64_t col = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    std::vector<float> part(M * parts[p]);
    matmul_forward_cpu(part.data(), x.data(), w[p].data(), bias ? b[p].data() : nullptr, M, K, parts[p]);
    for (int64_t m = 0; m < M; ++m) std::copy_n(part.begin() + m * parts[p], parts[p], dots.begin() + m * total + col);
    col += parts[p];
  }
  std::vector<float> want(M * cols);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < cols; ++j) {
      const float d = dots[m * total + j];
      if (swiglu) {
        const float u = dots[m * total + cols + j];
        want[m * cols + j] = d / (1.0f + std::exp(-d)) * u;
      } else {
        want[m * cols + j] = e == MatmulRowsEpilogue::accumulate ? old[m * cols + j] + d : d;
      }
    }
  auto run = [&](int64_t rows, std::vector<float>& out_f, std::vector<uint8_t>& tickets) {
    auto xb = bits(x);
    std::vector<uint16_t> ob = e == MatmulRowsEpilogue::accumulate ? bits(old) : std::vector<uint16_t>(M * cols, 0x7fc0);
    std::vector<float> of(M * cols, NAN);
    MatmulRowsProblem p;
    p.out = f32 ? static_cast<void*>(of.data()) : static_cast<void*>(ob.data());
    p.ld_out = cols;
    p.x = xb.data();
    p.ld_x = K;
    p.rows = rows;
    p.in_features = K;
    p.num_parts = static_cast<int>(parts.size());
    for (int i = 0; i < p.num_parts; ++i) p.parts[i] = {wb[i].data(), bias ? bb[i].data() : nullptr, parts[i]};
    p.epilogue = e;
    p.variant = variant;
    const size_t bytes = matmul_rows_workspace_bytes(total, K, swiglu, rows, 2);
    std::vector<uint8_t> ws(bytes + 256, 0);
    void* wsp = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 255) / 256 * 256);
    matmul_rows_cuda(p, wsp, bytes, kStream);
    out_f = f32 ? of : floats(ob);
    const MatmulRowsGrid g = matmul_rows_grid(total, K, swiglu, 2);
    tickets.assign(static_cast<uint8_t*>(wsp), static_cast<uint8_t*>(wsp) + matmul_rows_ticket_bytes(g));
  };
  std::vector<float> got, one;
  std::vector<uint8_t> tickets, tickets1;
  run(M, got, tickets);
  run(1, one, tickets1);
  const MatmulRowsGrid g = matmul_rows_grid(total, K, swiglu, 2);
  char name[96];
  std::snprintf(name, sizeof name, "matmul_rows %s M %lld K %lld N %lld %s (%lld x %lld)",
                variant == MatmulRowsVariant::staged ? "staged" : "direct", (long long)M, (long long)K, (long long)total,
                swiglu ? "swiglu" : f32 ? "f32" : e == MatmulRowsEpilogue::accumulate ? "acc" : "store",
                (long long)g.tiles, (long long)g.splits);
  expect(name, got, want, 1e-3, f32 ? 1e-5 : 1.0 / 256);
  bool same = std::equal(one.begin(), one.begin() + cols, got.begin(),
                         [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; });
  bool zero = std::all_of(tickets.begin(), tickets.end(), [](uint8_t v) { return v == 0; });
  failures += !same + !zero;
  std::printf("  row 0 alone: %s; tickets back at zero: %s\n", same ? "same bits" : "FAIL", zero ? "yes" : "FAIL");
}

// The fused decode prologue against decode_qkv_cpu (the unfused CPU kernels) on the same bf16
// values; a padding row (slot -1) must leave its cache rows as they were.
void decode_qkv(int64_t T, int64_t H, int64_t KVH, int64_t D, bool norm) {
  const int64_t qd = H * D, kvd = KVH * D, rows = T + 2;
  auto qkv = uniform(T * (qd + 2 * kvd), -2, 2), qn = uniform(D, 0.5f, 1.5f), kn = uniform(D, 0.5f, 1.5f);
  std::vector<int32_t> pos(T), slots(T);
  for (int64_t t = 0; t < T; ++t) {
    pos[t] = static_cast<int32_t>(gen() % 40000);
    slots[t] = t == 1 ? -1 : static_cast<int32_t>((t * 5) % rows);
  }
  std::vector<float> q(T * qd), k(rows * kvd, NAN), v(rows * kvd, NAN);
  // The CPU reference sees the normalised values rounded to bf16, as the CUDA path stores them
  // before RoPE: norm (CPU), round, then rotate through the same function with no norm.
  std::vector<float> staged = qkv;
  if (norm)
    for (int64_t t = 0; t < T; ++t) {
      float* row = staged.data() + t * (qd + 2 * kvd);
      rmsnorm_forward_cpu(row, nullptr, row, qn.data(), H, D, 1e-6f);
      rmsnorm_forward_cpu(row + qd, nullptr, row + qd, kn.data(), KVH, D, 1e-6f);
      for (int64_t i = 0; i < qd + kvd; ++i) row[i] = bf16_bits_to_f32(f32_to_bf16_bits(row[i]));
    }
  DecodeQkvShape shape{H, KVH, D, 1e-6f, 1e6f};
  decode_qkv_cpu(q.data(), k.data(), v.data(), staged.data(), nullptr, nullptr, pos.data(), slots.data(), T, shape);
  auto qkvb = bits(qkv), qnb = bits(qn), knb = bits(kn);
  std::vector<uint16_t> qb(T * qd, 0x7fc0), kb(rows * kvd, 0x7fc0), vb(rows * kvd, 0x7fc0);
  decode_qkv_cuda(qb.data(), kb.data(), vb.data(), qkvb.data(), norm ? qnb.data() : nullptr, norm ? knb.data() : nullptr,
                  pos.data(), slots.data(), T, shape, kStream);
  auto nan_where_nan = [](const std::vector<float>& got, const std::vector<float>& want) {
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += std::isnan(got[i]) != std::isnan(want[i]);
    return bad;
  };
  auto finite = [](std::vector<float> v) {
    for (float& x : v) x = std::isnan(x) ? 0.0f : x;
    return v;
  };
  char name[96];
  std::snprintf(name, sizeof name, "decode_qkv T %lld H %lld KVH %lld D %lld%s q", (long long)T, (long long)H,
                (long long)KVH, (long long)D, norm ? " norm" : "");
  expect(name, floats(qb), q, 1e-5, 1.0 / 256);
  auto kf = floats(kb), vf = floats(vb);
  expect("  k cache", finite(kf), finite(k), 1e-5, 1.0 / 256);
  expect("  v cache", finite(vf), finite(v), 0, 0);
  size_t bad = nan_where_nan(kf, k) + nan_where_nan(vf, v);
  failures += bad != 0;
  std::printf("  rows left alone (padding, never named): %s\n", bad ? "FAIL" : "ok");
}

int main(int argc, char** argv) {
  std::string what = argc > 1 ? argv[1] : "all";
  if (what == "all" || what == "norm") {
    for (auto [r, d] : {std::pair{1, 64}, {17, 128}, {5, 2560}, {3, 8192}, {17, 100}, {9, 3001}, {40, 17}})
      rmsnorm(r, d);
  }
  if (what == "all" || what == "rope") {
    rope(1, 2, 64, 0), rope(17, 3, 128, 0), rope(9, 4, 128, 256), rope(17, 1, 6, 0), rope(5, 2, 10, 3);
  }
  if (what == "all" || what == "swiglu") {
    for (int64_t n : {1, 17, 1000, 8197}) swiglu(n, 0), swiglu(n, 3);
  }
  if (what == "all" || what == "embedding") embedding(1, 50, 64), embedding(17, 50, 17), embedding(300, 20, 64);
  if (what == "all" || what == "logprob") logprob(37, 64, 203, 16, 64), logprob(1, 16, 50, 4, 128), logprob(9, 24, 77, 4, 30),
        logprob(37, 64, 203, 16, 64, 1.0f / 0.6f);
  if (what == "all" || what == "sampling") {
    sampling(24, 300), sampling(4, 5003);
    sampling(6, 5003, 0, 5), sampling(6, 5003, 2), sampling(6, 20000, 1);
  }
  // Qwen-width rows (16 blocks per row) and a wide fallback: ~an hour on a loaded 2-core machine.
  if (what == "sampling-wide") sampling(2, 151936, 1), sampling(1, 151936, 0), sampling(2, 40000, 2);
  if (what == "all" || what == "matmul") {
    using E = MatmulRowsEpilogue;
    for (MatmulRowsVariant v : {MatmulRowsVariant::staged, MatmulRowsVariant::direct}) {
      matmul_rows(1, 64, {48}, true, E::store, v);
      matmul_rows(3, 1024, {40}, false, E::store, v);  // one tile: K split 4 ways
      matmul_rows(9, 512, {64, 16, 16}, true, E::store, v);
      matmul_rows(17, 768, {80}, false, E::accumulate, v);
      matmul_rows(33, 512, {40, 40}, false, E::swiglu, v);
      matmul_rows(5, 256, {200}, false, E::store_f32, v);
      matmul_rows(70, 256, {24, 24}, false, E::swiglu, v);
    }
  }
  if (what == "all" || what == "decode_qkv") {
    decode_qkv(3, 4, 2, 64, true), decode_qkv(4, 2, 2, 128, false), decode_qkv(2, 3, 1, 10, true);
  }
  std::printf("%s\n", failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
