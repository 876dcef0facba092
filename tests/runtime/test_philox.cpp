// Philox4x32-10 against the Random123 known-answer vectors (kat_vectors), and host/device agreement.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <vector>

#include "runtime/philox.h"
#include "runtime/random.h"
#include "runtime/random_math.h"
#include "tests/test_util.h"

namespace sqlrl {
namespace {

struct Kat {
  Philox4 counter;
  uint32_t key0, key1;
  Philox4 expected;
};

TEST(Philox, Random123KnownAnswers) {
  // Lines "philox4x32 10 CTR[4] KEY[2] EXPECTED[4]" of Random123's kat_vectors.
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& kat : kats) {
    Philox4 got = philox4x32_10(kat.counter, kat.key0, kat.key1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], kat.expected.v[i]) << "word " << i;
  }
}

TEST(Philox, DrawIsAPureFunctionOfSeedStreamIndex) {
  Philox4 a = philox_draw(42, 7, 1000), b = philox_draw(42, 7, 1000), c = philox_draw(42, 8, 1000),
          d = philox_draw(43, 7, 1000);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.v[i], b.v[i]);
  EXPECT_NE(a.v[0], c.v[0]);
  EXPECT_NE(a.v[0], d.v[0]);
  // The 64-bit seed's high half matters too.
  EXPECT_NE(philox_draw(1, 0, 0).v[0], philox_draw(1 + (uint64_t{1} << 32), 0, 0).v[0]);
}

TEST(Philox, UniformRangeAndMoments) {
  Tensor t = empty({100000}, DType::F32);
  fill_uniform(t, 123, 0, -2.0f, 6.0f);
  double sum = 0, sum_sq = 0;
  for (float v : to_floats(t)) {
    ASSERT_GE(v, -2.0f);
    ASSERT_LT(v, 6.0f);
    sum += v;
    sum_sq += v * v;
  }
  double mean = sum / 1e5, var = sum_sq / 1e5 - mean * mean;
  // Uniform(-2, 6): mean 2, variance 64/12; 5-sigma bounds for 1e5 samples.
  EXPECT_NEAR(mean, 2.0, 5 * std::sqrt(64.0 / 12 / 1e5));
  EXPECT_NEAR(var, 64.0 / 12, 0.05 * 64.0 / 12);
  EXPECT_EQ(uniform_from_bits(0), 0.0f);
  EXPECT_LT(uniform_from_bits(0xffffffffu), 1.0f);
  EXPECT_EQ(uniform_open_from_bits(0xffffffffu), 1.0f);
  EXPECT_GT(uniform_open_from_bits(0), 0.0f);
}

TEST(Philox, NormalMoments) {
  Tensor t = empty({100001}, DType::F32);  // odd size: the last draw is partly used
  fill_normal(t, 9, 3, 1.0f, 2.0f);
  double sum = 0, sum_sq = 0;
  for (float v : to_floats(t)) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sum_sq += v * v;
  }
  double n = 100001, mean = sum / n, var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 1.0, 5 * 2.0 / std::sqrt(n));
  EXPECT_NEAR(var, 4.0, 0.05 * 4.0);
}

TEST(Philox, FillsAreIndependentOfTensorSize) {
  // Element i depends only on (seed, stream, i): a prefix of a longer fill is the shorter fill.
  Tensor small = empty({13}, DType::F32), large = empty({1000}, DType::F32);
  fill_uniform(small, 5, 1);
  fill_uniform(large, 5, 1);
  std::vector<float> s = to_floats(small), l = to_floats(large);
  for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(s[i], l[i]);
}

// fill_normal_range (and fill_normal, which runs it on the pool) gives every element the bits of
// normal_element, the per-element definition the device fill shares, whatever pieces the range is
// cut into: heads and tails that are not whole blocks of four, pieces of one element, a piece
// inside one block; bf16 and f16 are those bits rounded. Catches a block path that differs from
// the element formula by a rounding (llm_sqlrl init's checkpoints would change with the build),
// and a piece that starts off a block boundary but reads its draws from the block's start
// (checkpoints would change with the thread count).
TEST(Philox, NormalRangeIsTheElementFormulaPieceByPiece) {
  const uint64_t seed = 0x1234'5678'9abcull, stream = 5, n = 40'003;
  const float mean = 0.25f, stddev = 0.02f;
  std::vector<float> want(n);
  for (uint64_t i = 0; i < n; ++i) want[i] = normal_element(seed, stream, i, mean, stddev);

  Tensor whole = empty({static_cast<int64_t>(n)}, DType::F32);
  fill_normal(whole, seed, stream, mean, stddev);
  EXPECT_EQ(std::memcmp(whole.data(), want.data(), n * 4), 0) << "fill_normal";

  // Cuts at every residue mod 4, with pieces of 1, 2, 3 and 5 elements among long ones.
  const uint64_t cuts[] = {0, 1, 3, 6, 7, 12, 13, 18, 4099, 4102, 20'001, 20'002, 39'999, n};
  std::vector<float> f32(n, NAN);
  std::vector<uint16_t> bf16(n), f16(n);
  for (size_t k = 0; k + 1 < std::size(cuts); ++k) {
    const uint64_t a = cuts[k], count = cuts[k + 1] - a;
    fill_normal_range(f32.data() + a, DType::F32, a, count, seed, stream, mean, stddev);
    fill_normal_range(bf16.data() + a, DType::BF16, a, count, seed, stream, mean, stddev);
    fill_normal_range(f16.data() + a, DType::F16, a, count, seed, stream, mean, stddev);
  }
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(f32_bits(f32[i]), f32_bits(want[i])) << "element " << i;
    ASSERT_EQ(bf16[i], f32_to_bf16_bits(want[i])) << "element " << i;
    ASSERT_EQ(f16[i], f32_to_f16_bits(want[i])) << "element " << i;
  }
  EXPECT_THROW(fill_normal_range(f32.data(), DType::I32, 0, 4, seed, stream, mean, stddev), Error);
}

TEST(PhiloxCuda, DeviceDrawsEqualHostDraws) {
  SQLRL_REQUIRE_CUDA();
  const size_t n = 100003;
  Tensor bits_host = empty({static_cast<int64_t>(n)}, DType::I32);
  Tensor bits_dev = empty({static_cast<int64_t>(n)}, DType::I32, cuda_device(0));
  fill_random_bits(bits_host, 0xDEADBEEFCAFEull, 77);
  fill_random_bits(bits_dev, 0xDEADBEEFCAFEull, 77);
  Tensor back = to_device(bits_dev, cpu_device());
  ASSERT_EQ(std::memcmp(back.data(), bits_host.data(), n * 4), 0) << "raw Philox words differ";

  Tensor u_host = empty({static_cast<int64_t>(n)}, DType::F32), u_dev = empty({static_cast<int64_t>(n)}, DType::F32, cuda_device(0));
  fill_uniform(u_host, 11, 2, -0.1f, 0.3f);
  fill_uniform(u_dev, 11, 2, -0.1f, 0.3f);
  back = to_device(u_dev, cpu_device());
  ASSERT_EQ(std::memcmp(back.data(), u_host.data(), n * 4), 0) << "uniform fills differ";

  // Normals go through logf/sincosf, whose device versions are within 2 ulp of the host's.
  Tensor n_host = empty({static_cast<int64_t>(n)}, DType::F32), n_dev = empty({static_cast<int64_t>(n)}, DType::F32, cuda_device(0));
  fill_normal(n_host, 11, 4);
  fill_normal(n_dev, 11, 4);
  std::vector<float> h = to_floats(n_host), d = to_floats(n_dev);
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(d[i], h[i], 1e-5 * (1 + std::fabs(h[i]))) << "element " << i;
}

}  // namespace
}  // namespace sqlrl
