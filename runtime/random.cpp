#include "runtime/random.h"

#include "runtime/random_math.h"

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
  for (size_t i = 0; i < n; ++i) out[i] = normal_element(seed, stream, i, mean, stddev);
}

void fill_random_bits(const Tensor& t, uint64_t seed, uint64_t stream) {
  check_fill_target("fill_random_bits", t, DType::I32);
  size_t n = static_cast<size_t>(t.numel());
  auto* out = t.data_as<uint32_t>();
  if (t.device().is_cuda()) return fill_random_bits_cuda(out, n, seed, stream, t.device().index);
  for (size_t i = 0; i < n; ++i) out[i] = philox_draw(seed, stream, i / 4).v[i % 4];
}

}  // namespace sqlrl
