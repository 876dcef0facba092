// CUDA RMSNorm and RoPE against the CPU path on the same bf16-rounded random inputs.
// Tolerances: the CUDA outputs are bf16 and are compared with the CPU's unrounded f32, so each
// element carries one bf16 rounding: half an ulp, <= 2^-8 relative (just above a power of two),
// plus the f32 differences before it (summation order, FMA contraction, device sincosf/expf within
// 2 ulp: ~1e-6 relative), hence rtol 1.01 * 2^-8. atol covers outputs that are small after
// cancellation, where those f32 differences (~1e-6 of the operand scale) dominate.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace sqlrl {
namespace {

using namespace sqlrl::testing;

constexpr double kBf16Rtol = 1.01 / 256;

struct NormCase {
  int64_t rows, dim;
};

void check_rmsnorm(NormCase c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "rows " << c.rows << " dim " << c.dim << " seed " << seed);
  Rng rng(seed);
  const size_t n = static_cast<size_t>(c.rows * c.dim);
  const float eps = 1e-6f;
  auto x = round_bf16(rng.uniform(n, -2.0f, 2.0f));
  auto w = round_bf16(rng.uniform(static_cast<size_t>(c.dim), 0.5f, 1.5f));
  auto dout = round_bf16(rng.uniform(n, -1.0f, 1.0f));
  auto dx0 = round_bf16(rng.uniform(n, -0.5f, 0.5f));  // dx accumulates: start from non-zero values
  auto dw0 = rng.uniform(static_cast<size_t>(c.dim), -1.0f, 1.0f);

  std::vector<float> out_ref(n), rstd_ref(static_cast<size_t>(c.rows)), dx_ref = dx0, dw_ref = dw0;
  rmsnorm_forward_cpu(out_ref.data(), rstd_ref.data(), x.data(), w.data(), c.rows, c.dim, eps);
  rmsnorm_backward_cpu(dx_ref.data(), dw_ref.data(), dout.data(), x.data(), w.data(), rstd_ref.data(), c.rows, c.dim);

  Tensor gx = gpu(x, DType::BF16), gw = gpu(w, DType::BF16), gdout = gpu(dout, DType::BF16);
  Tensor gout = poisoned(static_cast<int64_t>(n), DType::BF16), grstd = poisoned(c.rows, DType::F32);
  rmsnorm_forward_cuda(bf16_ptr(gout), f32_ptr(grstd), bf16_ptr(gx), bf16_ptr(gw), c.rows, c.dim, eps,
                       default_stream());
  expect_close(to_floats(gout), out_ref, 1e-5, kBf16Rtol, "rmsnorm out");
  // rstd: f32 on both sides; the CPU's sequential sum of up to 8192 squares drifts by about
  // sqrt(dim) 2^-24 ~ 5e-6 relative (the GPU's tree far less), halved by the square root.
  expect_close(to_floats(grstd), rstd_ref, 0.0, 2e-5, "rmsnorm rstd");
  // rstd is optional (inference): the output must not change without it.
  Tensor gout2 = poisoned(static_cast<int64_t>(n), DType::BF16);
  rmsnorm_forward_cuda(bf16_ptr(gout2), nullptr, bf16_ptr(gx), bf16_ptr(gw), c.rows, c.dim, eps, default_stream());
  EXPECT_EQ(to_floats(gout2), to_floats(gout)) << "forward without rstd differs";

  // The backward uses the CPU's rstd so that the two paths differ only in the backward itself.
  Tensor grstd_ref = gpu(rstd_ref, DType::F32);
  Tensor gdx = gpu(dx0, DType::BF16), gdw = gpu(dw0, DType::F32);
  size_t ws_bytes = rmsnorm_backward_workspace_bytes(c.rows, c.dim);
  Tensor ws = gpu_bytes(ws_bytes);
  rmsnorm_backward_cuda(bf16_ptr(gdx), f32_ptr(gdw), bf16_ptr(gdout), bf16_ptr(gx), bf16_ptr(gw), f32_ptr(grstd_ref),
                        c.rows, c.dim, ws.data(), ws_bytes, default_stream());
  expect_close(to_floats(gdx), dx_ref, 1e-5, kBf16Rtol, "rmsnorm dx");
  // dweight against float64: an f32 sum of n terms in any order is within (n - 1) 2^-24 sum|terms|
  // of the exact sum (recursive summation bound); n = rows + 1 here, plus the product roundings.
  std::vector<double> dw_exact(dw0.begin(), dw0.end()), dw_abs(static_cast<size_t>(c.dim), 0.0);
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t i = 0; i < c.dim; ++i) {
      double term = double{dout[r * c.dim + i]} * x[r * c.dim + i] * rstd_ref[r];
      dw_exact[i] += term;
      dw_abs[i] += std::fabs(term);
    }
  std::vector<float> dw_got = to_floats(gdw);
  for (int64_t i = 0; i < c.dim; ++i)
    ASSERT_NEAR(dw_got[i], dw_exact[i], (c.rows + 4) * 0x1p-24 * (dw_abs[i] + std::fabs(dw0[i])) + 1e-7)
        << "dweight[" << i << "]";

  // Bitwise repeatable weight gradient (fixed reduction order, no atomics).
  Tensor gdw2 = gpu(dw0, DType::F32), gdx2 = gpu(dx0, DType::BF16);
  rmsnorm_backward_cuda(bf16_ptr(gdx2), f32_ptr(gdw2), bf16_ptr(gdout), bf16_ptr(gx), bf16_ptr(gw),
                        f32_ptr(grstd_ref), c.rows, c.dim, ws.data(), ws_bytes, default_stream());
  std::vector<float> dw_again = to_floats(gdw2);
  EXPECT_EQ(std::memcmp(dw_got.data(), dw_again.data(), dw_got.size() * sizeof(float)), 0) << "dweight not repeatable";
}

TEST(CudaRmsNorm, MatchesCpuOnOddShapes) {
  SQLRL_REQUIRE_CUDA();
  uint64_t seed = fresh_seed();
  // Vectorised path (dim % 8 == 0) at every team width, the scalar path at odd dims; rows 1, 17, 1000.
  for (NormCase c : {NormCase{1, 64}, NormCase{17, 128}, NormCase{1000, 128}, NormCase{17, 2560},
                     NormCase{3, 8192}, NormCase{1000, 1000}, NormCase{1, 17}, NormCase{17, 100},
                     NormCase{1000, 33}, NormCase{5, 3001}})
    check_rmsnorm(c, seed++);
}

TEST(CudaRmsNorm, QkNormIsRowsOfHeadDim) {
  SQLRL_REQUIRE_CUDA();
  // Qwen3's q_norm: [tokens, heads, head_dim] normalised per head = rows tokens*heads, dim head_dim.
  check_rmsnorm({37 * 32, 128}, fresh_seed());
}

struct RopeCase {
  int64_t tokens, heads, head_dim, extra;  // extra: elements of other heads between tokens (fused qkv)
};

void check_rope(RopeCase c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "tokens " << c.tokens << " heads " << c.heads << " head_dim " << c.head_dim
                                    << " extra " << c.extra << " seed " << seed);
  Rng rng(seed);
  const float theta = 1000000.0f;  // Qwen3's rope_theta
  const int64_t stride = c.heads * c.head_dim + c.extra;
  const size_t n = static_cast<size_t>(c.tokens * stride);
  auto buffer = round_bf16(rng.uniform(n, -2.0f, 2.0f));
  // Positions up to 40,000: large angles are where f32 angle rounding would show a mismatch.
  auto positions = rng.ints(static_cast<size_t>(c.tokens), 0, 40000);
  if (c.tokens > 1) positions[1] = 0;

  for (int direction = 0; direction < 2; ++direction) {
    // CPU reference on the packed heads of each token; the extra columns must stay untouched.
    std::vector<float> packed(static_cast<size_t>(c.tokens * c.heads * c.head_dim));
    for (int64_t t = 0; t < c.tokens; ++t)
      std::copy_n(buffer.begin() + t * stride, c.heads * c.head_dim, packed.begin() + t * c.heads * c.head_dim);
    if (direction == 0)
      rope_forward_cpu(packed.data(), positions.data(), c.tokens, c.heads, c.head_dim, theta);
    else
      rope_backward_cpu(packed.data(), positions.data(), c.tokens, c.heads, c.head_dim, theta);
    std::vector<float> want = buffer;
    for (int64_t t = 0; t < c.tokens; ++t)
      std::copy_n(packed.begin() + t * c.heads * c.head_dim, c.heads * c.head_dim, want.begin() + t * stride);

    Tensor gx = gpu(buffer, DType::BF16);
    Tensor gpos = gpu_ints(positions);
    if (direction == 0)
      rope_forward_cuda(bf16_ptr(gx), gpos.data_as<int32_t>(), c.tokens, c.heads, c.head_dim, stride, theta,
                        default_stream());
    else
      rope_backward_cuda(bf16_ptr(gx), gpos.data_as<int32_t>(), c.tokens, c.heads, c.head_dim, stride, theta,
                         default_stream());
    // In place, so poisoning cannot apply; every rotated element differs from its input for
    // non-zero angles, and the untouched extra columns must equal the input exactly.
    expect_close(to_floats(gx), want, 1e-5, kBf16Rtol, direction == 0 ? "rope forward" : "rope backward");
  }
}

TEST(CudaRope, MatchesCpuOnOddShapes) {
  SQLRL_REQUIRE_CUDA();
  uint64_t seed = fresh_seed();
  for (RopeCase c : {RopeCase{1, 2, 64, 0}, RopeCase{17, 3, 128, 0}, RopeCase{1000, 2, 64, 0},
                     RopeCase{17, 4, 128, 2 * 128}, RopeCase{17, 1, 6, 0}, RopeCase{5, 2, 10, 3}})
    check_rope(c, seed++);
}

TEST(CudaRope, BackwardUndoesForward) {
  SQLRL_REQUIRE_CUDA();
  Rng rng(fresh_seed());
  const int64_t tokens = 33, heads = 2, dim = 128;
  auto x = round_bf16(rng.uniform(static_cast<size_t>(tokens * heads * dim), -1.0f, 1.0f));
  auto positions = rng.ints(static_cast<size_t>(tokens), 0, 4096);
  Tensor gx = gpu(x, DType::BF16), gpos = gpu_ints(positions);
  rope_forward_cuda(bf16_ptr(gx), gpos.data_as<int32_t>(), tokens, heads, dim, heads * dim, 1e6f, default_stream());
  rope_backward_cuda(bf16_ptr(gx), gpos.data_as<int32_t>(), tokens, heads, dim, heads * dim, 1e6f, default_stream());
  // The rotation is orthogonal, so each pass's bf16 rounding (<= 2^-9 of a pair's magnitude, here
  // <= sqrt(2)) moves an element by at most ~2^-8.5: two passes stay under 2^-7 absolute.
  expect_close(to_floats(gx), x, 0x1p-7, 0.0, "rope backward(forward(x))");
}

}  // namespace
}  // namespace sqlrl
