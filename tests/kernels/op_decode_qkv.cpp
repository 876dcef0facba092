// decode_qkv (kernels/decode_qkv.h): the fused attention prologue of a decode step (q/k RMSNorm,
// RoPE, q out, k and v into the paged cache rows), on the CPU and on CUDA.
//
// Shapes: Qwen3 (norms) and Qwen2 (none); head_dim 64, 128, 256 (four rotation indices per lane)
// and 10 (a partial warp); GQA groups 1 to 4; positions up to 40,000; padding rows (slot -1)
// between written ones, whose cache rows must stay as they were.
//
// Tolerances. The reference is float64 from the op's definition: RMSNorm (ref_rmsnorm's formula)
// then RoPE at the f32 angle (ref_rope's), no intermediate rounding.
//  CPU (f32): f32_tol's rtol with K = head_dim (the sum of squares), relative to |out| plus the
//    rotation's operand magnitudes.
//  CUDA (bf16 storage): the normalised value is rounded to bf16 before RoPE, as the unfused path
//    stores it: that error (u_bf16 relative) goes through the rotation as u_bf16 (|a cos| +
//    |b sin|); the output's own rounding is u_bf16 |out|; f32 arithmetic before them (rstd, the
//    rotation, sincosf) ~8 u_f32 (|a| + |b|). Each element gets 1.01 x the sum. v is copied: exact.
#include <cmath>
#include <cstring>

#include "kernels/decode_qkv.h"
#include "tests/kernels/cases.h"

namespace sqlrl::testing {
namespace {

struct QkvShape {
  int64_t T, H, KVH, D;
  bool norm;
  std::vector<int32_t> positions, slots;
  int64_t cache_rows;
};

const std::vector<QkvShape> kShapes = {
    {1, 2, 1, 64, true, {0}, {3}, 4},
    {5, 4, 2, 128, true, {7, 15, 16, 300, 1}, {2, -1, 9, 5, -1}, 12},
    {3, 32, 8, 128, true, {40000, 12345, 17}, {0, 1, 2}, 3},  // Qwen3-4B's heads
    {4, 4, 4, 64, false, {0, 1, 2, 3}, {3, 2, 1, 0}, 4},      // Qwen2: no q/k norm
    {2, 3, 1, 10, true, {5, 900}, {1, 0}, 2},
    {2, 2, 2, 256, true, {31, 4096}, {-1, 1}, 2},
};

std::string describe(const QkvShape& s, uint64_t seed) {
  return "T " + std::to_string(s.T) + " H " + std::to_string(s.H) + " KVH " + std::to_string(s.KVH) + " D " +
         std::to_string(s.D) + (s.norm ? " norm" : " no norm") + " seed " + std::to_string(seed);
}

struct QkvWant {
  std::vector<double> q, k, v;          // q [T, H, D]; k, v [cache_rows, KVH, D] (NaN: never written)
  std::vector<double> q_scale, k_scale;  // per element: |a cos| + |b sin| and |a| + |b| summed (CUDA budget)
};

constexpr float kEps = 1e-6f, kTheta = 1e6f;

// One head row [D]: normalised (if w) then rotated; scale gets |a c| + |b s| + (|a| + |b|) u-free
// magnitudes for the budget.
void ref_head(const float* row, const std::vector<float>* w, int32_t pos, int64_t D, double* out, double* scale) {
  std::vector<double> x(row, row + D);
  if (w) {
    const std::vector<double> normed = ref_rmsnorm(x, widen(*w), 1, D, kEps).out;
    x = normed;
  }
  const std::vector<double> rotated = ref_rope(x, {pos}, 1, 1, D, D, kTheta, 1.0);
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float inv_freq = 1.0f / std::pow(kTheta, static_cast<float>(2 * i) / static_cast<float>(D));
    const double a = static_cast<double>(static_cast<float>(pos) * inv_freq);
    const double c = std::fabs(std::cos(a)), s = std::fabs(std::sin(a));
    const double lo = std::fabs(x[i]), hi = std::fabs(x[i + half]);
    out[i] = rotated[i];
    out[i + half] = rotated[i + half];
    scale[i] = lo * c + hi * s;
    scale[i + half] = hi * c + lo * s;
  }
}

QkvWant reference(const QkvShape& s, const std::vector<float>& qkv, const std::vector<float>& qn,
                  const std::vector<float>& kn) {
  const int64_t D = s.D, qd = s.H * D, kvd = s.KVH * D, width = qd + 2 * kvd;
  QkvWant want;
  want.q.assign(static_cast<size_t>(s.T * qd), 0.0);
  want.q_scale.assign(want.q.size(), 0.0);
  want.k.assign(static_cast<size_t>(s.cache_rows * kvd), NAN);
  want.k_scale.assign(want.k.size(), 0.0);
  want.v.assign(want.k.size(), NAN);
  for (int64_t t = 0; t < s.T; ++t) {
    const float* row = qkv.data() + t * width;
    for (int64_t h = 0; h < s.H; ++h)
      ref_head(row + h * D, s.norm ? &qn : nullptr, s.positions[t], D, &want.q[(t * s.H + h) * D],
               &want.q_scale[(t * s.H + h) * D]);
    if (s.slots[t] < 0) continue;
    const int64_t at = static_cast<int64_t>(s.slots[t]) * kvd;
    for (int64_t h = 0; h < s.KVH; ++h)
      ref_head(row + qd + h * D, s.norm ? &kn : nullptr, s.positions[t], D, &want.k[at + h * D],
               &want.k_scale[at + h * D]);
    for (int64_t i = 0; i < kvd; ++i) want.v[at + i] = row[qd + kvd + i];
  }
  return want;
}

// Rows never written must keep the poison; the others within budget (NaN `want` marks them).
void expect_rows(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& scale,
                 int64_t D, bool cuda, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double u16 = unit_roundoff(Precision::BF16), u32 = unit_roundoff(Precision::F32);
  double worst = 0;
  size_t bad_poison = 0, nan = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      bad_poison += !std::isnan(got[i]);
      continue;
    }
    if (std::isnan(got[i])) {
      ++nan;
      continue;
    }
    const double budget = cuda ? 1.01 * (u16 * std::fabs(want[i]) + u16 * scale[i] + 8 * u32 * scale[i]) + 1e-30
                               : reduction_rtol(Precision::F32, D, kF32Factor) * (std::fabs(want[i]) + scale[i]) + 1e-30;
    worst = std::max(worst, std::fabs(got[i] - want[i]) / budget);
  }
  EXPECT_EQ(bad_poison, 0u) << what << ": rows of padding (slot -1) or never named were written";
  EXPECT_EQ(nan, 0u) << what << ": " << nan << " NaN (unwritten?)";
  EXPECT_LE(worst, 1.0) << what << ": worst element " << worst << "x its budget";
  worst_budget_ratio() = std::max(worst_budget_ratio(), worst);
}

void expect_exact_v(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i)
    wrong += std::isnan(want[i]) ? !std::isnan(got[i]) : got[i] != static_cast<float>(want[i]);
  EXPECT_EQ(wrong, 0u) << what << ": v is a copy";
}

struct QkvInputs {
  std::vector<float> qkv, qn, kn;
};
QkvInputs make_inputs(Rng& rng, const QkvShape& s, Precision p) {
  return {rng.normal(s.T * (s.H + 2 * s.KVH) * s.D, 1.5, 0.0, p), rng.uniform(s.D, 0.5, 1.5, p),
          rng.uniform(s.D, 0.5, 1.5, p)};
}

void run_cpu() {
  for (const QkvShape& s : kShapes) {
    Rng rng(42);
    SCOPED_TRACE(describe(s, rng.seed()));
    const QkvInputs in = make_inputs(rng, s, Precision::F32);
    const QkvWant want = reference(s, in.qkv, in.qn, in.kn);
    const int64_t kvd = s.KVH * s.D;
    std::vector<float> q(static_cast<size_t>(s.T * s.H * s.D), NAN), k(static_cast<size_t>(s.cache_rows * kvd), NAN),
        v(k.size(), NAN);
    DecodeQkvShape shape{s.H, s.KVH, s.D, kEps, kTheta};
    decode_qkv_cpu(q.data(), k.data(), v.data(), in.qkv.data(), s.norm ? in.qn.data() : nullptr,
                   s.norm ? in.kn.data() : nullptr, s.positions.data(), s.slots.data(), s.T, shape);
    expect_rows(q, want.q, want.q_scale, s.D, false, "q");
    expect_rows(k, want.k, want.k_scale, s.D, false, "k cache");
    expect_exact_v(v, want.v, "v cache");
  }
}

void run_cuda() {
  uint64_t seed = fresh_seed();
  for (const QkvShape& s : kShapes) {
    Rng rng(seed++);
    SCOPED_TRACE(describe(s, rng.seed()));
    const QkvInputs in = make_inputs(rng, s, Precision::BF16);
    const QkvWant want = reference(s, in.qkv, in.qn, in.kn);
    const int64_t kvd = s.KVH * s.D;
    Tensor qkv = gpu(in.qkv, DType::BF16), qn = gpu(in.qn, DType::BF16), kn = gpu(in.kn, DType::BF16);
    Tensor q = poisoned(s.T * s.H * s.D, DType::BF16), k = poisoned(s.cache_rows * kvd, DType::BF16),
           v = poisoned(s.cache_rows * kvd, DType::BF16);
    Tensor pos = gpu_ints(s.positions), slots = gpu_ints(s.slots);
    DecodeQkvShape shape{s.H, s.KVH, s.D, kEps, kTheta};
    decode_qkv_cuda(bf16_ptr(q), bf16_ptr(k), bf16_ptr(v), bf16_ptr(qkv), s.norm ? bf16_ptr(qn) : nullptr,
                    s.norm ? bf16_ptr(kn) : nullptr, pos.data_as<int32_t>(), slots.data_as<int32_t>(), s.T, shape,
                    default_stream());
    expect_rows(to_floats(q), want.q, want.q_scale, s.D, true, "q");
    expect_rows(to_floats(k), want.k, want.k_scale, s.D, true, "k cache");
    expect_exact_v(to_floats(v), want.v, "v cache");
  }
}

}  // namespace

OpCase decode_qkv_case() { return {"decode_qkv", run_cpu, run_cuda}; }

}  // namespace sqlrl::testing
