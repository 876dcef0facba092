#include <gtest/gtest.h>

#include <numeric>

#include "runtime/allocator.h"
#include "runtime/random.h"
#include "runtime/tensor.h"
#include "tests/test_util.h"

namespace sqlrl {
namespace {

std::vector<float> iota_floats(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

TEST(Tensor, ContiguousStridesAndSize) {
  Tensor t = zeros({2, 3, 4}, DType::F32);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.strides[0], 12);
  EXPECT_EQ(t.strides[1], 4);
  EXPECT_EQ(t.strides[2], 1);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.str(), "f32[2, 3, 4] on cpu");
  for (float v : to_floats(t)) EXPECT_EQ(v, 0.0f);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = from_floats(iota_floats(12), {3, 4});
  Tensor r = reshape(t, {4, -1});
  EXPECT_EQ(r.shape, Shape({4, 3}));
  EXPECT_EQ(r.storage.get(), t.storage.get());
  r.data_as<float>()[5] = 100.0f;
  EXPECT_EQ(t.data_as<float>()[5], 100.0f);  // writes through the view reach the original

  Tensor row = select(t, 2);  // [8, 9, 10, 11]
  EXPECT_EQ(row.shape, Shape({4}));
  EXPECT_EQ(to_floats(row), (std::vector<float>{8, 9, 10, 11}));

  Tensor cols = narrow(t, 1, 1, 2);  // columns 1..2 of every row: strided
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(to_floats(cols), (std::vector<float>{1, 2, 100, 6, 9, 10}));
  Tensor rows = narrow(t, 0, 1, 2);  // rows 1..2: still contiguous
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(to_floats(rows)[0], 4.0f);
}

TEST(Tensor, StridedCopyGathersAndScatters) {
  Tensor t = from_floats(iota_floats(12), {3, 4});
  Tensor dense = empty({3, 2}, DType::F32);
  copy(dense, narrow(t, 1, 2, 2));
  EXPECT_EQ(to_floats(dense), (std::vector<float>{2, 3, 6, 7, 10, 11}));
  Tensor target = zeros({3, 4}, DType::F32);
  copy(narrow(target, 1, 0, 2), dense);  // scatter into a strided destination
  EXPECT_EQ(to_floats(target), (std::vector<float>{2, 3, 0, 0, 6, 7, 0, 0, 10, 11, 0, 0}));
}

TEST(Tensor, DtypeConversionRoundsAndWidens) {
  Tensor t = from_floats({1.0f, 1.0f + 0x1p-8f, -3.5f, 65504.0f}, {4});
  Tensor b = to_dtype(t, DType::BF16);
  EXPECT_EQ(b.data_as<uint16_t>()[1], 0x3F80);  // tie to even
  EXPECT_EQ(to_floats(b), (std::vector<float>{1.0f, 1.0f, -3.5f, 65536.0f}));
  Tensor h = to_dtype(t, DType::F16);
  EXPECT_EQ(to_floats(h), (std::vector<float>{1.0f, 1.0f + 0x1p-8f, -3.5f, 65504.0f}));  // f16 keeps 10 bits
}

TEST(Tensor, BulkConversionEqualsElementwise) {
  // 300,001 elements: several thread-pool chunks plus a ragged tail on the bulk path.
  const int64_t n = 300001;
  Tensor t = empty({n}, DType::F32);
  fill_normal(t, 3, 1, 0.0f, 1000.0f);
  const float* src = t.data_as<float>();
  for (DType narrow_type : {DType::BF16, DType::F16}) {
    Tensor h = to_dtype(t, narrow_type);
    const uint16_t* bits = h.data_as<uint16_t>();
    for (int64_t i = 0; i < n; ++i) {
      uint16_t want = narrow_type == DType::BF16 ? f32_to_bf16_bits(src[i]) : f32_to_f16_bits(src[i]);
      ASSERT_EQ(bits[i], want) << "element " << i;
    }
    Tensor wide = to_dtype(h, DType::F32);
    for (int64_t i = 0; i < n; ++i) {
      float want = narrow_type == DType::BF16 ? bf16_bits_to_f32(bits[i]) : f16_bits_to_f32(bits[i]);
      ASSERT_EQ(f32_bits(wide.data_as<float>()[i]), f32_bits(want)) << "element " << i;
    }
  }
  // bf16 <-> f16 and strided sources take the element-wise path and agree with it.
  Tensor b = to_dtype(t, DType::BF16);
  Tensor f = to_dtype(b, DType::F16);
  EXPECT_EQ(f.data_as<uint16_t>()[7], f32_to_f16_bits(bf16_bits_to_f32(b.data_as<uint16_t>()[7])));
}

TEST(Tensor, ReshapeAndNarrowErrorsNameTheShapes) {
  Tensor t = zeros({2, 3}, DType::F32);
  try {
    reshape(t, {4, 2});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32[2, 3] on cpu has 6 elements, shape [4, 2] has 8"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(narrow(t, 1, 2, 2), Error);
  EXPECT_THROW(reshape(narrow(t, 1, 0, 2), {4}), Error);  // not contiguous
  EXPECT_THROW(select(t, 2), Error);
  EXPECT_THROW(zeros({2, 3, 4, 5, 6}, DType::F32), Error);  // more than 4 dims
}

TEST(Tensor, CopyMismatchNamesBothTensors) {
  Tensor a = zeros({2, 3}, DType::F32), b = zeros({3, 2}, DType::F32);
  try {
    copy(a, b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dst f32[2, 3] on cpu vs src f32[3, 2] on cpu"), std::string::npos) << e.what();
  }
  EXPECT_THROW(copy(a, zeros({2, 3}, DType::BF16)), Error);
}

TEST(Tensor, DeviceMismatchIsAnErrorNamingBothDevices) {
  // A tensor that claims to live on cuda:0 (no memory is touched: the check comes first).
  float dummy[6] = {};
  Tensor on_gpu = wrap(dummy, {2, 3}, DType::F32, cuda_device(0), nullptr);
  Tensor on_cpu = zeros({2, 3}, DType::F32);
  try {
    check_same_device("add", on_cpu, on_gpu);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32[2, 3] on cpu and f32[2, 3] on cuda:0"), std::string::npos) << e.what();
  }
}

TEST(Tensor, WrapKeepsOwnerAlive) {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  std::weak_ptr<std::vector<float>> watch = owner;
  Tensor t = wrap(owner->data(), {2, 2}, DType::F32, cpu_device(), owner);
  owner.reset();
  EXPECT_FALSE(watch.expired());
  Tensor v = select(t, 1);
  t = Tensor{};
  EXPECT_FALSE(watch.expired());  // the view still holds it
  EXPECT_EQ(to_floats(v), (std::vector<float>{3, 4}));
  v = Tensor{};
  EXPECT_TRUE(watch.expired());
}

TEST(Tensor, ParseDeviceAndDtype) {
  EXPECT_EQ(parse_device("cpu"), cpu_device());
  EXPECT_EQ(parse_device("cuda:3"), cuda_device(3));
  EXPECT_THROW(parse_device("gpu"), Error);
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_THROW(parse_dtype("fp8"), Error);
}

TEST(Device, DetectionReportsAReasonWithoutADevice) {
  int n = cuda_device_count();  // must not crash without a driver
  if (n == 0) {
    EXPECT_NE(cuda_unavailable_reason().find("no CUDA device"), std::string::npos);
    EXPECT_THROW(zeros({2}, DType::F32, cuda_device(0)), Error);
  } else {
    EXPECT_TRUE(cuda_unavailable_reason().empty());
    EXPECT_FALSE(cuda_device_info(0).name.empty());
  }
}

// --- CUDA variants ------------------------------------------------------------------------------

TEST(TensorCuda, RoundTripAndConversion) {
  SQLRL_REQUIRE_CUDA();
  std::vector<float> values = {1.0f, -2.5f, 1.0f + 0x1p-8f, 3.0e38f, 0.0f, -0.0f};
  Tensor host = from_floats(values, {2, 3});
  Tensor dev = to_device(host, cuda_device(0));
  EXPECT_EQ(dev.device(), cuda_device(0));
  EXPECT_EQ(to_floats(dev), values);
  // Conversion on the device gives the same bits as on the host.
  Tensor dev_bf16 = to_dtype(dev, DType::BF16), host_bf16 = to_dtype(host, DType::BF16);
  Tensor back = to_device(dev_bf16, cpu_device());
  EXPECT_EQ(std::memcmp(back.data(), host_bf16.data(), host_bf16.nbytes()), 0);
  Tensor dev_f16 = to_dtype(dev, DType::F16), host_f16 = to_dtype(host, DType::F16);
  back = to_device(dev_f16, cpu_device());
  EXPECT_EQ(std::memcmp(back.data(), host_f16.data(), host_f16.nbytes()), 0);
  // Strided host source staged into a contiguous device tensor.
  Tensor cols = narrow(host, 1, 1, 2);
  Tensor dev_cols = to_device(cols, cuda_device(0));
  EXPECT_EQ(to_floats(dev_cols), to_floats(cols));
  Tensor z = zeros({1000}, DType::BF16, cuda_device(0));
  for (float v : to_floats(z)) ASSERT_EQ(v, 0.0f);
  fill(z, 2.5f);
  for (float v : to_floats(z)) ASSERT_EQ(v, 2.5f);
}

TEST(AllocatorCuda, CachesAndReportsStats) {
  SQLRL_REQUIRE_CUDA();
  cuda_empty_cache(0);
  AllocatorStats before = cuda_allocator_stats(0);
  {
    Tensor a = empty({1000}, DType::F32, cuda_device(0));  // 4000 B -> 4096 B class
    AllocatorStats during = cuda_allocator_stats(0);
    EXPECT_EQ(during.in_use - before.in_use, cuda_size_class(4000));
    EXPECT_EQ(cuda_size_class(4000), 4096u);
  }
  AllocatorStats after = cuda_allocator_stats(0);
  EXPECT_EQ(after.in_use, before.in_use);
  EXPECT_GE(after.cached, 4096u);
  size_t allocs = after.device_allocs;
  { Tensor again = empty({1024}, DType::F32, cuda_device(0)); }  // same class: a cache hit
  EXPECT_EQ(cuda_allocator_stats(0).device_allocs, allocs);
  EXPECT_GE(cuda_allocator_stats(0).peak_in_use, 4096u);
  cuda_empty_cache(0);
  EXPECT_EQ(cuda_allocator_stats(0).cached, 0u);
}

TEST(Allocator, SizeClasses) {
  EXPECT_EQ(cuda_size_class(1), 512u);
  EXPECT_EQ(cuda_size_class(512), 512u);
  EXPECT_EQ(cuda_size_class(513), 1024u);
  EXPECT_EQ(cuda_size_class((1u << 20) - 1), size_t{1} << 20);
  EXPECT_EQ(cuda_size_class((1u << 20) + 1), size_t{2} << 20);
  EXPECT_EQ(cuda_size_class((3u << 20)), size_t{4} << 20);
}

}  // namespace
}  // namespace sqlrl
