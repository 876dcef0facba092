// Driver of tools/cuda_emu/run.sh: the emulated CUDA attention launchers against the CPU kernels
// on small shapes (host memory plays device memory), with the tolerances of
// the attention*_cuda cases of tests/kernels (per-sequence relative L2 <= 1e-2, paged 5e-3, absolute floor).
// Outputs start as NaN: an element left unwritten fails. Fixed seed: reruns are comparable.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

#include "kernels/attention.h"
#include "runtime/dtype.h"
#include "tools/cuda_emu/bf16_vectors.h"
using namespace sqlrl;
static std::mt19937_64 gen(12345);
static int failures = 0;
std::vector<float> normal(size_t n, float sd) {
  std::normal_distribution<float> d(0, sd);
  std::vector<float> x(n);
  for (auto& v : x) v = bf16_bits_to_f32(f32_to_bf16_bits(d(gen)));
  return x;
}
using emu::bits;
using emu::floats;
void compare(const char* what, const std::vector<float>& got, const std::vector<float>& ref, int64_t row,
             const std::vector<int32_t>& cu, double rel) {
  double tot = 0;
  for (float r : ref) tot += double(r) * r;
  double rms = std::sqrt(tot / std::max<size_t>(1, ref.size()));
  double worst = 0;
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    double e = 0, n = 0;
    size_t b = cu[s] * row, en = cu[s + 1] * row;
    for (size_t i = b; i < en; ++i) {
      if (!std::isfinite(got[i])) {
        printf("  %s: non-finite at %zu (seq %zu)\n", what, i, s);
        failures++;
        return;
      }
      double d = got[i] - ref[i];
      e += d * d;
      n += double(ref[i]) * ref[i];
    }
    double budget = rel * std::sqrt(n) + std::max(0x1p-8 * rms, 1e-4) * std::sqrt(double(en - b));
    if (std::sqrt(e) > budget) {
      printf("  %s: seq %zu len %d rel err %.3e FAIL\n", what, s, cu[s + 1] - cu[s], std::sqrt(e / std::max(n, 1e-30)));
      failures++;
    }
    worst = std::max(worst, std::sqrt(e / std::max(n, 1e-30)));
  }
  printf("  %s: worst per-seq rel L2 %.2e\n", what, worst);
}
// pre_seq / pre_len: shared prefixes (kernels/attention.h), empty = none.
void flash(std::vector<int32_t> lens, int64_t H, int64_t KVH, int64_t D, bool bwd, std::vector<int32_t> pre_seq = {},
           std::vector<int32_t> pre_len = {}) {
  printf("flash lens");
  for (int l : lens) printf(" %d", l);
  printf(" H %ld KVH %ld D %ld", H, KVH, D);
  for (size_t s = 0; s < pre_seq.size(); ++s)
    if (pre_seq[s] >= 0) printf(" [seq %zu: %d of seq %d]", s, pre_len[s], pre_seq[s]);
  printf("\n");
  SharedPrefixes pre;
  SharedPrefixesCuda pre_cuda;
  std::vector<int32_t> sharer_offsets, sharers;
  std::vector<int32_t> cu(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i) cu[i + 1] = cu[i] + lens[i];
  int64_t T = cu.back(), S = lens.size(), maxl = *std::max_element(lens.begin(), lens.end());
  AttentionShape sh{H, KVH, D};
  auto q = normal(T * H * D, 1), k = normal(T * KVH * D, 1.5), v = normal(T * KVH * D, 1);
  auto qb = bits(q), kb = bits(k), vb = bits(v);
  if (!pre_seq.empty()) {
    pre = {pre_seq.data(), pre_len.data()};
    shared_prefix_sharers(pre, cu.data(), S, sharer_offsets, sharers);
    pre_cuda = {pre_seq.data(), pre_len.data(), sharer_offsets.data(), sharers.data()};
  }
  std::vector<uint16_t> out(T * H * D, 0x7fc1);
  std::vector<float> lse(T * H, NAN);
  attention_forward_cuda(out.data(), lse.data(), qb.data(), kb.data(), vb.data(), cu.data(), S, maxl, sh, {}, pre_cuda);
  std::vector<float> ro(q.size()), rl(T * H);
  attention_forward_cpu(ro.data(), rl.data(), q.data(), k.data(), v.data(), cu.data(), S, sh, pre);
  auto of = floats(out);
  compare("out", of, ro, H * D, cu, 1e-2);
  double lw = 0;
  for (size_t i = 0; i < lse.size(); ++i) lw = std::max(lw, std::isnan(lse[i]) ? 1e9 : std::fabs(lse[i] - rl[i]));
  printf("  lse max abs diff %.2e%s\n", lw, lw > 1e-3 ? " FAIL" : "");
  if (lw > 1e-3) failures++;
  if (!bwd) return;
  auto dout = normal(T * H * D, 1);
  auto db = bits(dout);
  std::vector<uint16_t> dq(T * H * D, 0x7fc1), dk(T * KVH * D, 0x7fc1), dv(T * KVH * D, 0x7fc1);
  std::vector<float> ws(attention_backward_workspace_bytes(T, sh) / 4 + 1, NAN);
  attention_backward_cuda(dq.data(), dk.data(), dv.data(), db.data(), out.data(), lse.data(), qb.data(), kb.data(),
                          vb.data(), cu.data(), S, T, maxl, sh, ws.data(), ws.size() * 4, {}, pre_cuda);
  std::vector<float> rq(q.size()), rk(k.size()), rv(v.size());
  attention_backward_cpu(rq.data(), rk.data(), rv.data(), dout.data(), of.data(), lse.data(), q.data(), k.data(),
                         v.data(), cu.data(), S, sh, pre);
  compare("dq", floats(dq), rq, H * D, cu, 1e-2);
  compare("dk", floats(dk), rk, KVH * D, cu, 1e-2);
  compare("dv", floats(dv), rv, KVH * D, cu, 1e-2);
}
// ctx[i] <= 0 makes query i a padding row (position -1): its table row points far past the cache
// (a read would fault) and its q is NaN; its output must be exact zeros.
void paged(std::vector<int32_t> ctx, int64_t H, int64_t KVH, int64_t D, int64_t split) {
  printf("paged ctx");
  for (int c : ctx) printf(" %d", c);
  printf(" H %ld KVH %ld D %ld split %ld\n", H, KVH, D, split);
  int64_t N = ctx.size(), bs = 16, maxc = std::max(1, *std::max_element(ctx.begin(), ctx.end())),
          mb = (maxc + bs - 1) / bs + 1, used = 0;
  for (int c : ctx) used += c > 0 ? (c + bs - 1) / bs : 0;
  int64_t nb = used + 3;
  std::vector<int32_t> pool(nb);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), gen);
  std::vector<int32_t> table(N * mb, -1), pos(N);
  size_t nx = 0;
  for (int64_t i = 0; i < N; ++i) {
    pos[i] = ctx[i] > 0 ? ctx[i] - 1 : -1;
    if (ctx[i] <= 0) std::fill(table.begin() + i * mb, table.begin() + (i + 1) * mb, 1 << 30);
    for (int64_t b = 0; b < (std::max(ctx[i], 0) + bs - 1) / bs; ++b) table[i * mb + b] = pool[nx++];
  }
  auto q = normal(N * H * D, 1), kc = normal(nb * bs * KVH * D, 1.5), vc = normal(nb * bs * KVH * D, 1);
  for (int64_t i = 0; i < N; ++i)
    if (ctx[i] <= 0) std::fill(q.begin() + i * H * D, q.begin() + (i + 1) * H * D, NAN);
  AttentionShape sh{H, KVH, D};
  PagedQueries pq{N, table.data(), mb, pos.data(), bs};
  std::vector<float> ref(q.size());
  paged_attention_cpu(ref.data(), q.data(), kc.data(), vc.data(), pq, sh);
  auto qb = bits(q), kb = bits(kc), vb = bits(vc);
  std::vector<uint16_t> out(q.size(), 0x7fc1);
  std::vector<float> ws(paged_attention_workspace_bytes(N, sh, maxc, split) / 4 + 1, NAN);
  paged_attention_cuda(out.data(), qb.data(), kb.data(), vb.data(), pq, sh, maxc, ws.data(), ws.size() * 4, split);
  int64_t padding = 0, nonzero = 0;
  for (int64_t i = 0; i < N; ++i)
    if (ctx[i] <= 0) {
      ++padding;
      for (int64_t e = 0; e < H * D; ++e) nonzero += out[i * H * D + e] != 0;
    }
  if (padding) {
    printf("  padding rows %ld: %ld elements not exact zeros%s\n", padding, nonzero, nonzero ? " FAIL" : "");
    failures += nonzero != 0;
  }
  std::vector<int32_t> cu(N + 1);
  std::iota(cu.begin(), cu.end(), 0);
  compare("paged", floats(out), ref, H * D, cu, 5e-3);
}

// Batch invariance: each query of a batch (with a padding row, and a max_context beyond all of its
// contexts) alone in a launch sized for its own context must give the same output bits.
void paged_invariance() {
  const std::vector<int32_t> ctx = {300, 0, 1100, 1, 65, 1025};
  const int64_t N = ctx.size(), H = 8, KVH = 2, D = 128, bs = 16, big = 1500, mb = (big + bs - 1) / bs;
  printf("paged batch invariance ctx 300 pad 1100 1 65 1025, max_context %ld, H %ld KVH %ld D %ld\n", big, H, KVH, D);
  int64_t nb = N * mb;
  std::vector<int32_t> table(N * mb), pos(N);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), gen);
  for (int64_t i = 0; i < N; ++i) pos[i] = ctx[i] - 1;
  auto qb = bits(normal(N * H * D, 1)), kb = bits(normal(nb * bs * KVH * D, 1.5)), vb = bits(normal(nb * bs * KVH * D, 1));
  AttentionShape sh{H, KVH, D};
  PagedQueries pq{N, table.data(), mb, pos.data(), bs};
  std::vector<uint16_t> out(N * H * D, 0x7fc1);
  std::vector<float> ws(paged_attention_workspace_bytes(N, sh, big) / 4 + 1, NAN);
  paged_attention_cuda(out.data(), qb.data(), kb.data(), vb.data(), pq, sh, big, ws.data(), ws.size() * 4);
  int64_t differ = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (ctx[i] <= 0) continue;
    PagedQueries one{1, table.data() + i * mb, mb, pos.data() + i, bs};
    std::vector<uint16_t> alone(H * D, 0x7fc1);
    std::vector<float> ws1(paged_attention_workspace_bytes(1, sh, ctx[i]) / 4 + 1, NAN);
    paged_attention_cuda(alone.data(), qb.data() + i * H * D, kb.data(), vb.data(), one, sh, ctx[i], ws1.data(),
                         ws1.size() * 4);
    for (int64_t e = 0; e < H * D; ++e) differ += alone[e] != out[i * H * D + e];
  }
  printf("  %ld output elements differ between the batch and the queries alone%s\n", differ, differ ? " FAIL" : "");
  failures += differ != 0;
}

// 300 tokens, max_seqlen 100: rows 0..127 are covered by the grid and must be right, the rest NaN.
void past_max_seqlen() {
  printf("flash past max_seqlen\n");
  const int64_t T = 300, H = 2, KVH = 1, D = 64, covered = 128;
  AttentionShape sh{H, KVH, D};
  std::vector<int32_t> cu = {0, int32_t(T)}, cuc = {0, int32_t(covered)};
  auto q = normal(T * H * D, 1), k = normal(T * KVH * D, 1.5), v = normal(T * KVH * D, 1), dout = normal(T * H * D, 1);
  auto qb = bits(q), kb = bits(k), vb = bits(v), db = bits(dout);
  std::vector<uint16_t> out(T * H * D, 0);
  std::vector<float> lse(T * H, 0);
  attention_forward_cuda(out.data(), lse.data(), qb.data(), kb.data(), vb.data(), cu.data(), 1, 100, sh);
  auto of = floats(out);
  int bad = 0;
  for (int64_t i = covered * H * D; i < T * H * D; ++i) bad += !std::isnan(of[i]);
  for (int64_t i = covered * H; i < T * H; ++i) bad += !std::isnan(lse[i]);
  std::vector<float> ro(covered * H * D), rl(covered * H);
  attention_forward_cpu(ro.data(), rl.data(), q.data(), k.data(), v.data(), cuc.data(), 1, sh);
  compare("covered out", std::vector<float>(of.begin(), of.begin() + covered * H * D), ro, H * D, cuc, 1e-2);
  attention_forward_cuda(out.data(), lse.data(), qb.data(), kb.data(), vb.data(), cu.data(), 1, T, sh);
  of = floats(out);
  std::vector<uint16_t> dq(T * H * D, 0), dk(T * KVH * D, 0), dv(T * KVH * D, 0);
  std::vector<float> ws(attention_backward_workspace_bytes(T, sh) / 4 + 1);
  attention_backward_cuda(dq.data(), dk.data(), dv.data(), db.data(), out.data(), lse.data(), qb.data(), kb.data(),
                          vb.data(), cu.data(), 1, T, 100, sh, ws.data(), ws.size() * 4);
  auto dqf = floats(dq), dkf = floats(dk), dvf = floats(dv);
  for (int64_t i = covered * H * D; i < T * H * D; ++i) bad += !std::isnan(dqf[i]);
  for (int64_t i = covered * KVH * D; i < T * KVH * D; ++i) bad += !std::isnan(dkf[i]) + !std::isnan(dvf[i]);
  std::vector<float> rq(q.size()), rk(k.size()), rv(v.size());
  attention_backward_cpu(rq.data(), rk.data(), rv.data(), dout.data(), of.data(), lse.data(), q.data(), k.data(),
                         v.data(), cu.data(), 1, sh);
  auto head = [](const std::vector<float>& x, int64_t n) { return std::vector<float>(x.begin(), x.begin() + n); };
  compare("covered dq", head(dqf, covered * H * D), head(rq, covered * H * D), H * D, cuc, 1e-2);
  compare("covered dk", head(dkf, covered * KVH * D), head(rk, covered * KVH * D), KVH * D, cuc, 1e-2);
  compare("covered dv", head(dvf, covered * KVH * D), head(rv, covered * KVH * D), KVH * D, cuc, 1e-2);
  printf("  uncovered rows not NaN: %d%s\n", bad, bad ? " FAIL" : "");
  failures += bad != 0;
}

// Query 0 needs 7 splits of 16 but max_context 40 sizes the grid for 3: its output must be NaN.
void paged_past_max_context() {
  printf("paged past max_context\n");
  const int64_t N = 2, H = 4, KVH = 2, D = 64, bs = 16, mb = 8, split = 16, max_context = 40;
  std::vector<int32_t> table(N * mb), pos = {99, 20};
  std::iota(table.begin(), table.end(), 0);
  auto qb = bits(normal(N * H * D, 1)), kb = bits(normal(N * mb * bs * KVH * D, 1)), vb = bits(normal(N * mb * bs * KVH * D, 1));
  AttentionShape sh{H, KVH, D};
  PagedQueries pq{N, table.data(), mb, pos.data(), bs};
  std::vector<uint16_t> out(N * H * D, 0);
  std::vector<float> ws(paged_attention_workspace_bytes(N, sh, max_context, split) / 4 + 1, NAN);
  paged_attention_cuda(out.data(), qb.data(), kb.data(), vb.data(), pq, sh, max_context, ws.data(), ws.size() * 4, split);
  auto of = floats(out);
  int bad = 0;
  for (int64_t i = 0; i < N * H * D; ++i) bad += (i < H * D) != std::isnan(of[i]);
  printf("  %s\n", bad ? "FAIL" : "query 0 NaN, query 1 finite");
  failures += bad != 0;
}

int main(int argc, char** argv) {
  std::string what = argc > 1 ? argv[1] : "all";
  if (what == "fwd" || what == "all") {
    flash({1}, 2, 2, 64, false);
    flash({17}, 4, 2, 128, false);
    flash({200}, 4, 1, 64, false);
    flash({0, 1, 17, 0, 130, 1, 64, 0}, 4, 2, 64, false);
    flash({300}, 2, 2, 128, false);
  }
  if (what == "bwd" || what == "all") {
    flash({1}, 2, 2, 64, true);
    flash({17}, 2, 1, 64, true);
    flash({150}, 4, 2, 64, true);
    flash({0, 1, 17, 0, 70, 1}, 4, 1, 128, true);
  }
  if (what == "prefix" || what == "all") {
    // A group's prompt stored once: whole-prompt sharers, a partial one, a tile-aligned one, an
    // empty sharer, a sharer of one token; and prefixes reaching past several key tiles.
    flash({70, 20, 0, 90, 5, 1}, 4, 2, 64, true, {-1, 0, 0, 0, 0, 0}, {0, 70, 70, 64, 1, 33});
    flash({130, 40, 33, 7}, 2, 1, 128, true, {-1, 0, 0, -1}, {0, 100, 130, 0});
  }
  if (what == "limits" || what == "all") past_max_seqlen();
  if (what == "paged" || what == "all") {
    paged({1, 16, 17, 65, 200}, 4, 2, 64, 64);
    paged({1, 33, 300}, 4, 1, 128, 1 << 20);
    paged({1, 33, 300}, 12, 2, 64, 64);
    paged({40, 300}, 16, 1, 128, 128);
    // Padding rows among real ones; long contexts cut into many splits (1500 keys: 8 of 192
    // by the default rule, 94 of 16 with split_tokens 16); groups 16 and 32 (two blocks of 16
    // heads per kv head); split_tokens not a multiple of the tile.
    paged({0, 1500, 1, 0, 64, 1025}, 8, 2, 128, 512);
    paged({1500, 0, 129}, 4, 1, 64, 16);
    paged({700, 0, 17}, 16, 1, 128, 100);
    paged({0, 300}, 32, 1, 64, 512);
    paged_invariance();
    paged_past_max_context();
  }
  printf("%s (%d failures)\n", failures ? "FAILED" : "OK", failures);
  return failures != 0;
}
