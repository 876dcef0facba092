// Runtime ISA dispatch for the CPU kernels' hot loops. The default build targets baseline
// x86-64 (SSE2) so that binaries run on any CI machine; the loops that matter are therefore
// compiled up to three times — [[gnu::target]] wrappers around one always-inline body — and
// picked once per process from cpuid. The body is written as independent lanes (acc[l] +=
// ...), which the vectoriser maps onto whatever vector width the wrapper's target has, with no
// reassociation, or as GCC vector-extension types (V16: 16 floats, one zmm register on AVX-512,
// two ymm or four xmm elsewhere) where the accumulators must stay in registers. Each clone's
// result is a fixed function of its inputs (run-to-run bitwise identical); clones differ only
// by FMA rounding (madd<true> fuses, madd<false> is the baseline's separate multiply and add).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace sqlrl::cpu {

enum class Isa { Baseline, Avx2, Avx512 };

// SQLRL_CPU_ISA=baseline|avx2 caps the choice (to test the other clones on an AVX-512 machine).
inline Isa cpu_isa() {
  static const Isa isa = [] {
    const char* cap = std::getenv("SQLRL_CPU_ISA");
    if (cap && std::strcmp(cap, "baseline") == 0) return Isa::Baseline;
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (cap && std::strcmp(cap, "avx2") == 0) return avx2 ? Isa::Avx2 : Isa::Baseline;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
      return Isa::Avx512;
    if (avx2) return Isa::Avx2;
    return Isa::Baseline;
  }();
  return isa;
}

template <bool Fma>
[[gnu::always_inline]] inline float madd(float a, float b, float c) {
  if constexpr (Fma) {
    return __builtin_fmaf(a, b, c);
  } else {
    return a * b + c;
  }
}

// 16 floats as one value; loads and stores go through memcpy (no alignment assumed). The
// helpers are always inlined, so no V16 ever crosses a call boundary and GCC's note that
// passing one by value has no fixed ABI without AVX-512 (-Wpsabi) does not apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float V16 __attribute__((vector_size(64)));

[[gnu::always_inline]] inline V16 load16(const float* p) {
  V16 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

[[gnu::always_inline]] inline void store16(float* p, V16 v) { __builtin_memcpy(p, &v, sizeof v); }

// c + a * x lane by lane; GCC contracts it into one FMA where the target has FMA.
[[gnu::always_inline]] inline V16 madd16(float a, V16 x, V16 c) {
  return c + a * x;
}

// The same for a vector of the target's own width: V8 is one ymm register. GCC lowers a V16
// on an AVX2 target through the stack (a scalar splat is stored lane by lane, halves reloaded),
// which ran the training attention's AVX2 clone barely faster than the SSE2 one; V8 maps onto
// ymm registers with a register broadcast. Lane by lane the same operations: the same bits.
typedef float V8 __attribute__((vector_size(32)));
template <class V>
[[gnu::always_inline]] inline V loadv(const float* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
[[gnu::always_inline]] inline void storev(float* p, const V& v) {
  __builtin_memcpy(p, &v, sizeof v);
}
template <class V>
[[gnu::always_inline]] inline V maddv(float a, const V& x, const V& c) {
  return c + a * x;
}
template <class V>
inline constexpr int64_t kLanes = static_cast<int64_t>(sizeof(V) / sizeof(float));
#pragma GCC diagnostic pop

// exp(x), branch-free so that it vectorises (softmax weights, sigmoids): x = n ln2 + r
// (Cody-Waite, ln2 in two parts so r is exact to ~1e-10), |r| <= ln2/2, exp(r) by its degree-7
// Taylor polynomial (truncation (ln2/2)^8/8! = 5e-9). Measured against double exp over
// [-87, 88]: max relative error 1.0e-7 (about 1 ulp). Below -87 it returns 0 (exp(-87) =
// 1.6e-38: no weight next to a softmax max's 1 can notice); above 88 it returns exp(88) =
// 1.65e38. n = rint by the 1.5 * 2^23 trick, exact under round-to-nearest.
template <bool Fma>
[[gnu::always_inline]] inline float exp_fast(float x) {
  float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);  // 2^n stays a normal float
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = madd<Fma>(n, -0.693145752f, xc);  // ln2 high part: 17 bits, so n * hi is exact
  r = madd<Fma>(n, -1.42860677e-6f, r);       // ln2 - hi
  float p = 1.0f / 5040.0f;
  p = madd<Fma>(p, r, 1.0f / 720.0f);
  p = madd<Fma>(p, r, 1.0f / 120.0f);
  p = madd<Fma>(p, r, 1.0f / 24.0f);
  p = madd<Fma>(p, r, 1.0f / 6.0f);
  p = madd<Fma>(p, r, 0.5f);
  p = madd<Fma>(p, r, 1.0f);
  p = madd<Fma>(p, r, 1.0f);
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale = __builtin_bit_cast(float, bits);
  return x < -87.0f ? 0.0f : p * scale;
}

}  // namespace sqlrl::cpu
