// The paged decode split rule (kernels/attention.h), on the host: the CUDA launcher sizes its grid
// and workspace by paged_max_splits(max_context) and its shared memory by the split of
// max_context, so both must bound every context up to max_context. The rule itself is not
// monotone (1024 keys: 8 splits, 1025: 6), which is why the bound is a formula of its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/attention.h"

namespace sqlrl {
namespace {

TEST(PagedSplits, BoundAndSizesHoldForEveryContext) {
  for (int64_t split_tokens : {int64_t{16}, int64_t{64}, int64_t{100}, int64_t{128}, kPagedSplitTokens,
                               int64_t{1} << 20}) {
    SCOPED_TRACE("split_tokens " + std::to_string(split_tokens));
    int64_t most = 0, prev_size = 0, prev_bound = 0;
    for (int64_t c = 1; c <= 40000; ++c) {
      const int64_t size = paged_split_tokens(c, split_tokens), splits = paged_num_splits(c, split_tokens);
      const int64_t bound = paged_max_splits(c, split_tokens);
      most = std::max(most, splits);
      ASSERT_GE(bound, most) << "max_context " << c << ": a context up to it takes " << most << " splits";
      ASSERT_GE(bound, prev_bound) << "the bound must not fall as max_context grows: " << c;
      ASSERT_GE(size, prev_size) << "the longest split must be max_context's: " << c;
      ASSERT_LE(size, std::min(split_tokens, kPagedMaxSplitTokens)) << c;
      ASSERT_EQ(splits, (c + size - 1) / size) << c;
      if (split_tokens >= kPagedTileTokens && size < split_tokens) {
        ASSERT_EQ(size % kPagedTileTokens, 0) << "a split of " << size << " keys at context " << c;
      }
      prev_size = size;
      prev_bound = bound;
    }
  }
  // Small work spreads: one 512-key query takes 8 splits (8 x the kv heads blocks); long contexts
  // stop at the cap.
  EXPECT_EQ(paged_num_splits(512, kPagedSplitTokens), 8);
  EXPECT_EQ(paged_num_splits(32768, kPagedSplitTokens), 64);
}

}  // namespace
}  // namespace sqlrl
