// Next-token sampling on CUDA without sorting the 151,936-wide row: one block per row.
//
// The CPU path orders candidates by (logit descending, id ascending). Here every column v gets a
// 64-bit key, ordered(logit) << 32 | (2^32 - 1 - v), so that larger key = earlier in that order
// and all keys differ. Each truncation is then "the element at which the cumulative weight, in
// descending key order, first reaches `need`" (weight 1 for top-k, the tempered probability for
// top-p and for the draw), found by select_key: one histogram over 256 logit-value buckets
// (a monotone function of the logit, spread so that few columns share a bucket), then histograms
// over the key's bytes restricted to the chosen bucket, until the element is alone in its bin; a
// last pass takes its exact key. Probabilities are summed in 2^-40 fixed point (u64), so histogram
// sums are exact whatever order the atomics land in: the result is deterministic.
#include <cmath>

#include "kernels/cuda/ops_common.cuh"
#include "kernels/sampling.h"
#include "runtime/philox.h"

namespace sqlrl {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
constexpr double kFixedScale = 0x1p40;  // probabilities relative to the max are <= 1: sums < 2^58
// Tempered log-probability span of the value buckets: q = e^(-32) * 2^40 < 0.5 rounds to a zero
// weight, so bucket 0 (everything further below the max) carries no probability mass.
constexpr float kBucketSpan = 32.0f;

struct Row {
  const float* logits;
  int vocab;
  float lmax;        // the row's largest logit
  float bin_scale;   // value buckets per logit unit
  double inv_t, m_t; // 1 / temperature, lmax / temperature (the CPU path's m)
};

struct Shared {
  unsigned long long weight[kBins];
  unsigned int count[kBins];
  unsigned long long red_u64[kWarps];
  double red_f64[kWarps];
  int chosen;
  unsigned long long above, need;
};

__device__ __forceinline__ uint64_t make_key(float l, int v) {
  uint32_t u = __float_as_uint(l == 0.0f ? 0.0f : l);  // -0 and +0 tie, as on the CPU
  uint32_t ordered = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<uint64_t>(ordered) << 32) | (0xffffffffu - static_cast<uint32_t>(v));
}
__device__ __forceinline__ int key_id(uint64_t key) { return static_cast<int>(0xffffffffu - static_cast<uint32_t>(key)); }

// Monotone in l (explicit roundings: every pass computes the same bucket), 255 = the max.
__device__ __forceinline__ int value_bucket(float l, const Row& r) {
  float d = __fmul_rn(__fsub_rn(l, r.lmax), r.bin_scale);
  if (!(d > -255.0f)) return 0;
  return 255 + static_cast<int>(floorf(d));
}

// The CPU path's tempered weight, float(exp(l / T - m)), in fixed point.
__device__ __forceinline__ float tempered(float l, const Row& r) {
  return static_cast<float>(exp(static_cast<double>(l) * r.inv_t - r.m_t));
}
__device__ __forceinline__ uint64_t fixed_weight(float q) { return __double2ull_rn(static_cast<double>(q) * kFixedScale); }

template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
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
struct Max {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const { return a > b ? a : b; }
};
struct Min {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const { return a < b ? a : b; }
};

// Warp 0: the bin (scanning 255 down to 0) at which the cumulative weight reaches need.
__device__ void choose_bin(Shared& sh, uint64_t need) {
  const int lane = threadIdx.x % 32;
  unsigned long long mine = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) mine += sh.weight[255 - 8 * lane - j];
  unsigned long long inclusive = mine;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    unsigned long long t = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += t;
  }
  const unsigned long long total = __shfl_sync(0xffffffffu, inclusive, 31);
  if (need > total) need = total;  // cannot happen with exact sums; keeps the scan in range
  if (need == 0) need = 1;
  const unsigned first = __ffs(__ballot_sync(0xffffffffu, inclusive >= need)) - 1;
  if (lane == static_cast<int>(first)) {
    unsigned long long above = inclusive - mine;
    int bin = 255 - 8 * lane - 7;
    for (int j = 0; j < 8; ++j) {
      int b = 255 - 8 * lane - j;
      if (above + sh.weight[b] >= need) {
        bin = b;
        break;
      }
      above += sh.weight[b];
    }
    sh.chosen = bin;
    sh.above = above;
    sh.need = need - above;
  }
}

// The key of the element at which the cumulative weight of the candidates (key >= lo; weight > 0
// when `mass`), in descending key order, first reaches need (>= 1). Every thread of the block calls.
__device__ uint64_t select_key(const Row& r, uint64_t lo, uint64_t need, bool mass, Shared& sh) {
  const int lane = threadIdx.x % 32;
  int bucket = -1;
  uint64_t prefix = 0;
  for (int level = 0; level <= 8; ++level) {
    // level 0: value buckets; level k >= 1: key byte 8 - k (bits shift .. shift + 7), within the bucket.
    const int shift = level == 0 ? 0 : 8 * (8 - level);
    for (int i = threadIdx.x; i < kBins; i += kThreads) sh.weight[i] = 0, sh.count[i] = 0;
    __syncthreads();
    for (int base = 0; base < r.vocab; base += kThreads) {  // uniform trip count: whole warps below
      const int v = base + threadIdx.x;
      int digit = -1;
      uint64_t w = 0;
      if (v < r.vocab) {
        const float l = r.logits[v];
        const uint64_t key = make_key(l, v);
        const int b = value_bucket(l, r);
        bool candidate = key >= lo;
        if (candidate && level > 0) candidate = b == bucket && (level == 1 || (key >> (shift + 8)) == (prefix >> (shift + 8)));
        if (candidate) {
          // Bucket 0 lies >= 32 tempered units below the max: weight exactly 0, no exp needed.
          w = !mass ? 1 : (b == 0 ? 0 : fixed_weight(tempered(l, r)));
          if (w > 0) digit = level == 0 ? b : static_cast<int>((key >> shift) & 255);
        }
      }
      // Lanes sharing a bin add their count once (bucket 0 or a peaked row would otherwise
      // serialise thousands of atomics on one address).
      const unsigned peers = __match_any_sync(0xffffffffu, digit);
      if (digit >= 0) {
        const bool leader = (peers & ((1u << lane) - 1u)) == 0;
        if (leader) atomicAdd(&sh.count[digit], static_cast<unsigned>(__popc(peers)));
        if (mass)
          atomicAdd(&sh.weight[digit], static_cast<unsigned long long>(w));
        else if (leader)
          atomicAdd(&sh.weight[digit], static_cast<unsigned long long>(__popc(peers)));
      }
    }
    __syncthreads();
    if (threadIdx.x < 32) choose_bin(sh, need);
    __syncthreads();
    const int chosen = sh.chosen;
    need = sh.need;
    const bool done = sh.count[chosen] == 1 || need == sh.weight[chosen] || level == 8;
    __syncthreads();  // all have read the histogram before the next level clears it
    if (level == 0)
      bucket = chosen;
    else
      prefix |= static_cast<uint64_t>(chosen) << shift;
    if (!done) continue;
    // The element is the last candidate of the chosen bin: its smallest key.
    unsigned long long smallest = ~0ull;
    for (int v = threadIdx.x; v < r.vocab; v += kThreads) {
      const float l = r.logits[v];
      const uint64_t key = make_key(l, v);
      if (key < lo || value_bucket(l, r) != bucket) continue;
      if (level > 0 && (key >> shift) != (prefix >> shift)) continue;
      if (mass && (bucket == 0 || fixed_weight(tempered(l, r)) == 0)) continue;
      smallest = key < smallest ? key : smallest;
    }
    return block_reduce(smallest, Min{}, sh.red_u64);
  }
  return 0;  // not reached: level 8 always finishes
}

__global__ __launch_bounds__(kThreads, 1) void sample_kernel(SampledToken* out, const float* logits, int64_t ld,
                                                          int vocab, const SamplingRequest* requests) {
  __shared__ Shared sh;
  const SamplingRequest req = requests[blockIdx.x];
  Row r{};
  r.logits = logits + static_cast<int64_t>(blockIdx.x) * ld;
  r.vocab = vocab;

  // The first maximum (largest key) and the T = 1 normaliser.
  unsigned long long best = 0;
  for (int v = threadIdx.x; v < vocab; v += kThreads) {
    unsigned long long key = make_key(r.logits[v], v);
    best = key > best ? key : best;
  }
  best = block_reduce(best, Max{}, sh.red_u64);
  const int argmax = key_id(best);
  r.lmax = r.logits[argmax];
  double sum_t1 = 0.0;
  for (int v = threadIdx.x; v < vocab; v += kThreads)
    sum_t1 += exp(static_cast<double>(r.logits[v]) - static_cast<double>(r.lmax));
  sum_t1 = block_reduce(sum_t1, Add{}, sh.red_f64);
  auto logprob_t1 = [&](int token) {
    return static_cast<float>(static_cast<double>(r.logits[token]) - static_cast<double>(r.lmax) - log(sum_t1));
  };

  const float temperature = req.params.temperature;
  if (!(temperature > 0.0f)) {  // greedy
    if (threadIdx.x == 0) out[blockIdx.x] = SampledToken{argmax, 0.0f, logprob_t1(argmax)};
    return;
  }
  r.inv_t = 1.0 / static_cast<double>(temperature);
  r.m_t = static_cast<double>(r.lmax) * r.inv_t;
  r.bin_scale = 255.0f / (kBucketSpan * temperature);

  uint64_t lo = 0;  // candidates: key >= lo
  if (req.params.top_k > 0 && req.params.top_k < vocab)
    lo = select_key(r, 0, static_cast<uint64_t>(req.params.top_k), false, sh);
  auto kept_weight = [&](uint64_t threshold) {
    unsigned long long sum = 0;
    for (int v = threadIdx.x; v < vocab; v += kThreads) {
      const float l = r.logits[v];
      if (make_key(l, v) >= threshold && value_bucket(l, r) > 0) sum += fixed_weight(tempered(l, r));
    }
    return block_reduce(sum, Add{}, sh.red_u64);
  };
  if (req.params.top_p < 1.0f) {
    // Smallest prefix whose probability reaches top_p: cumulative >= ceil(top_p * S).
    const unsigned long long total = kept_weight(lo);
    double want = ceil(static_cast<double>(req.params.top_p) * static_cast<double>(total));
    unsigned long long need = want < 1.0 ? 1ull : static_cast<unsigned long long>(want);
    if (need > total) need = total;
    lo = select_key(r, lo, need, true, sh);
  }
  // The kept set's total, exactly (for the draw) and as the CPU path's double sum of float probs
  // (bucket 0 left out: its members add < vocab * e^-32 ~ 2e-9 of the total).
  const unsigned long long total = kept_weight(lo);
  double kept_sum = 0.0;
  for (int v = threadIdx.x; v < vocab; v += kThreads) {
    const float l = r.logits[v];
    if (make_key(l, v) >= lo && value_bucket(l, r) > 0) kept_sum += tempered(l, r);
  }
  kept_sum = block_reduce(kept_sum, Add{}, sh.red_f64);

  // The draw: the first element whose cumulative weight exceeds u * total.
  const Philox4 draw = philox_draw(req.params.seed, req.sequence_id, req.position);
  const double target = static_cast<double>(uniform_from_bits(draw.v[0])) * static_cast<double>(total);
  unsigned long long need = static_cast<unsigned long long>(floor(target)) + 1;
  if (need > total) need = total;
  const int token = key_id(select_key(r, lo, need, true, sh));
  if (threadIdx.x == 0) {
    const float q = tempered(r.logits[token], r);
    out[blockIdx.x] = SampledToken{token, static_cast<float>(log(static_cast<double>(q) / kept_sum)), logprob_t1(token)};
  }
}

}  // namespace

void sample_tokens_cuda(SampledToken* out, const float* logits, int64_t rows, int64_t vocab, int64_t ld,
                        const SamplingRequest* requests, const CudaStream& stream) {
  check(vocab > 0 && vocab < INT32_MAX && ld >= vocab, "sampling cuda: vocab ", vocab, " and row stride ", ld,
        " (need 0 < vocab <= ld)");
  check(rows <= INT32_MAX, "sampling cuda: ", rows, " rows exceed the grid");
  if (rows == 0) return;
  sample_kernel<<<static_cast<unsigned>(rows), kThreads, 0, cuda_stream_of(stream)>>>(
      out, logits, ld, static_cast<int>(vocab), requests);
  CUDA_CHECK_LAUNCH();
}

}  // namespace sqlrl
