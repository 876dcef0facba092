// bf16/f16 conversions against hand-computed bit patterns (each case says why), plus exhaustive
// round trips over all 65,536 half-width patterns.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/dtype.h"

namespace sqlrl {
namespace {

uint16_t to_bf16(uint32_t f32) { return f32_to_bf16_bits(f32_from_bits(f32)); }
uint16_t to_f16(uint32_t f32) { return f32_to_f16_bits(f32_from_bits(f32)); }

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(to_bf16(0x3F800000u), 0x3F80);  // 1.0 exactly representable
  EXPECT_EQ(to_bf16(0x3F808000u), 0x3F80);  // 1 + 2^-8: exact tie, 0x3F80 is even -> down
  EXPECT_EQ(to_bf16(0x3F818000u), 0x3F82);  // tie with odd 0x3F81 -> up to even 0x3F82
  EXPECT_EQ(to_bf16(0x3F808001u), 0x3F81);  // just above the tie -> up
  EXPECT_EQ(to_bf16(0x3F807FFFu), 0x3F80);  // just below the tie -> down
  EXPECT_EQ(to_bf16(0xBF818000u), 0xBF82);  // sign does not change the rounding
  EXPECT_EQ(to_bf16(0x7F7FFFFFu), 0x7F80);  // FLT_MAX rounds past bf16's max to +Inf
}

TEST(Bf16, KeepsInfNanAndSubnormals) {
  EXPECT_EQ(to_bf16(0x7F800000u), 0x7F80);  // +Inf
  EXPECT_EQ(to_bf16(0xFF800000u), 0xFF80);  // -Inf
  EXPECT_EQ(to_bf16(0x7FC00000u), 0x7FC0);  // quiet NaN
  EXPECT_EQ(to_bf16(0x7F800001u), 0x7FC0);  // signalling NaN whose payload sits in the dropped bits: still NaN, not Inf
  EXPECT_EQ(to_bf16(0xFFC00001u), 0xFFC0);  // negative NaN keeps its sign
  EXPECT_EQ(to_bf16(0x00000001u), 0x0000);  // smallest f32 subnormal rounds to +0
  EXPECT_EQ(to_bf16(0x00008000u), 0x0000);  // tie, even -> 0
  EXPECT_EQ(to_bf16(0x00018000u), 0x0002);  // tie, odd 0x0001 -> 0x0002
  EXPECT_EQ(to_bf16(0x007FFFFFu), 0x0080);  // largest subnormal rounds up to the smallest normal
  EXPECT_EQ(f32_bits(bf16_bits_to_f32(0x0001)), 0x00010000u);  // bf16 subnormal widens exactly
  EXPECT_EQ(f32_bits(bf16_bits_to_f32(0x8000)), 0x80000000u);  // -0 stays -0
}

TEST(F16, RoundsToNearestEven) {
  EXPECT_EQ(to_f16(f32_bits(1.0f)), 0x3C00);
  EXPECT_EQ(to_f16(f32_bits(65504.0f)), 0x7BFF);               // f16 max
  EXPECT_EQ(to_f16(f32_bits(65519.0f)), 0x7BFF);               // below the midpoint to 65536
  EXPECT_EQ(to_f16(f32_bits(65520.0f)), 0x7C00);               // midpoint, 0x7BFF is odd -> Inf
  EXPECT_EQ(to_f16(f32_bits(1.0f + 0x1p-11f)), 0x3C00);        // tie, 0x3C00 even -> down
  EXPECT_EQ(to_f16(f32_bits(1.0f + 3 * 0x1p-11f)), 0x3C02);    // tie, 0x3C01 odd -> up
  EXPECT_EQ(to_f16(f32_bits(-2.0f)), 0xC000);
}

TEST(F16, SubnormalsBothWays) {
  EXPECT_EQ(to_f16(f32_bits(0x1p-24f)), 0x0001);         // smallest f16 subnormal
  EXPECT_EQ(to_f16(f32_bits(0x1p-25f)), 0x0000);         // half of it: tie, even -> 0
  EXPECT_EQ(to_f16(f32_bits(1.5f * 0x1p-25f)), 0x0001);  // above the tie -> 1
  EXPECT_EQ(to_f16(f32_bits(3.0f * 0x1p-25f)), 0x0002);  // 1.5 units: tie, odd 1 -> 2
  EXPECT_EQ(to_f16(f32_bits(0x1p-14f)), 0x0400);         // smallest normal
  EXPECT_EQ(to_f16(f32_bits(1023.5f * 0x1p-24f)), 0x0400);  // tie at the top of the subnormals: 1023 odd -> 1024 = min normal
  EXPECT_EQ(to_f16(f32_bits(0x1p-30f)), 0x0000);         // far below: zero
  EXPECT_EQ(f32_bits(f16_bits_to_f32(0x0001)), 0x33800000u);  // 2^-24
  EXPECT_EQ(f32_bits(f16_bits_to_f32(0x03FF)), 0x387FC000u);  // 1023 * 2^-24
}

TEST(F16, KeepsInfNan) {
  EXPECT_EQ(to_f16(0x7F800000u), 0x7C00);
  EXPECT_EQ(to_f16(0xFF800000u), 0xFC00);
  EXPECT_EQ(to_f16(0x7FC00000u), 0x7E00);
  EXPECT_EQ(to_f16(0x7F800001u), 0x7E00);  // signalling NaN stays NaN
  EXPECT_EQ(f32_bits(f16_bits_to_f32(0x7C00)), 0x7F800000u);
  EXPECT_EQ(f32_bits(f16_bits_to_f32(0xFC00)), 0xFF800000u);
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(0x7E00)));
}

// Every half-width value widens exactly and narrows back to itself (NaNs to a NaN).
TEST(Bf16, ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float wide = bf16_bits_to_f32(static_cast<uint16_t>(h));
    uint16_t back = f32_to_bf16_bits(wide);
    if (std::isnan(wide)) {
      ASSERT_TRUE(std::isnan(bf16_bits_to_f32(back))) << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(F16, ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float wide = f16_bits_to_f32(static_cast<uint16_t>(h));
    uint16_t back = f32_to_f16_bits(wide);
    if (std::isnan(wide)) {
      ASSERT_TRUE(std::isnan(f16_bits_to_f32(back))) << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
      // And the widened value is exactly the f16 value: check against a double computation.
      uint32_t e = (h >> 10) & 31, m = h & 1023;
      double expect = e == 0 ? std::ldexp(m, -24) : e == 31 ? INFINITY : std::ldexp(1024 + m, static_cast<int>(e) - 25);
      ASSERT_EQ(static_cast<double>(std::fabs(wide)), expect) << std::hex << h;
    }
  }
}

// Narrowing picks the nearest representable f16 (ties to even): on a sweep of f32 inputs the
// result is at least as close, in exact double arithmetic, as both of its neighbours.
TEST(F16, MatchesNearestEvenOnSweep) {
  for (uint32_t bits = 0x33000000u; bits < 0x477FF000u; bits += 0x1357u) {
    float x = f32_from_bits(bits);
    uint16_t got = f32_to_f16_bits(x);
    ASSERT_LT(got, 0x7C00) << "finite input below 65520 became Inf: " << x;
    double d_got = std::fabs(static_cast<double>(f16_bits_to_f32(got)) - x);
    for (int step : {-1, 1}) {
      int neighbour = got + step;
      if (neighbour < 0 || neighbour >= 0x7C00) continue;
      double d_n = std::fabs(static_cast<double>(f16_bits_to_f32(static_cast<uint16_t>(neighbour))) - x);
      ASSERT_LE(d_got, d_n) << "x=" << x;
      if (d_got == d_n) {
        ASSERT_EQ(got & 1, 0) << "tie not broken to even at x=" << x;
      }
    }
  }
}

}  // namespace
}  // namespace sqlrl
