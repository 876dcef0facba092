// rope (kernels/rope.h): the rotate-half rotation in place, forward and backward (its
// transpose), on the CPU and on CUDA (which also takes a token stride: the q or k part of a fused
// qkv buffer, whose other columns must stay untouched).
//
// Shapes: the registry's varlen case (three sequences' positions, theta 500, head_dim 8, checked
// by finite differences), then Qwen3's theta 1e6 at head_dim 64 / 128 and odd small head_dims
// with random positions up to 40,000 (large angles: where f32 angle rounding would show a
// mismatch; the reference rounds the angle to f32 as the op defines it).
//
// Tolerances.
//  CPU (f32): each output is a*cos - b*sin: f32_tol with K = 2.
//  CUDA: bf16 outputs, one rounding of an f32 result: rtol 1.01 u_bf16 (u_bf16 = 2^-8, plus
//    device sincosf within 2 ulp: ~1e-6 relative), atol 1e-5 for outputs small after
//    cancellation. backward(forward(x)): the rotation is orthogonal, so each pass's bf16 rounding
//    (<= u_bf16 / 2 = 2^-9 of a pair's magnitude, here <= sqrt(2)) moves an element by at most
//    ~2^-8.5: two passes stay under 2^-7 absolute.
#include "kernels/rope.h"
#include "tests/kernels/cases.h"

namespace sqlrl::testing {
namespace {

struct RopeShape {
  int64_t tokens, heads, head_dim, extra;  // extra: columns of other heads after each token's heads
  float theta;
  std::vector<int32_t> positions;  // empty: random in [0, 40000], positions[1] = 0
  bool finite_differences = false;
};

const std::vector<RopeShape> kShapes = {
    {13, 3, 8, 0, 500.0f, {0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 5, 6}, true},
    {1, 2, 64, 0, 1e6f, {}},
    {17, 3, 128, 0, 1e6f, {}},
    {1000, 2, 64, 0, 1e6f, {}},
    {17, 4, 128, 2 * 128, 1e6f, {}},  // q of a fused qkv buffer: k and v columns follow
    {17, 1, 6, 0, 1e6f, {}},
    {5, 2, 10, 3, 1e6f, {}},
};

struct RopeInputs {
  std::vector<float> buffer;  // [tokens, stride]
  std::vector<int32_t> positions;
  int64_t stride;
};

RopeInputs make_inputs(Rng& rng, const RopeShape& s, Precision p) {
  RopeInputs in;
  in.stride = s.heads * s.head_dim + s.extra;
  in.buffer = rng.uniform(static_cast<size_t>(s.tokens * in.stride), -2.0, 2.0, p);
  in.positions = s.positions;
  if (in.positions.empty()) {
    in.positions = rng.ints(static_cast<size_t>(s.tokens), 0, 40000);
    if (s.tokens > 1) in.positions[1] = 0;
  }
  return in;
}

std::string describe(const RopeShape& s, const Rng& rng) {
  return "tokens " + std::to_string(s.tokens) + " heads " + std::to_string(s.heads) + " head_dim " +
         std::to_string(s.head_dim) + " extra " + std::to_string(s.extra) + " seed " + std::to_string(rng.seed());
}

void run_cpu() {
  for (const RopeShape& s : kShapes) {
    Rng rng(42);
    SCOPED_TRACE(describe(s, rng));
    const RopeInputs in = make_inputs(rng, s, Precision::F32);
    const int64_t width = s.heads * s.head_dim;
    for (double sign : {1.0, -1.0}) {
      // The CPU kernel takes packed heads: pack each token's heads, rotate, scatter back.
      std::vector<float> packed(static_cast<size_t>(s.tokens * width)), got = in.buffer;
      for (int64_t t = 0; t < s.tokens; ++t)
        std::copy_n(in.buffer.begin() + t * in.stride, width, packed.begin() + t * width);
      if (sign > 0)
        rope_forward_cpu(packed.data(), in.positions.data(), s.tokens, s.heads, s.head_dim, s.theta);
      else
        rope_backward_cpu(packed.data(), in.positions.data(), s.tokens, s.heads, s.head_dim, s.theta);
      for (int64_t t = 0; t < s.tokens; ++t)
        std::copy_n(packed.begin() + t * width, width, got.begin() + t * in.stride);
      const std::vector<double> want =
          ref_rope(widen(in.buffer), in.positions, s.tokens, s.heads, s.head_dim, in.stride, s.theta, sign);
      expect_close_f32(got, want, 2, sign > 0 ? "forward" : "backward");
    }
    if (s.finite_differences) {  // the backward is the forward's transpose: d sum(rope(x) dout) / dx
      const std::vector<double> dout = widen(rng.normal(in.buffer.size()));
      const std::vector<double> analytic =
          ref_rope(dout, in.positions, s.tokens, s.heads, s.head_dim, in.stride, s.theta, -1.0);
      expect_matches_finite_differences(analytic,
                                        finite_differences(widen(in.buffer),
                                                           [&](const std::vector<double>& x) {
                                                             return dot(ref_rope(x, in.positions, s.tokens, s.heads,
                                                                                 s.head_dim, in.stride, s.theta, 1.0),
                                                                        dout);
                                                           }),
                                        "float64 backward");
    }
  }
}

constexpr double kBf16Rtol = 1.01 * unit_roundoff(Precision::BF16);

void run_cuda() {
  uint64_t seed = fresh_seed();
  for (const RopeShape& s : kShapes) {
    Rng rng(seed++);
    SCOPED_TRACE(describe(s, rng));
    const RopeInputs in = make_inputs(rng, s, Precision::BF16);
    Tensor gpos = gpu_ints(in.positions);
    for (double sign : {1.0, -1.0}) {
      // In place, so poisoning cannot apply; every rotated element differs from its input for
      // non-zero angles, and the untouched extra columns must equal the input exactly.
      Tensor gx = gpu(in.buffer, DType::BF16);
      if (sign > 0)
        rope_forward_cuda(bf16_ptr(gx), gpos.data_as<int32_t>(), s.tokens, s.heads, s.head_dim, in.stride, s.theta,
                          default_stream());
      else
        rope_backward_cuda(bf16_ptr(gx), gpos.data_as<int32_t>(), s.tokens, s.heads, s.head_dim, in.stride, s.theta,
                           default_stream());
      const std::vector<double> want =
          ref_rope(widen(in.buffer), in.positions, s.tokens, s.heads, s.head_dim, in.stride, s.theta, sign);
      expect_close(to_floats(gx), want, {1e-5, kBf16Rtol}, sign > 0 ? "forward" : "backward");
    }
  }

  // backward(forward(x)) = x up to two bf16 roundings.
  Rng rng(seed);
  SCOPED_TRACE("backward undoes forward, seed " + std::to_string(rng.seed()));
  const int64_t tokens = 33, heads = 2, dim = 128;
  const std::vector<float> x = rng.uniform(static_cast<size_t>(tokens * heads * dim), -1.0, 1.0, Precision::BF16);
  const std::vector<int32_t> positions = rng.ints(static_cast<size_t>(tokens), 0, 4096);
  Tensor gx = gpu(x, DType::BF16), gpos = gpu_ints(positions);
  rope_forward_cuda(bf16_ptr(gx), gpos.data_as<int32_t>(), tokens, heads, dim, heads * dim, 1e6f, default_stream());
  rope_backward_cuda(bf16_ptr(gx), gpos.data_as<int32_t>(), tokens, heads, dim, heads * dim, 1e6f, default_stream());
  expect_close(to_floats(gx), widen(x), {0x1p-7, 0.0}, "backward(forward(x))");
}

}  // namespace

OpCase rope_case() { return {"rope", run_cpu, run_cuda}; }

}  // namespace sqlrl::testing
