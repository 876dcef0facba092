// Raw memory primitives behind Tensor: copies between any two devices, and the CUDA side of
// fill and dtype conversion. Implemented in cuda/memory.cu (or nocuda/memory.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/device.h"
#include "runtime/dtype.h"

namespace sqlrl {

void* cuda_malloc_raw(size_t bytes, int device_index);  // throws with the size and free memory
void cuda_free_raw(void* ptr, int device_index);
void memcpy_between(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
void cuda_fill(void* data, DType dtype, size_t n, float value, int device_index);
void cuda_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n, int device_index);

}  // namespace sqlrl
