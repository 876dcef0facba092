// paged_attention_cpu's bits are one fixed function of its inputs on every path (run-time or
// compile-time head_dim, heads one at a time or two per pass, vector or array accumulators):
// those of this scalar transcription, in its order. The decode steps of a rollout, an evaluation
// and the demo's GRPO depend on that (a changed bit can change a sampled token). A path that
// reassociated a sum (another tree, keys summed in another order) would still agree with the
// float64 reference (op_attention.cpp) to a few ulps, and fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/vec.h"

namespace sqlrl {
namespace {

// One query head at cache positions 0..len-1: 16-lane dot products reduced by the fixed tree
// (8, 4, 2, 1), scaled; softmax with exp_fast, the total summed left to right; the weighted
// values summed over keys left to right.
template <bool Fma>
void transcription(float* out, const float* q, const std::vector<const float*>& keys,
                   const std::vector<const float*>& values, int64_t D) {
  const int64_t len = static_cast<int64_t>(keys.size()), body = D / 16 * 16;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> p(static_cast<size_t>(len));
  for (int64_t j = 0; j < len; ++j) {
    float acc[16] = {};
    for (int64_t d = 0; d < body; d += 16)
      for (int64_t l = 0; l < 16; ++l) acc[l] = cpu::madd<Fma>(q[d + l], keys[j][d + l], acc[l]);
    for (int64_t width = 8; width > 0; width /= 2)
      for (int64_t l = 0; l < width; ++l) acc[l] += acc[l + width];
    float sum = acc[0];
    for (int64_t d = body; d < D; ++d) sum = cpu::madd<Fma>(q[d], keys[j][d], sum);
    p[j] = sum * scale;
  }
  const float m = *std::max_element(p.begin(), p.end());
  float total = 0.0f;
  for (float& x : p) total += (x = cpu::exp_fast<Fma>(x - m));
  const float inv = 1.0f / total;
  for (int64_t d = 0; d < D; ++d) out[d] = 0.0f;
  for (int64_t j = 0; j < len; ++j)
    for (int64_t d = 0; d < D; ++d) out[d] = cpu::madd<Fma>(p[j] * inv, values[j][d], out[d]);
}

TEST(PagedAttentionOrder, EveryPathComputesTheTranscriptionsBits) {
  const bool fma = cpu::cpu_isa() != cpu::Isa::Baseline;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t bs = 16, KVH = 2;
  const std::vector<int32_t> contexts = {1, 17, 300, 64};
  int64_t mismatched = 0, checked = 0;
  for (int64_t D : {32, 64, 128, 24})
    for (int64_t group : {1, 2, 3, 4}) {
      SCOPED_TRACE("head_dim " + std::to_string(D) + " group " + std::to_string(group));
      const int64_t H = KVH * group, max_blocks = (300 + bs - 1) / bs;
      const int64_t num_blocks = static_cast<int64_t>(contexts.size()) * max_blocks;
      std::vector<float> k(static_cast<size_t>(num_blocks * bs * KVH * D)), v(k.size());
      for (float& x : k) x = 1.5f * normal(rng);
      for (float& x : v) x = normal(rng);
      std::vector<int32_t> pool(static_cast<size_t>(num_blocks)), table, positions;
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng);
      for (size_t s = 0; s < contexts.size(); ++s) {
        table.insert(table.end(), pool.begin() + s * max_blocks, pool.begin() + (s + 1) * max_blocks);
        positions.push_back(contexts[s] - 1);
      }
      const int64_t N = static_cast<int64_t>(contexts.size());
      std::vector<float> q(static_cast<size_t>(N * H * D)), out(q.size());
      for (float& x : q) x = normal(rng);
      paged_attention_cpu(out.data(), q.data(), k.data(), v.data(), {N, table.data(), max_blocks, positions.data(), bs},
                          {H, KVH, D});
      for (int64_t i = 0; i < N; ++i)
        for (int64_t h = 0; h < H; ++h) {
          std::vector<const float*> keys, values;
          for (int64_t j = 0; j <= positions[i]; ++j) {
            const int64_t slot = (static_cast<int64_t>(table[i * max_blocks + j / bs]) * bs + j % bs) * KVH + h / group;
            keys.push_back(k.data() + slot * D);
            values.push_back(v.data() + slot * D);
          }
          std::vector<float> want(static_cast<size_t>(D));
          (fma ? transcription<true> : transcription<false>)(want.data(), q.data() + (i * H + h) * D, keys, values, D);
          const bool same = std::memcmp(want.data(), out.data() + (i * H + h) * D, sizeof(float) * D) == 0;
          mismatched += !same;
          ++checked;
          EXPECT_TRUE(same) << "query " << i << " (context " << contexts[i] << ") head " << h;
        }
    }
  std::printf("%lld of %lld (query, head) rows bit for bit\n", (long long)(checked - mismatched), (long long)checked);
}

}  // namespace
}  // namespace sqlrl
