// Next-token sampling on CUDA without sorting the 151,936-wide row, spread over many blocks per row.
//
// Two kernels per call (a row's blocks combine deterministically; no float atomics anywhere):
//  1. chunk_stats_kernel, grid (ceil(vocab / 4096), rows) x 256 threads: per 4096-wide chunk, the
//     largest key (below), the smallest finite logit and the T = 1 partial sum of the chunk,
//     sum exp(l - chunk max) (float terms, double sum). It also zeroes the row's ticket. The
//     chunk width is fixed (not a function of the batch), so the T = 1 sum, combined later in chunk
//     order, has the same bits whatever the batch: batch invariance of logprob_t1.
//  2. sample_kernel, grid (chunks2, rows) x 512 threads, chunks2 = 1..16 chosen from the batch so
//     that ~384 blocks fill the GPU (1 row: 16 blocks of 9.5k logits; 64 rows: 6 blocks each). Every
//     block reduces its row's chunk stats to the row's maximum M and minimum, and builds a 1024-bin
//     histogram of its logits (count, and the exact fixed-point tempered weight) over the bins
//     bin(l) = floor((M - l) * 1024 / span), span = min(32 T, M - min): monotone in the logit, so
//     bins are intervals of the candidate order. Logits 32 tempered nats or more below M go in no
//     bin (their weight is exactly 0, below). The block writes its histogram to the workspace and
//     takes a ticket; the row's last block (the only one when chunks2 = 1) sums the histograms (u64:
//     exact, order-free), and resolves, in the CPU path's order, the top-k cut (by count), the top-p
//     cut and the draw (by weight): each is "the element at which the cumulative count or weight, in
//     candidate order, reaches n", which lies in the bin where the bins' prefix sum reaches n. Before
//     the exact cuts are known, bounds from the bins' sums alone name every bin a cut can land in
//     (usually 1-3 bins, ~150 elements each on uniform logits; a handful on a model's peaked
//     logits); one pass over the row gathers those bins' elements (key, weight) into shared memory,
//     where each element's weight above it in its bin is summed directly, and the three cuts are
//     read off. Greedy rows only need M and the T = 1 sum: block 0 of the row writes them.
//     Fallback (rows with massive ties or very narrow logits, when the bins exceed the 2048-slot
//     buffer; also any step whose element is not among the gathered ones): the old exact radix
//     select over the key's bytes within the bin, by the same block (correct, slow: ~9 passes).
//
// Keys and order. Every column v gets a 64-bit key, ordered(logit) << 32 | (2^32 - 1 - v): larger
// key = earlier in the CPU path's candidate order (logit descending, ties by lower id), all keys
// distinct. The maximum key is the CPU's first maximum (greedy's token and M).
//
// Numerics (what makes the token the CPU's). The weight of a logit is the CPU path's float
// probability q = float(exp(double(l) * (1 / T) - double(M) / T)), evaluated in double with the two
// roundings the CPU does (__dmul_rn, __dadd_rn: no FMA contraction) and CUDA's exp (<= 1 ulp), so
// q is the CPU's float except where exp(y) lies within 2^-52 of a float rounding midpoint (about
// one element in 2^28); then round(q * 2^40) exactly in integers. Sums of these are exact, so every
// cut compares exact sums: need = ceil(top_p * S) for the nucleus, floor(u * S) + 1 for the draw (u
// the CPU's Philox uniform), where the CPU compares double sums of the same floats. The two differ
// only by the 2^-40 rounding of each weight (<= vocab * 2^-41 ~ 7e-8 of the kept mass, as the
// previous one-block kernel, whose integer sums these equal bit for bit) and the CPU's double
// summation (~vocab * 2^-53): the token is the CPU's wherever the draw or the cut is not within
// ~1e-7 of the kept mass from a boundary. A weight in no bin (>= 32 tempered nats below M) rounds
// to 0 in fixed point anyway (q < 2^-41 below 28.4 nats), so leaving it out changes no sum.
// logprob = log(q * 2^40 / S_kept) (the fixed-point kept sum: <= 7e-8 relative off the CPU's double
// sum). logprob_t1 = l - M - log(S1), S1 = sum over chunks of s_c * exp(m_c - M) in double, chunk
// order; s_c adds float exp2f terms relative to the chunk max (float sums of 4, then double): each
// term within ~2 ulp plus the rounding of (l - m_c) * log2(e) (|l - m_c| * 2^-23 relative at most,
// weighted by the terms' mass: <= ~1.5e-6 whatever the row), so S1 is within ~2e-6 relative:
// logprob_t1 within ~2e-6 plus the float output's rounding (tests: 1e-5).
//
// Determinism: integer histograms and sums; the maximum and minimum are exact; S1 combines in a
// fixed order over fixed-width chunks; the gather fills slots in any order but every quantity read
// from them is a function of the set, not the order. A row's outputs depend on its logits and
// request only.
//
// Ideas: a parallel histogram/bucket select instead of a sort, and rejection-free exact sampling by
// cumulative sums over buckets, as in FlashInfer's sampling kernels (flashinfer-ai/flashinfer,
// include/flashinfer/sampling.cuh; "FlashInfer", arXiv 2501.01005) and radix select (Alabi et al.,
// "Fast k-selection algorithms for graphics processing units", ACM JEA 2012); the multi-block
// reduction with a last-block ticket as in CUDA's threadFenceReduction sample. Code written here.
//
// Resources (nvcc 13.0, -O3, -Xptxas -v, sm_90a): chunk_stats_kernel 32 registers (16-byte loads;
// 40 scalar), no spills, 160 B static shared memory. sample_kernel 64 registers
// (__launch_bounds__(512, 2): two blocks per SM), 400 B static + 68,640 B dynamic shared memory,
// ~200 B stack frame holding the RowCtx and Smem views passed by reference to the non-inlined radix
// fallback, 8 B spill stores / 20 B spill loads (16-byte variant; none scalar) outside the histogram
// loop (SASS: no local-memory access in it); radix_select and weight_from spill nothing.
#include <algorithm>
#include <atomic>
#include <cmath>

#include "kernels/cuda/ops_common.cuh"
#include "kernels/sampling.h"
#include "runtime/philox.h"

namespace sqlrl {

#ifdef SQLRL_SAMPLING_COUNT_FALLBACKS
// Emulator instrumentation (tools/cuda_emu_ops): radix steps taken instead of the gathered bins.
__device__ unsigned sampling_fallback_steps = 0;
#endif

namespace {

constexpr int kThreads1 = 256;
constexpr int kWarps1 = kThreads1 / 32;
constexpr int kChunk1 = 4096;
constexpr int kPerThread1 = kChunk1 / kThreads1;
constexpr int kThreads2 = 512;
constexpr int kWarps2 = kThreads2 / 32;
constexpr int kBins = 1024;
constexpr int kBinsPerThread = kBins / kThreads2;
constexpr int kCapacity = 2048;       // gathered elements (24 bytes each)
constexpr int kTargetBlocks2 = 384;   // ~3 blocks of 512 threads per SM on 132 SMs
constexpr int kMaxChunks2 = 16;       // bounds the last block's combine: 16 x 12 KB
constexpr int kMinChunk2 = 2048;
constexpr float kSpanNats = 32.0f;    // q = e^-32 * 2^40 < 0.014: rounds to a zero weight
constexpr float kLog2e = 1.4426950408889634f;
constexpr uint32_t kNone = 0xffffffffu;
constexpr int kNoBin = kBins;         // "no top-k bin": the cut, if any, is past every bin
constexpr unsigned kFull = 0xffffffffu;

// Kernel 1's output per (row, chunk).
struct ChunkStat {
  unsigned long long max_key;  // largest key of the chunk (0 if none)
  double s1;                   // sum of exp(l - chunk max), float terms (see the header)
  float lmin;                  // smallest finite logit (+inf if none)
  float unused;
};

// Workspace layout, a pure function of (rows, vocab): the caller sizes it with
// sample_tokens_cuda_workspace_bytes. Nothing needs initialising (kernel 1 zeroes the tickets).
struct Layout {
  int64_t chunks1 = 0, chunks2 = 0, chunk2 = 0;
  size_t stats = 0, hist_wt = 0, hist_cnt = 0, tickets = 0, bytes = 0;
};

Layout layout_for(int64_t rows, int64_t vocab) {
  Layout l;
  l.chunks1 = (vocab + kChunk1 - 1) / kChunk1;
  int64_t c2 = std::min<int64_t>(kMaxChunks2, (kTargetBlocks2 + rows - 1) / std::max<int64_t>(rows, 1));
  c2 = std::max<int64_t>(1, std::min(c2, (vocab + kMinChunk2 - 1) / kMinChunk2));
  l.chunk2 = ((vocab + c2 - 1) / c2 + 3) / 4 * 4;  // a multiple of 4: 16-byte loads stay aligned
  l.chunks2 = (vocab + l.chunk2 - 1) / l.chunk2;
  auto align = [](size_t x) { return (x + 255) / 256 * 256; };
  size_t off = 0;
  l.stats = off;
  off = align(off + static_cast<size_t>(rows * l.chunks1) * sizeof(ChunkStat));
  if (l.chunks2 > 1) {
    l.hist_wt = off;
    off = align(off + static_cast<size_t>(rows * l.chunks2) * kBins * sizeof(unsigned long long));
    l.hist_cnt = off;
    off = align(off + static_cast<size_t>(rows * l.chunks2) * kBins * sizeof(unsigned));
  }
  l.tickets = off;
  off = align(off + static_cast<size_t>(rows) * sizeof(unsigned));
  l.bytes = off;
  return l;
}

// --- keys, weights, bins ---------------------------------------------------------------------
__device__ __forceinline__ uint64_t make_key(float l, int v) {
  const uint32_t u = __float_as_uint(l == 0.0f ? 0.0f : l);  // -0 and +0 tie, as on the CPU
  const uint32_t ordered = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<uint64_t>(ordered) << 32) | (0xffffffffu - static_cast<uint32_t>(v));
}
__device__ __forceinline__ int key_id(uint64_t key) { return static_cast<int>(0xffffffffu - static_cast<uint32_t>(key)); }
__device__ __forceinline__ float key_logit(uint64_t key) {
  const uint32_t ordered = static_cast<uint32_t>(key >> 32);
  return __uint_as_float((ordered & 0x80000000u) ? (ordered & 0x7fffffffu) : ~ordered);
}

// round(q * 2^40), ties to even, for finite 0 <= q <= 1: __double2ull_rn(double(q) * 2^40) in
// integer operations (the double conversions would run on the slow conversion pipe).
__device__ __forceinline__ uint64_t fixed40(float q) {
  const uint32_t bits = __float_as_uint(q);
  const int e = static_cast<int>(bits >> 23);
  if (e == 0) return 0;                                  // zero or subnormal: < 2^-126
  const uint32_t mant = (bits & 0x7fffffu) | 0x800000u;  // q = mant * 2^(e - 150)
  const int shift = e - 110;                             // q * 2^40 = mant * 2^(e - 110)
  if (shift >= 0) return static_cast<uint64_t>(mant) << shift;
  if (shift < -24) return 0;  // mant * 2^shift < 2^24 * 2^-25 = 1/2
  const int s = -shift;
  const uint32_t kept = mant >> s, rest = mant & ((1u << s) - 1u), half = 1u << (s - 1);
  return kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
}

// Everything the row's blocks agree on.
struct RowCtx {
  const float* x;
  int vocab;
  float lmax;       // M
  float scale;      // bins per logit unit
  bool clamp;       // span is the row's range: every finite logit has a bin (the last one at most)
  double inv_t, m_t;  // 1 / T and M / T, the CPU path's m
};

// The CPU path's tempered weight in fixed point (see the header).
__device__ __forceinline__ uint64_t tempered_weight(float l, const RowCtx& r) {
  const double y = __dadd_rn(__dmul_rn(static_cast<double>(l), r.inv_t), -r.m_t);
  return fixed40(static_cast<float>(exp(y)));
}
__device__ __forceinline__ float tempered_q(float l, const RowCtx& r) {
  return static_cast<float>(exp(__dadd_rn(__dmul_rn(static_cast<double>(l), r.inv_t), -r.m_t)));
}

// Monotone non-increasing in l, computed with explicit roundings so every block and every pass
// gets the same bin; -1 = no bin (>= 32 tempered nats below M, or -inf).
__device__ __forceinline__ int bin_of(float l, const RowCtx& r) {
  const float t = __fmul_rn(__fsub_rn(r.lmax, l), r.scale);
  if (r.clamp) return l > -INFINITY ? min(static_cast<int>(t), kBins - 1) : -1;
  return t < static_cast<float>(kBins) ? static_cast<int>(t) : -1;  // NaN (inf * 0) fails too
}

// --- loads -----------------------------------------------------------------------------------
template <int kVec>
__device__ __forceinline__ void load_logits(const float* __restrict__ x, int i, int end, float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    if (i + 4 <= end) {
      const float4 t = *reinterpret_cast<const float4*>(x + i);
      v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) v[e] = i + e < end ? x[i + e] : -INFINITY;
}

// Calls f(l, v) for every column v of [begin, end), and with (-inf, v >= end) to pad each thread
// to the block's uniform trip count (f's warp collectives need whole warps). kUnroll vector loads
// are in flight per thread.
template <int kVec, int kUnroll, int kThreads, typename F>
__device__ __forceinline__ void for_each_logit(const float* __restrict__ x, int begin, int end, F&& f) {
  constexpr int kStep = kVec * kThreads * kUnroll;
  for (int base = begin; base < end; base += kStep) {
    float v[kUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_logits<kVec>(x, base + (u * kThreads + threadIdx.x) * kVec, end, v[u]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int e = 0; e < kVec; ++e) f(v[u][e], base + (u * kThreads + threadIdx.x) * kVec + e);
  }
}

// --- reductions ------------------------------------------------------------------------------
template <int kWarps, typename T, typename Op>
__device__ T block_reduce(T v, Op op, T* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFull, v, o));
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  T r = scratch[0];
  for (int i = 1; i < kWarps; ++i) r = op(r, scratch[i]);  // the same fixed order in every thread
  __syncthreads();
  return r;
}
struct Add {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxU64 {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const { return a > b ? a : b; }
};
struct MinU64 {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const { return a < b ? a : b; }
};
struct MinF {
  __device__ float operator()(float a, float b) const { return fminf(a, b); }
};

// Exclusive prefix over the block of each thread's value (integers: exact); total to all threads.
__device__ unsigned long long block_exclusive_scan(unsigned long long v, unsigned long long& total,
                                                   unsigned long long* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  unsigned long long inclusive = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long t = __shfl_up_sync(kFull, inclusive, o);
    if (lane >= o) inclusive += t;
  }
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  unsigned long long before = 0, sum = 0;
  for (int i = 0; i < kWarps2; ++i) {
    if (i < warp) before += scratch[i];
    sum += scratch[i];
  }
  __syncthreads();
  total = sum;
  return before + inclusive - v;
}

// A 64-bit count added to a bin kept as two 32-bit words: shared-memory 64-bit atomicAdd is a
// compare-and-swap loop on sm_80/sm_90, the 32-bit one a native instruction. The thread whose
// addition wraps the low word carries into the high word, so hi * 2^32 + lo is the exact sum.
__device__ __forceinline__ void add_split(uint32_t* lo, uint32_t* hi, uint64_t w) {
  const uint32_t wl = static_cast<uint32_t>(w);
  uint32_t wh = static_cast<uint32_t>(w >> 32);
  if (wl != 0) {
    const uint32_t old = atomicAdd(lo, wl);
    wh += old + wl < old ? 1u : 0u;
  }
  if (wh != 0) atomicAdd(hi, wh);
}
__device__ __forceinline__ uint64_t join_split(const uint32_t* lo, const uint32_t* hi, int b) {
  return (static_cast<uint64_t>(hi[b]) << 32) | lo[b];
}

// Adds (count 1, weight w) to bin b (b < 0: nothing). A warp whose lanes all fall in one bin (tied
// or very narrow rows) adds once, so such rows do not serialise 32 atomics on one address.
__device__ __forceinline__ void hist_add(uint32_t* lo, uint32_t* hi, uint32_t* cnt, int b, uint64_t w) {
  const int b0 = static_cast<int>(__shfl_sync(kFull, b, 0));
  if (__ballot_sync(kFull, b == b0) == kFull) {
    const uint64_t sum = warp_sum(static_cast<unsigned long long>(w));
    if (threadIdx.x % 32 == 0 && b0 >= 0) {
      add_split(lo + b0, hi + b0, sum);
      atomicAdd(cnt + b0, 32u);
    }
    return;
  }
  if (b >= 0) {
    add_split(lo + b, hi + b, w);
    atomicAdd(cnt + b, 1u);
  }
}

// --- kernel 1: chunk stats ---------------------------------------------------------------------
template <int kVec>
__global__ __launch_bounds__(kThreads1) void chunk_stats_kernel(ChunkStat* __restrict__ stats, unsigned* tickets,
                                                                const float* __restrict__ logits, int64_t ld,
                                                                int vocab, int chunks1) {
  __shared__ unsigned long long red_u64[kWarps1];
  __shared__ double red_f64[kWarps1];
  __shared__ float red_f32[kWarps1];
  const int row = blockIdx.y, c = blockIdx.x;
  const float* x = logits + static_cast<int64_t>(row) * ld;
  const int begin = c * kChunk1, end = min(vocab, begin + kChunk1);
  float v[kPerThread1];
  int id[kPerThread1];
#pragma unroll
  for (int j = 0; j < kPerThread1 / kVec; ++j) {
    const int i = begin + (j * kThreads1 + static_cast<int>(threadIdx.x)) * kVec;
    float t[kVec];
    load_logits<kVec>(x, i, end, t);
#pragma unroll
    for (int e = 0; e < kVec; ++e) v[j * kVec + e] = t[e], id[j * kVec + e] = i + e;
  }
  unsigned long long best = 0;
  float lmin = INFINITY;
#pragma unroll
  for (int j = 0; j < kPerThread1; ++j) {
    if (id[j] < end) {
      const unsigned long long key = make_key(v[j], id[j]);
      best = key > best ? key : best;
      if (v[j] > -INFINITY) lmin = fminf(lmin, v[j]);
    }
  }
  best = block_reduce<kWarps1>(best, MaxU64{}, red_u64);
  lmin = block_reduce<kWarps1>(lmin, MinF{}, red_f32);
  const float m = key_logit(best);
  // Float sums of 4 terms (relative rounding <= 3 * 2^-24), accumulated in double in a fixed order.
  double s1 = 0.0;
#pragma unroll
  for (int j = 0; j < kPerThread1; j += 4) {  // padding is -inf: exp2f(-inf) = 0
    float quad = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) quad += exp2f(__fmul_rn(__fsub_rn(v[j + e], m), kLog2e));
    s1 += static_cast<double>(quad);
  }
  s1 = block_reduce<kWarps1>(s1, Add{}, red_f64);
  if (threadIdx.x == 0) {
    stats[static_cast<int64_t>(row) * chunks1 + c] = ChunkStat{best, s1, lmin, 0.0f};
    if (c == 0) tickets[row] = 0;  // kernel 2 counts its row's blocks from zero
  }
}

// --- kernel 2: histograms, the last block's select ----------------------------------------------
struct Scalars {
  unsigned long long red_u64[kWarps2];
  double red_f64[kWarps2];
  float red_f32[kWarps2];
  int last;
  int bk, rk;                  // top-k: its bin (kNoBin: no cut among the bins), rank in the bin (1-based)
  int range_lo[3], range_hi[3];  // bins gathered: top-k's, top-p's, the draw's
  unsigned chunk_mask;         // which of the row's chunks hold gathered bins
  int kth, found;              // slots found by the steps
  int chosen;                  // radix select
  unsigned long long need, picked;
};

// Dynamic shared memory (69 KB; the accumulation histogram aliases the gather slots).
struct Smem {
  unsigned long long* cum_wt;  // [kBins + 1] weight in the bins before b
  uint32_t* cum_cnt;           // [kBins + 1]
  uint32_t* offset;            // [kBins] gathered bins: next slot (kNone: not gathered)
  uint32_t *rlo, *rhi, *rcnt;  // [256] radix histograms
  unsigned long long *keys, *wts, *above;  // [kCapacity] gathered elements
  uint32_t *lo, *hi, *cnt;     // [kBins] this block's histogram (aliases keys / wts)
};
constexpr size_t kSmemCum = (kBins + 2) * 8, kSmemCnt = (kBins + 4) * 4, kSmemOff = kBins * 4, kSmemRadix = 3 * 256 * 4;
constexpr size_t kSmemSlots = 3 * kCapacity * 8;
constexpr size_t kSmem2 = kSmemCum + kSmemCnt + kSmemOff + kSmemRadix + kSmemSlots;
static_assert(3 * kBins * 4 <= kSmemSlots, "the accumulation histogram aliases the slots");

__device__ Smem carve(void* base) {
  char* p = static_cast<char*>(base);
  Smem s;
  s.cum_wt = reinterpret_cast<unsigned long long*>(p);
  p += kSmemCum;
  s.cum_cnt = reinterpret_cast<uint32_t*>(p);
  p += kSmemCnt;
  s.offset = reinterpret_cast<uint32_t*>(p);
  p += kSmemOff;
  s.rlo = reinterpret_cast<uint32_t*>(p);
  s.rhi = s.rlo + 256;
  s.rcnt = s.rhi + 256;
  p += kSmemRadix;
  s.keys = reinterpret_cast<unsigned long long*>(p);
  s.wts = s.keys + kCapacity;
  s.above = s.wts + kCapacity;
  s.lo = reinterpret_cast<uint32_t*>(p);
  s.hi = s.lo + kBins;
  s.cnt = s.hi + kBins;
  return s;
}

// The largest b with cum[b] < n (n >= 1): the bin where the prefix sum reaches n. cum[0] = 0.
template <typename T>
__device__ int bin_reaching(const T* cum, unsigned long long n) {
  int lo = 0, hi = kBins;  // cum[lo] < n <= cum[hi] (n <= total)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (cum[mid] < n) lo = mid; else hi = mid;
  }
  return lo;
}

// The CPU path's cuts in fixed point (see the header), monotone in the kept sum S.
__device__ __forceinline__ unsigned long long nucleus_need(float top_p, unsigned long long s) {
  if (s == 0) return 0;
  const double want = ceil(static_cast<double>(top_p) * static_cast<double>(s));
  const unsigned long long need = want < 1.0 ? 1ull : static_cast<unsigned long long>(want);
  return need < s ? need : s;
}
__device__ __forceinline__ unsigned long long draw_need(double u, unsigned long long s) {
  if (s == 0) return 0;
  const unsigned long long need = static_cast<unsigned long long>(floor(u * static_cast<double>(s))) + 1;
  return need < s ? need : s;
}

// Warp 0: the digit (scanning 255 down to 0: descending key) at which the cumulative weight of the
// radix histogram reaches need; leaves the residual need within it.
__device__ void choose_digit(const Smem& m, Scalars& sh, unsigned long long need) {
  const int lane = threadIdx.x % 32;
  unsigned long long mine = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) mine += join_split(m.rlo, m.rhi, 255 - 8 * lane - j);
  unsigned long long inclusive = mine;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long t = __shfl_up_sync(kFull, inclusive, o);
    if (lane >= o) inclusive += t;
  }
  const unsigned long long total = __shfl_sync(kFull, inclusive, 31);
  if (need > total) need = total;  // cannot happen with exact sums; keeps the scan in range
  if (need == 0) need = 1;
  const unsigned first = __ffs(__ballot_sync(kFull, inclusive >= need)) - 1;
  if (lane == static_cast<int>(first)) {
    unsigned long long above = inclusive - mine;
    int digit = 255 - 8 * lane - 7;
    for (int j = 0; j < 8; ++j) {
      const int d = 255 - 8 * lane - j;
      const unsigned long long w = join_split(m.rlo, m.rhi, d);
      if (above + w >= need) {
        digit = d;
        break;
      }
      above += w;
    }
    sh.chosen = digit;
    sh.need = need - above;
  }
}

// Fallback: the key of bin `bin`'s element at which the bin's cumulative weight (mass) or count,
// in descending key order, first reaches need (1 <= need <= the bin's total), by histograms over
// the key's bytes (one pass over the row each) restricted to the bin and the bytes chosen so far.
template <int kVec>
__device__ __noinline__ uint64_t radix_select(const RowCtx& r, int bin, unsigned long long need, bool mass, const Smem& m,
                                 Scalars& sh) {
#ifdef SQLRL_SAMPLING_COUNT_FALLBACKS
  if (threadIdx.x == 0) atomicAdd(&sampling_fallback_steps, 1u);
#endif
  uint64_t prefix = 0;
  for (int level = 0; level < 8; ++level) {
    const int shift = 56 - 8 * level;
    for (int i = threadIdx.x; i < 256; i += kThreads2) m.rlo[i] = 0, m.rhi[i] = 0, m.rcnt[i] = 0;
    __syncthreads();
    for_each_logit<kVec, 2, kThreads2>(r.x, 0, r.vocab, [&](float l, int v) {
      int digit = -1;
      uint64_t w = 0;
      if (v < r.vocab && bin_of(l, r) == bin) {
        const uint64_t key = make_key(l, v);
        if (level == 0 || (key >> (shift + 8)) == (prefix >> (shift + 8))) {
          w = mass ? tempered_weight(l, r) : 1;
          if (w > 0) digit = static_cast<int>((key >> shift) & 255);
        }
      }
      hist_add(m.rlo, m.rhi, m.rcnt, digit, digit >= 0 ? w : 0);
    });
    __syncthreads();
    if (threadIdx.x < 32) choose_digit(m, sh, need);
    __syncthreads();
    const int chosen = sh.chosen;
    need = sh.need;
    const bool done = m.rcnt[chosen] == 1 || need == join_split(m.rlo, m.rhi, chosen);
    __syncthreads();  // all have read the histogram before the next level clears it
    prefix |= static_cast<uint64_t>(chosen) << shift;
    if (level == 7) return prefix;  // every byte chosen: the key itself
    if (!done) continue;
    // The element is the chosen digit's last candidate: its smallest key.
    unsigned long long smallest = ~0ull;
    for_each_logit<kVec, 2, kThreads2>(r.x, 0, r.vocab, [&](float l, int v) {
      if (v >= r.vocab || bin_of(l, r) != bin) return;
      const uint64_t key = make_key(l, v);
      if ((key >> shift) != (prefix >> shift)) return;
      if (mass && tempered_weight(l, r) == 0) return;
      smallest = key < smallest ? key : smallest;
    });
    return block_reduce<kWarps2>(smallest, MinU64{}, sh.red_u64);
  }
  return prefix;  // not reached
}

// Fallback: the weight of bin `bin`'s elements with key >= key_lo.
template <int kVec>
__device__ __noinline__ unsigned long long weight_from(const RowCtx& r, int bin, uint64_t key_lo, Scalars& sh) {
  unsigned long long sum = 0;
  for_each_logit<kVec, 2, kThreads2>(r.x, 0, r.vocab, [&](float l, int v) {
    if (v < r.vocab && bin_of(l, r) == bin && make_key(l, v) >= key_lo) sum += tempered_weight(l, r);
  });
  return block_reduce<kWarps2>(sum, Add{}, sh.red_u64);
}

// Bin `bin`'s element where its cumulative weight reaches need (1 <= need <= the bin's weight):
// its key, and the bin's weight down to and including it. From the gathered slots when the bin was
// gathered (every thread tests its slots; exactly one matches), else by the radix fallback.
template <int kVec>
__device__ void resolve_mass(const RowCtx& r, int bin, unsigned long long need, const Smem& m, Scalars& sh,
                             int gathered, uint64_t& key, unsigned long long& through) {
  if (m.offset[bin] != kNone) {
    if (threadIdx.x == 0) sh.found = -1;
    __syncthreads();
    for (int i = threadIdx.x; i < gathered; i += kThreads2) {
      const unsigned long long w = m.wts[i], a = m.above[i];
      if (w > 0 && a < need && need <= a + w && bin_of(key_logit(m.keys[i]), r) == bin) sh.found = i;
    }
    __syncthreads();
    const int i = sh.found;
    __syncthreads();  // all have read sh.found before another step resets it
    if (i >= 0) {
      key = m.keys[i];
      through = m.above[i] + m.wts[i];
      return;
    }
  }
  key = radix_select<kVec>(r, bin, need, true, m, sh);
  through = weight_from<kVec>(r, bin, key, sh);
}

template <int kVec>
__global__ __launch_bounds__(kThreads2, 2) void sample_kernel(SampledToken* __restrict__ out,
                                                             const float* __restrict__ logits, int64_t ld, int vocab,
                                                             const SamplingRequest* __restrict__ requests,
                                                             const ChunkStat* __restrict__ stats, int chunks1,
                                                             unsigned long long* hist_wt, unsigned* hist_cnt,
                                                             unsigned* tickets, int chunks2, int chunk2) {
  extern __shared__ __align__(16) uint16_t smem[];
  __shared__ Scalars sh;
  const Smem m = carve(smem);
  const int row = blockIdx.y, c = blockIdx.x, tid = threadIdx.x;
  const SamplingRequest req = requests[row];
  RowCtx r{};
  r.x = logits + static_cast<int64_t>(row) * ld;
  r.vocab = vocab;

  // The row's maximum (the CPU's first maximum) and smallest finite logit, from kernel 1.
  unsigned long long best = 0;
  float lmin = INFINITY;
  for (int i = tid; i < chunks1; i += kThreads2) {
    const ChunkStat s = stats[static_cast<int64_t>(row) * chunks1 + i];
    best = s.max_key > best ? s.max_key : best;
    lmin = fminf(lmin, s.lmin);
  }
  best = block_reduce<kWarps2>(best, MaxU64{}, sh.red_u64);
  lmin = block_reduce<kWarps2>(lmin, MinF{}, sh.red_f32);
  r.lmax = key_logit(best);
  uint64_t token_key = best;     // greedy: the first maximum
  unsigned long long kept = 0;   // sampled: the kept set's fixed-point weight
  const float temperature = req.params.temperature;
  const bool greedy = !(temperature > 0.0f);
  if (greedy && c != 0) return;  // block 0 writes the row

  if (!greedy) {
    r.inv_t = 1.0 / static_cast<double>(temperature);
    r.m_t = static_cast<double>(r.lmax) * r.inv_t;
    const float full = kSpanNats * temperature, data = __fsub_rn(r.lmax, lmin);
    r.clamp = data < full;
    const float span = r.clamp ? data : full;
    // Bounded so that M's own bin is 0 even when span underflows (tiny T): t = 0 * scale.
    r.scale = span > 0.0f ? fminf(__fdiv_rn(static_cast<float>(kBins), span), 1e30f) : 0.0f;

    // This block's histogram over its chunk.
    for (int b = tid; b < kBins; b += kThreads2) m.lo[b] = 0, m.hi[b] = 0, m.cnt[b] = 0;
    __syncthreads();
    const int begin = c * chunk2, end = min(vocab, begin + chunk2);
    for_each_logit<kVec, 2, kThreads2>(r.x, begin, end, [&](float l, int) {
      const int b = bin_of(l, r);  // padding is -inf: no bin
      hist_add(m.lo, m.hi, m.cnt, b, b >= 0 ? tempered_weight(l, r) : 0);
    });
    __syncthreads();

    // Combined histogram: this block's alone, or (ticket) the last block's sum of all of them.
    unsigned long long w_mine[kBinsPerThread], c_mine[kBinsPerThread];
    unsigned chunk_bits[kBinsPerThread];  // the chunks holding elements of each of this thread's bins
    if (chunks2 == 1) {
#pragma unroll
      for (int j = 0; j < kBinsPerThread; ++j) {
        const int b = tid * kBinsPerThread + j;
        w_mine[j] = join_split(m.lo, m.hi, b);
        c_mine[j] = m.cnt[b];
        chunk_bits[j] = 1u;
      }
    } else {
      const int64_t base = (static_cast<int64_t>(row) * chunks2 + c) * kBins;
      for (int b = tid; b < kBins; b += kThreads2) {
        hist_wt[base + b] = join_split(m.lo, m.hi, b);
        hist_cnt[base + b] = m.cnt[b];
      }
      __threadfence();  // the histogram is visible before the ticket says so
      __syncthreads();
      if (tid == 0) {
        const unsigned ticket = atomicAdd(&tickets[row], 1u);
        __threadfence();
        sh.last = ticket == static_cast<unsigned>(chunks2 - 1);
      }
      __syncthreads();
      if (!sh.last) return;
      // Eight chunks' loads in flight at a time (a loop of dependent adds would wait ~1 us of L2
      // latency per chunk); each bin also notes which chunks hold it, for the gather below.
#pragma unroll 1
      for (int j = 0; j < kBinsPerThread; ++j) {
        const int b = tid * kBinsPerThread + j;
        unsigned long long w = 0, n = 0;
        unsigned bits = 0;
        for (int k0 = 0; k0 < chunks2; k0 += 8) {
          unsigned long long wv[8];
          unsigned cv[8];
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            const int64_t at = (static_cast<int64_t>(row) * chunks2 + k0 + k) * kBins + b;
            wv[k] = k0 + k < chunks2 ? __ldcg(&hist_wt[at]) : 0ull;
            cv[k] = k0 + k < chunks2 ? __ldcg(&hist_cnt[at]) : 0u;
          }
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            w += wv[k], n += cv[k];
            bits |= cv[k] > 0 ? 1u << (k0 + k) : 0u;
          }
        }
        w_mine[j] = w, c_mine[j] = n, chunk_bits[j] = bits;
      }
    }
    // Exclusive prefix sums over the bins (kBinsPerThread consecutive bins per thread).
    unsigned long long w_sum = 0, c_sum = 0, w_total = 0, c_total = 0;
#pragma unroll
    for (int j = 0; j < kBinsPerThread; ++j) w_sum += w_mine[j], c_sum += c_mine[j];
    unsigned long long w_before = block_exclusive_scan(w_sum, w_total, sh.red_u64);
    unsigned long long c_before = block_exclusive_scan(c_sum, c_total, sh.red_u64);
#pragma unroll
    for (int j = 0; j < kBinsPerThread; ++j) {
      const int b = tid * kBinsPerThread + j;
      m.cum_wt[b] = w_before;
      m.cum_cnt[b] = static_cast<uint32_t>(c_before);
      w_before += w_mine[j];
      c_before += c_mine[j];
    }
    if (tid == 0) m.cum_wt[kBins] = w_total, m.cum_cnt[kBins] = static_cast<uint32_t>(c_total);
    __syncthreads();

    // Plan: every bin a cut can land in, from the bins' sums alone. Top-k by count: exact bin. Its
    // kept weight S_k lies in [cum[bk], cum[bk + 1]]; the nucleus need, monotone in S_k, then
    // spans a range of bins, the kept weight S lies in [need_lo, end of the last such bin], and the
    // draw's need, monotone in S, spans another range. A cut inside the top-k set never passes bk.
    const double u = static_cast<double>(uniform_from_bits(philox_draw(req.params.seed, req.sequence_id, req.position).v[0]));
    const int64_t top_k = req.params.top_k;
    const float top_p = req.params.top_p;
    if (tid == 0) {
      int bk = kNoBin, rk = 0;
      if (top_k > 0 && top_k < vocab && top_k <= static_cast<int64_t>(c_total)) {
        bk = bin_reaching(m.cum_cnt, static_cast<unsigned long long>(top_k));
        rk = static_cast<int>(top_k - m.cum_cnt[bk]);
      }
      sh.bk = bk, sh.rk = rk;
      sh.range_lo[0] = sh.range_hi[0] = bk;  // kNoBin: no bin
      unsigned long long s_lo = bk == kNoBin ? w_total : m.cum_wt[bk], s_hi = bk == kNoBin ? w_total : m.cum_wt[bk + 1];
      auto bin_of_need = [&](unsigned long long n) { return n == 0 ? 0 : min(bin_reaching(m.cum_wt, n), bk); };
      sh.range_lo[1] = kNoBin, sh.range_hi[1] = -1;
      if (top_p < 1.0f) {
        const unsigned long long n_lo = nucleus_need(top_p, s_lo), n_hi = nucleus_need(top_p, s_hi);
        sh.range_lo[1] = bin_of_need(n_lo);
        sh.range_hi[1] = bin_of_need(n_hi);
        s_lo = n_lo;
        s_hi = m.cum_wt[sh.range_hi[1] + 1];
      }
      sh.range_lo[2] = bin_of_need(draw_need(u, s_lo));
      sh.range_hi[2] = bin_of_need(draw_need(u, s_hi));
    }
    __syncthreads();
    const int bk = sh.bk, rk = sh.rk;

    // Gather those bins' elements if they fit: slots by bin, in bin order.
    unsigned long long n_mine = 0;
    bool flag[kBinsPerThread];
#pragma unroll
    for (int j = 0; j < kBinsPerThread; ++j) {
      const int b = tid * kBinsPerThread + j;
      flag[j] = false;
      for (int k = 0; k < 3; ++k) flag[j] = flag[j] || (sh.range_lo[k] <= b && b <= sh.range_hi[k]);
      if (flag[j]) n_mine += c_mine[j];
    }
    unsigned long long gathered = 0;
    unsigned long long slot = block_exclusive_scan(n_mine, gathered, sh.red_u64);
    const bool fits = gathered <= static_cast<unsigned long long>(kCapacity);
    if (tid == 0) sh.chunk_mask = 0u;
    __syncthreads();
    unsigned bits = 0;
#pragma unroll
    for (int j = 0; j < kBinsPerThread; ++j) {
      m.offset[tid * kBinsPerThread + j] = fits && flag[j] ? static_cast<uint32_t>(slot) : kNone;
      if (flag[j]) slot += c_mine[j], bits |= chunk_bits[j];
    }
    // The chunks that hold none of the gathered bins are skipped (peaked rows: most of them).
    if (bits != 0) atomicOr(&sh.chunk_mask, bits);
    __syncthreads();
    const int n_gathered = fits ? static_cast<int>(gathered) : 0;
    if (n_gathered > 0) {
      const unsigned mask = sh.chunk_mask;
      // A copy whose address never escapes stays in registers (r's is passed to the non-inlined
      // fallback, so the compiler reloads its fields from the stack after every store).
      const RowCtx rv = r;
      for (int k = 0; k < chunks2; ++k) {
        if (!(mask >> k & 1u)) continue;
        for_each_logit<kVec, 8, kThreads2>(rv.x, k * chunk2, min(vocab, (k + 1) * chunk2), [&](float l, int v) {
          const int b = bin_of(l, rv);
          if (b < 0 || m.offset[b] == kNone) return;
          const uint32_t s = atomicAdd(&m.offset[b], 1u);
          if (s < static_cast<uint32_t>(kCapacity)) m.keys[s] = make_key(l, v), m.wts[s] = tempered_weight(l, rv);
        });
      }
      __syncthreads();  // offset[b] is now the end of bin b's slots
      // Each element's weight above it within its bin, and top-k's element (rank rk - 1 in bk).
      for (int i = tid; i < n_gathered; i += kThreads2) {
        const unsigned long long key = m.keys[i];
        const int b = bin_of(key_logit(key), r);
        const int stop = static_cast<int>(m.offset[b]), start = stop - static_cast<int>(m.cum_cnt[b + 1] - m.cum_cnt[b]);
        unsigned long long above = 0;
        int rank = 0;
        for (int j = start; j < stop; ++j) {
          const unsigned long long other = m.keys[j];
          if (other > key) above += m.wts[j], ++rank;
        }
        m.above[i] = above;
        if (b == bk && rank == rk - 1) sh.kth = i;
      }
      __syncthreads();
    }

    // Top-k: the kept weight S_k (all the bins' weight when the cut is past them: weight 0 there).
    unsigned long long s_kept = w_total;
    if (bk != kNoBin) {
      if (m.offset[bk] != kNone) {
        const int i = sh.kth;
        s_kept = m.cum_wt[bk] + m.above[i] + m.wts[i];
      } else {
        const uint64_t key_k = radix_select<kVec>(r, bk, static_cast<unsigned long long>(rk), false, m, sh);
        s_kept = m.cum_wt[bk] + weight_from<kVec>(r, bk, key_k, sh);
      }
    }
    // Top-p: the smallest prefix whose weight reaches ceil(top_p * S_k).
    const int limit = bk;
    if (top_p < 1.0f) {
      const unsigned long long need = nucleus_need(top_p, s_kept);
      const int bp = min(bin_reaching(m.cum_wt, need), limit);
      uint64_t key;
      unsigned long long through;
      resolve_mass<kVec>(r, bp, need - m.cum_wt[bp], m, sh, n_gathered, key, through);
      s_kept = m.cum_wt[bp] + through;
    }
    // The draw: the first element whose cumulative weight exceeds u * S.
    const unsigned long long need = draw_need(u, s_kept);
    const int bd = min(bin_reaching(m.cum_wt, need), limit);
    unsigned long long through;
    resolve_mass<kVec>(r, bd, need - m.cum_wt[bd], m, sh, n_gathered, token_key, through);
    kept = s_kept;
  }

  // T = 1 normaliser from kernel 1's chunks, combined in chunk order (batch invariant).
  double part = 0.0;
  for (int i = tid; i < chunks1; i += kThreads2) {
    const ChunkStat s = stats[static_cast<int64_t>(row) * chunks1 + i];
    part += s.s1 * exp(static_cast<double>(key_logit(s.max_key)) - static_cast<double>(r.lmax));
  }
  const double s1 = block_reduce<kWarps2>(part, Add{}, sh.red_f64);
  if (tid == 0) {
    const int token = key_id(token_key);
    const float l = r.x[token];
    const float lp_t1 = static_cast<float>(static_cast<double>(l) - static_cast<double>(r.lmax) - log(s1));
    float lp = 0.0f;
    if (!greedy) lp = static_cast<float>(log(static_cast<double>(tempered_q(l, r)) * 0x1p40 / static_cast<double>(kept)));
    out[row] = SampledToken{token, lp, lp_t1};
  }
}

}  // namespace

size_t sample_tokens_cuda_workspace_bytes(int64_t rows, int64_t vocab) {
  return rows > 0 && vocab > 0 ? layout_for(rows, vocab).bytes : 0;
}

void sample_tokens_cuda(SampledToken* out, const float* logits, int64_t rows, int64_t vocab, int64_t ld,
                        const SamplingRequest* requests, void* workspace, size_t workspace_bytes,
                        const CudaStream& stream) {
  check(vocab > 0 && vocab < INT32_MAX && ld >= vocab, "sampling cuda: vocab ", vocab, " and row stride ", ld,
        " (need 0 < vocab <= ld)");
  check(rows <= 65535, "sampling cuda: ", rows, " rows exceed the grid (at most 65535)");
  if (rows <= 0) return;
  const Layout l = layout_for(rows, vocab);
  check(workspace != nullptr && workspace_bytes >= l.bytes, "sampling cuda: workspace of ", workspace_bytes,
        " bytes, need ", l.bytes, " (sample_tokens_cuda_workspace_bytes)");
  char* ws = static_cast<char*>(workspace);
  auto* stats = reinterpret_cast<ChunkStat*>(ws + l.stats);
  auto* hist_wt = l.chunks2 > 1 ? reinterpret_cast<unsigned long long*>(ws + l.hist_wt) : nullptr;
  auto* hist_cnt = l.chunks2 > 1 ? reinterpret_cast<unsigned*>(ws + l.hist_cnt) : nullptr;
  auto* tickets = reinterpret_cast<unsigned*>(ws + l.tickets);
  const cudaStream_t s = cuda_stream_of(stream);
  const dim3 grid1(static_cast<unsigned>(l.chunks1), static_cast<unsigned>(rows));
  const dim3 grid2(static_cast<unsigned>(l.chunks2), static_cast<unsigned>(rows));
  const int v = static_cast<int>(vocab);
  const int c1 = static_cast<int>(l.chunks1), c2 = static_cast<int>(l.chunks2), w2 = static_cast<int>(l.chunk2);
  // The shared-memory grant above 48 KB, once per device (a per-call attribute call costs host time
  // the GPU waits for at small batches).
  static std::atomic<uint64_t> granted{0};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device & 63);
  if (!(granted.load(std::memory_order_acquire) & bit)) {
    CUDA_CHECK(cudaFuncSetAttribute(sample_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem2)));
    CUDA_CHECK(cudaFuncSetAttribute(sample_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem2)));
    granted.fetch_or(bit, std::memory_order_acq_rel);
  }
  // 16-byte loads when every row starts 16-byte aligned.
  if (aligned16(logits) && ld % 4 == 0) {
    chunk_stats_kernel<4><<<grid1, kThreads1, 0, s>>>(stats, tickets, logits, ld, v, c1);
    CUDA_CHECK_LAUNCH();
    sample_kernel<4><<<grid2, kThreads2, static_cast<int>(kSmem2), s>>>(out, logits, ld, v, requests, stats, c1, hist_wt,
                                                                       hist_cnt, tickets, c2, w2);
  } else {
    chunk_stats_kernel<1><<<grid1, kThreads1, 0, s>>>(stats, tickets, logits, ld, v, c1);
    CUDA_CHECK_LAUNCH();
    sample_kernel<1><<<grid2, kThreads2, static_cast<int>(kSmem2), s>>>(out, logits, ld, v, requests, stats, c1, hist_wt,
                                                                       hist_cnt, tickets, c2, w2);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace sqlrl
