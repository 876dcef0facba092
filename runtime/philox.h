// Philox4x32-10 counter-based RNG (Salmon et al., SC'11; Random123), identical on host and
// device: a draw is a pure function of (key, counter), so any thread can compute any draw.
// Project convention: key = the 64-bit seed; counter = (index lo, index hi, stream lo, stream hi),
// where `stream` names what the draws are for (a sequence id when sampling, a tensor id when
// initialising) and `index` is the position within it. Batch composition never changes a draw.
#pragma once
#include <cstdint>

#include "runtime/hd.h"

namespace sqlrl {

struct Philox4 {
  uint32_t v[4];
};

SQLRL_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t product = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}

SQLRL_HD Philox4 philox4x32_10(Philox4 counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t* c = counter.v;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {  // the key schedule bumps before every round but the first
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kMul0, c[0], hi0, lo0);
    philox_mulhilo(kMul1, c[2], hi1, lo1);
    uint32_t next[4] = {hi1 ^ c[1] ^ key0, lo1, hi0 ^ c[3] ^ key1, lo0};
    c[0] = next[0];
    c[1] = next[1];
    c[2] = next[2];
    c[3] = next[3];
  }
  return counter;
}

// Four 32-bit draws for (seed, stream, index).
SQLRL_HD Philox4 philox_draw(uint64_t seed, uint64_t stream, uint64_t index) {
  Philox4 counter{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), static_cast<uint32_t>(stream),
                   static_cast<uint32_t>(stream >> 32)}};
  return philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Uniform in [0, 1) with 24 random bits: exact in f32, so host and device agree bit for bit.
SQLRL_HD float uniform_from_bits(uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1p-24f; }
// Uniform in (0, 1]: safe under log().
SQLRL_HD float uniform_open_from_bits(uint32_t bits) { return static_cast<float>((bits >> 8) + 1u) * 0x1p-24f; }

}  // namespace sqlrl
