#include "runtime/random.h"

#include "runtime/random_math.h"
#include "runtime/thread_pool.h"

namespace sqlrl {

static void check_fill_target(const char* op, const Tensor& t, DType dtype) {
  check(t.dtype == dtype, op, ": expects ", dtype_name(dtype), ", got ", t.str());
  check(t.is_contiguous(), op, ": ", t.str(), " must be contiguous");
}

void fill_uniform(const Tensor& t, uint64_t seed, uint64_t stream, float low, float high) {
  check_fill_target("fill_uniform", t, DType::F32);
  size_t n = static_cast<size_t>(t.numel());
  if (t.device().is_cuda()) return fill_uniform_cuda(t.data_as<float>(), n, seed, stream, low, high, t.device().index);
  float* out = t.data_as<float>();
  for (size_t i = 0; i < n; ++i) out[i] = uniform_element(seed, stream, i, low, high);
}

void fill_normal(const Tensor& t, uint64_t seed, uint64_t stream, float mean, float stddev) {
  check_fill_target("fill_normal", t, DType::F32);
  size_t n = static_cast<size_t>(t.numel());
  if (t.device().is_cuda()) return fill_normal_cuda(t.data_as<float>(), n, seed, stream, mean, stddev, t.device().index);
  float* out = t.data_as<float>();
  // Element i's bits depend on i alone, so the pool's split (its thread count) changes nothing.
  default_thread_pool().parallel_for(n, size_t{1} << 16, [&](size_t begin, size_t end) {
    fill_normal_range(out + begin, DType::F32, begin, end - begin, seed, stream, mean, stddev);
  });
}

namespace {

template <class Store>
void normal_range_as(uint64_t first, uint64_t count, uint64_t seed, uint64_t stream, float mean, float stddev,
                     Store store) {
  uint64_t i = first;
  const uint64_t end = first + count;
  // A head or tail that is not a whole block of four takes the elements one by one: a piece may
  // start or end anywhere (wherever the thread pool cut the range).
  for (; i < end && i % 4 != 0; ++i) store(i - first, normal_element(seed, stream, i, mean, stddev));
  float block[4];
  for (; i + 4 <= end; i += 4) {
    normal_block4(seed, stream, i / 4, mean, stddev, block);
    for (uint64_t k = 0; k < 4; ++k) store(i - first + k, block[k]);
  }
  for (; i < end; ++i) store(i - first, normal_element(seed, stream, i, mean, stddev));
}

}  // namespace

void fill_normal_range(void* out, DType dtype, uint64_t first, uint64_t count, uint64_t seed, uint64_t stream,
                       float mean, float stddev) {
  if (dtype == DType::F32) {
    float* o = static_cast<float*>(out);
    normal_range_as(first, count, seed, stream, mean, stddev, [o](uint64_t k, float x) { o[k] = x; });
  } else if (dtype == DType::BF16) {
    uint16_t* o = static_cast<uint16_t*>(out);
    normal_range_as(first, count, seed, stream, mean, stddev, [o](uint64_t k, float x) { o[k] = f32_to_bf16_bits(x); });
  } else if (dtype == DType::F16) {
    uint16_t* o = static_cast<uint16_t*>(out);
    normal_range_as(first, count, seed, stream, mean, stddev, [o](uint64_t k, float x) { o[k] = f32_to_f16_bits(x); });
  } else {
    fail("fill_normal_range: draws are stored as f32, bf16 or f16, not ", dtype_name(dtype));
  }
}

void fill_random_bits(const Tensor& t, uint64_t seed, uint64_t stream) {
  check_fill_target("fill_random_bits", t, DType::I32);
  size_t n = static_cast<size_t>(t.numel());
  auto* out = t.data_as<uint32_t>();
  if (t.device().is_cuda()) return fill_random_bits_cuda(out, n, seed, stream, t.device().index);
  for (size_t i = 0; i < n; ++i) out[i] = philox_draw(seed, stream, i / 4).v[i % 4];
}

}  // namespace sqlrl
