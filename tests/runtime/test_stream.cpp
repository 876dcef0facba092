#include <gtest/gtest.h>

#include "runtime/gemm.h"
#include "runtime/stream.h"
#include "tests/test_util.h"

namespace sqlrl {
namespace {

TEST(StreamCuda, EventsTimeWorkOnAStream) {
  SQLRL_REQUIRE_CUDA();
  CudaStream stream = cuda_stream_create(0);
  CudaEvent start = cuda_event_create(0), end = cuda_event_create(0);
  Tensor a = zeros({512, 512}, DType::BF16, cuda_device(0)), c = zeros({512, 512}, DType::F32, cuda_device(0));
  fill(a, 1.0f);
  cuda_event_record(start, stream);
  for (int i = 0; i < 10; ++i) gemm(a, a, c, false, false, 1.0f, 0.0f, stream);
  cuda_event_record(end, stream);
  cuda_event_synchronize(end);
  EXPECT_GT(cuda_event_elapsed_ms(start, end), 0.0f);
  cuda_stream_synchronize(stream);
  EXPECT_EQ(to_floats(c)[0], 512.0f);  // sum of 512 ones: exact
  cuda_event_destroy(start);
  cuda_event_destroy(end);
  cuda_stream_destroy(stream);
  EXPECT_EQ(stream.handle, nullptr);
}

TEST(Stream, WithoutCudaStreamsFailCleanly) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  EXPECT_THROW(cuda_stream_create(0), Error);
}

}  // namespace
}  // namespace sqlrl
