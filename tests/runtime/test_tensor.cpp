#include <gtest/gtest.h>

#include "runtime/tensor.h"
#include "tests/test_util.h"

namespace sqlrl {
namespace {

TEST(Tensor, PlaceholderBuilds) {
  Tensor t = zeros({2, 3}, DType::F32);
  EXPECT_EQ(t.numel(), 6);
}

}  // namespace
}  // namespace sqlrl
