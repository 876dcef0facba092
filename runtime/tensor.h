// Tensor: a typed, shaped view of shared storage on one device (llm.c-style plain data).
// Tensors made here are contiguous (row-major); views (reshape, narrow, select) share the
// storage and may carry non-contiguous strides. Nothing moves between devices implicitly:
// only copy() / to_device() cross devices, and ops given tensors on two devices fail naming both.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace sqlrl {

constexpr int kMaxDims = 4;

struct Shape {
  int ndim = 0;
  int64_t dims[kMaxDims] = {0, 0, 0, 0};

  Shape() = default;
  Shape(std::initializer_list<int64_t> sizes);
  explicit Shape(const std::vector<int64_t>& sizes);
  int64_t numel() const;
  int64_t operator[](int dim) const { return dims[dim]; }
  bool operator==(const Shape& other) const;
  std::string str() const;  // "[2, 3]"
};

// A block of memory on one device. `release` returns it to its allocator (or unmaps a file).
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  std::function<void(void*)> release;
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();
};

struct Tensor {
  std::shared_ptr<Storage> storage;
  size_t offset = 0;  // bytes from storage->data
  DType dtype = DType::F32;
  Shape shape;
  int64_t strides[kMaxDims] = {0, 0, 0, 0};  // in elements

  bool defined() const { return storage != nullptr; }
  Device device() const { return storage ? storage->device : cpu_device(); }
  int ndim() const { return shape.ndim; }
  int64_t size(int dim) const;  // negative dims count from the end
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool is_contiguous() const;
  void* data() const { return static_cast<char*>(storage->data) + offset; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data());
  }
  std::string str() const;  // "f32[2, 3] on cpu"
};

// --- creation -------------------------------------------------------------------------------
Tensor empty(const Shape& shape, DType dtype, Device device = cpu_device());
Tensor zeros(const Shape& shape, DType dtype, Device device = cpu_device());
// Copies host values in: f32 data becomes `dtype` (bf16/f16 rounded to nearest even).
Tensor from_floats(const std::vector<float>& values, const Shape& shape, DType dtype = DType::F32,
                   Device device = cpu_device());
Tensor from_ints(const std::vector<int32_t>& values, const Shape& shape, Device device = cpu_device());
// Wraps memory owned elsewhere (e.g. an mmap'd file); `keep_alive` is held as long as any view.
Tensor wrap(void* data, const Shape& shape, DType dtype, Device device, std::shared_ptr<void> keep_alive);

// --- views (no copies) ------------------------------------------------------------------------
Tensor reshape(const Tensor& t, const Shape& shape);  // contiguous only; one dim may be -1
Tensor narrow(const Tensor& t, int dim, int64_t start, int64_t length);
Tensor select(const Tensor& t, int64_t index);  // index along dim 0, drops that dim
// A contiguous `dtype` tensor over bytes [byte_offset, +nbytes) of contiguous `t` (one region
// that several buffers take turns in); fails naming the sizes when it does not fit.
Tensor view_bytes(const Tensor& t, size_t byte_offset, const Shape& shape, DType dtype);

// --- copies and conversion --------------------------------------------------------------------
// dst and src must have the same shape and dtype; any pair of devices; strided views allowed
// on the CPU side, CUDA tensors must be contiguous.
void copy(const Tensor& dst, const Tensor& src);
Tensor to_device(const Tensor& t, Device device);
Tensor to_dtype(const Tensor& t, DType dtype);  // float types only; stays on t's device
Tensor clone(const Tensor& t);
void fill(const Tensor& t, float value);  // float types; contiguous
std::vector<float> to_floats(const Tensor& t);  // any device, any float type, any strides

// --- checks shared by ops ---------------------------------------------------------------------
void check_same_device(const char* op, const Tensor& a, const Tensor& b);

}  // namespace sqlrl
