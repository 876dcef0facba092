#include "runtime/tensor.h"

#include <cstdlib>
#include <cstring>

#include "runtime/allocator.h"
#include "runtime/device_memory.h"
#include "runtime/thread_pool.h"

namespace sqlrl {

// --- Shape ------------------------------------------------------------------------------------

Shape::Shape(std::initializer_list<int64_t> sizes) : Shape(std::vector<int64_t>(sizes)) {}

Shape::Shape(const std::vector<int64_t>& sizes) {
  check(sizes.size() <= kMaxDims, "shape has ", sizes.size(), " dims; at most ", kMaxDims, " are supported");
  ndim = static_cast<int>(sizes.size());
  for (int i = 0; i < ndim; ++i) dims[i] = sizes[i];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (ndim != other.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (dims[i] != other.dims[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

Storage::~Storage() {
  if (release && data) release(data);
}

// --- Tensor -----------------------------------------------------------------------------------

static void set_contiguous_strides(Tensor& t) {
  int64_t stride = 1;
  for (int i = t.shape.ndim - 1; i >= 0; --i) {
    t.strides[i] = stride;
    stride *= t.shape.dims[i];
  }
}

static void check_shape_valid(const Shape& shape) {
  for (int i = 0; i < shape.ndim; ++i)
    check(shape.dims[i] >= 0, "shape ", shape.str(), " has a negative dimension");
}

int64_t Tensor::size(int dim) const {
  int d = dim < 0 ? dim + shape.ndim : dim;
  check(d >= 0 && d < shape.ndim, "dim ", dim, " out of range for ", str());
  return shape.dims[d];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = shape.ndim - 1; i >= 0; --i) {
    if (shape.dims[i] != 1 && strides[i] != expected) return false;
    expected *= shape.dims[i];
  }
  return true;
}

std::string Tensor::str() const {
  return str_cat(dtype_name(dtype), shape.str(), " on ", device_name(device()), is_contiguous() ? "" : " (strided)");
}

Tensor empty(const Shape& shape, DType dtype, Device device) {
  check_shape_valid(shape);
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  set_contiguous_strides(t);
  t.storage = allocate_storage(static_cast<size_t>(shape.numel()) * dtype_size(dtype), device);
  return t;
}

Tensor zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (t.nbytes() == 0) return t;
  if (device.is_cpu()) {
    std::memset(t.data(), 0, t.nbytes());
  } else {
    cuda_fill(t.data(), DType::U8, t.nbytes(), 0.0f, device.index);
  }
  return t;
}

Tensor from_floats(const std::vector<float>& values, const Shape& shape, DType dtype, Device device) {
  check(static_cast<int64_t>(values.size()) == shape.numel(), "from_floats: ", values.size(),
        " values do not fill shape ", shape.str());
  check(dtype_is_float(dtype), "from_floats: dtype ", dtype_name(dtype), " is not a float type");
  Tensor host = empty(shape, dtype, cpu_device());
  switch (dtype) {
    case DType::F32: std::memcpy(host.data(), values.data(), values.size() * 4); break;
    case DType::BF16: convert_f32_to_bf16(values.data(), host.data_as<uint16_t>(), values.size()); break;
    default: convert_f32_to_f16(values.data(), host.data_as<uint16_t>(), values.size()); break;
  }
  return device.is_cpu() ? host : to_device(host, device);
}

Tensor from_ints(const std::vector<int32_t>& values, const Shape& shape, Device device) {
  check(static_cast<int64_t>(values.size()) == shape.numel(), "from_ints: ", values.size(),
        " values do not fill shape ", shape.str());
  Tensor host = empty(shape, DType::I32, cpu_device());
  if (!values.empty()) std::memcpy(host.data(), values.data(), values.size() * 4);
  return device.is_cpu() ? host : to_device(host, device);
}

Tensor view_bytes(const Tensor& t, size_t byte_offset, const Shape& shape, DType dtype) {
  check(t.defined() && t.is_contiguous(), "view_bytes: needs a defined contiguous tensor, got ", t.defined() ? t.str() : "none");
  check_shape_valid(shape);
  size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  check(byte_offset + bytes <= t.nbytes(), "view_bytes: ", bytes, " bytes at offset ", byte_offset, " pass the end of ",
        t.str(), " (", t.nbytes(), " bytes)");
  Tensor v = wrap(static_cast<char*>(t.data()) + byte_offset, shape, dtype, t.device(), t.storage);
  return v;
}

Tensor wrap(void* data, const Shape& shape, DType dtype, Device device, std::shared_ptr<void> keep_alive) {
  check_shape_valid(shape);
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  set_contiguous_strides(t);
  t.storage = std::make_shared<Storage>();
  t.storage->data = data;
  t.storage->bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  t.storage->device = device;
  t.storage->release = [keep_alive](void*) {};  // the capture keeps the owner alive
  return t;
}

// --- views ------------------------------------------------------------------------------------

Tensor reshape(const Tensor& t, const Shape& shape) {
  check(t.is_contiguous(), "reshape: ", t.str(), " is not contiguous; copy it first");
  Shape resolved = shape;
  int inferred = -1;
  int64_t known = 1;
  for (int i = 0; i < shape.ndim; ++i) {
    if (shape.dims[i] == -1) {
      check(inferred < 0, "reshape: more than one -1 in ", shape.str());
      inferred = i;
    } else {
      check(shape.dims[i] >= 0, "reshape: negative dimension in ", shape.str());
      known *= shape.dims[i];
    }
  }
  if (inferred >= 0) {
    check(known > 0 && t.numel() % known == 0, "reshape: cannot infer -1 in ", shape.str(), " from ", t.str());
    resolved.dims[inferred] = t.numel() / known;
  }
  check(resolved.numel() == t.numel(), "reshape: ", t.str(), " has ", t.numel(), " elements, shape ",
        resolved.str(), " has ", resolved.numel());
  Tensor v = t;
  v.shape = resolved;
  set_contiguous_strides(v);
  return v;
}

Tensor narrow(const Tensor& t, int dim, int64_t start, int64_t length) {
  int d = dim < 0 ? dim + t.ndim() : dim;
  check(d >= 0 && d < t.ndim(), "narrow: dim ", dim, " out of range for ", t.str());
  check(start >= 0 && length >= 0 && start + length <= t.shape.dims[d], "narrow: [", start, ", ",
        start + length, ") is outside dim ", d, " of size ", t.shape.dims[d], " of ", t.str());
  Tensor v = t;
  v.shape.dims[d] = length;
  v.offset += static_cast<size_t>(start * t.strides[d]) * dtype_size(t.dtype);
  return v;
}

Tensor select(const Tensor& t, int64_t index) {
  check(t.ndim() >= 1, "select: ", t.str(), " has no dim to select from");
  check(index >= 0 && index < t.shape.dims[0], "select: index ", index, " out of range for ", t.str());
  Tensor v = t;
  v.offset += static_cast<size_t>(index * t.strides[0]) * dtype_size(t.dtype);
  v.shape.ndim = t.ndim() - 1;
  for (int i = 0; i < v.shape.ndim; ++i) {
    v.shape.dims[i] = t.shape.dims[i + 1];
    v.strides[i] = t.strides[i + 1];
  }
  v.shape.dims[v.shape.ndim] = 0;
  v.strides[v.shape.ndim] = 0;
  return v;
}

// --- copies -----------------------------------------------------------------------------------

// Calls fn(element_offset) for every element of a (possibly strided) CPU tensor in row-major order.
template <typename Fn>
static void for_each_offset(const Tensor& t, Fn fn) {
  int64_t n = t.numel();
  if (n == 0) return;
  int64_t index[kMaxDims] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int d = 0; d < t.ndim(); ++d) off += index[d] * t.strides[d];
    fn(i, off);
    for (int d = t.ndim() - 1; d >= 0; --d) {
      if (++index[d] < t.shape.dims[d]) break;
      index[d] = 0;
    }
  }
}

void copy(const Tensor& dst, const Tensor& src) {
  check(dst.shape == src.shape, "copy: shape mismatch, dst ", dst.str(), " vs src ", src.str());
  check(dst.dtype == src.dtype, "copy: dtype mismatch, dst ", dst.str(), " vs src ", src.str(),
        " (use to_dtype to convert)");
  if (dst.numel() == 0) return;
  if (dst.is_contiguous() && src.is_contiguous()) {
    memcpy_between(dst.data(), dst.device(), src.data(), src.device(), dst.nbytes());
    return;
  }
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    size_t elem = dtype_size(dst.dtype);
    std::vector<int64_t> src_offsets(static_cast<size_t>(src.numel()));
    for_each_offset(src, [&](int64_t i, int64_t off) { src_offsets[static_cast<size_t>(i)] = off; });
    const char* s = static_cast<const char*>(src.data());
    char* d = static_cast<char*>(dst.data());
    for_each_offset(dst, [&](int64_t i, int64_t off) {
      std::memcpy(d + off * elem, s + src_offsets[static_cast<size_t>(i)] * elem, elem);
    });
    return;
  }
  // One side is CUDA and a side is strided: stage through a contiguous host copy.
  check(dst.device().is_cpu() || dst.is_contiguous(), "copy: CUDA destination ", dst.str(), " must be contiguous");
  check(src.device().is_cpu() || src.is_contiguous(), "copy: CUDA source ", src.str(), " must be contiguous");
  Tensor staging = empty(src.shape, src.dtype, cpu_device());
  copy(staging, src);
  copy(dst, staging);
}

Tensor to_device(const Tensor& t, Device device) {
  Tensor out = empty(t.shape, t.dtype, device);
  copy(out, t);
  return out;
}

Tensor clone(const Tensor& t) { return to_device(t, t.device()); }

static float load_as_float(const void* base, DType dtype, int64_t off) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(base)[off];
    case DType::BF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(base)[off]);
    case DType::F16: return f16_bits_to_f32(static_cast<const uint16_t*>(base)[off]);
    default: fail("expected a float tensor, got ", dtype_name(dtype));
  }
}

static void store_float(void* base, DType dtype, int64_t off, float value) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(base)[off] = value; break;
    case DType::BF16: static_cast<uint16_t*>(base)[off] = f32_to_bf16_bits(value); break;
    case DType::F16: static_cast<uint16_t*>(base)[off] = f32_to_f16_bits(value); break;
    default: fail("expected a float tensor, got ", dtype_name(dtype));
  }
}

Tensor to_dtype(const Tensor& t, DType dtype) {
  check(dtype_is_float(t.dtype) && dtype_is_float(dtype), "to_dtype: only float types convert, got ",
        t.str(), " -> ", dtype_name(dtype));
  if (t.dtype == dtype) return clone(t);
  Tensor out = empty(t.shape, dtype, t.device());
  if (t.device().is_cpu() && t.is_contiguous() && (t.dtype == DType::F32 || dtype == DType::F32)) {
    // The common conversions (widening a loaded bf16/f16 tensor, narrowing f32) in bulk,
    // split over the thread pool: an element-at-a-time loop would dominate checkpoint loads.
    size_t n = static_cast<size_t>(t.numel());
    default_thread_pool().parallel_for(n, size_t{1} << 16, [&](size_t begin, size_t end) {
      size_t count = end - begin;
      if (t.dtype == DType::BF16) convert_bf16_to_f32(t.data_as<uint16_t>() + begin, out.data_as<float>() + begin, count);
      else if (t.dtype == DType::F16) convert_f16_to_f32(t.data_as<uint16_t>() + begin, out.data_as<float>() + begin, count);
      else if (dtype == DType::BF16) convert_f32_to_bf16(t.data_as<float>() + begin, out.data_as<uint16_t>() + begin, count);
      else convert_f32_to_f16(t.data_as<float>() + begin, out.data_as<uint16_t>() + begin, count);
    });
  } else if (t.device().is_cpu()) {
    for_each_offset(t, [&](int64_t i, int64_t off) { store_float(out.data(), dtype, i, load_as_float(t.data(), t.dtype, off)); });
  } else {
    check(t.is_contiguous(), "to_dtype: CUDA tensor ", t.str(), " must be contiguous");
    cuda_convert(t.data(), t.dtype, out.data(), dtype, static_cast<size_t>(t.numel()), t.device().index);
  }
  return out;
}

void fill(const Tensor& t, float value) {
  check(dtype_is_float(t.dtype), "fill: ", t.str(), " is not a float tensor");
  if (t.device().is_cpu()) {
    for_each_offset(t, [&](int64_t, int64_t off) { store_float(t.data(), t.dtype, off, value); });
  } else {
    check(t.is_contiguous(), "fill: CUDA tensor ", t.str(), " must be contiguous");
    cuda_fill(t.data(), t.dtype, static_cast<size_t>(t.numel()), value, t.device().index);
  }
}

std::vector<float> to_floats(const Tensor& t) {
  Tensor host = t.device().is_cpu() ? t : to_device(t, cpu_device());
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (host.dtype == DType::I32 || host.dtype == DType::I64 || host.dtype == DType::U8) {
    for_each_offset(host, [&](int64_t i, int64_t off) {
      const void* base = host.data();
      float v = host.dtype == DType::I32   ? static_cast<float>(static_cast<const int32_t*>(base)[off])
                : host.dtype == DType::I64 ? static_cast<float>(static_cast<const int64_t*>(base)[off])
                                           : static_cast<float>(static_cast<const uint8_t*>(base)[off]);
      out[static_cast<size_t>(i)] = v;
    });
    return out;
  }
  for_each_offset(host, [&](int64_t i, int64_t off) { out[static_cast<size_t>(i)] = load_as_float(host.data(), host.dtype, off); });
  return out;
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  check(a.device() == b.device(), op, ": tensors on different devices: ", a.str(), " and ", b.str(),
        " (move one with to_device first)");
}

}  // namespace sqlrl
