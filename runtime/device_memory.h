// Raw memory primitives behind Tensor: copies between any two devices, and the CUDA side of
// fill and dtype conversion. Implemented in cuda/memory.cu (or nocuda/memory.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/stream.h"

namespace sqlrl {

void* cuda_malloc_raw(size_t bytes, int device_index);  // throws with the size and free memory
void cuda_free_raw(void* ptr, int device_index);
void memcpy_between(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
void cuda_fill(void* data, DType dtype, size_t n, float value, int device_index);
// Page-locked host memory (copies from it run asynchronously) and a copy ordered on `stream`
// that returns at once (either side may be host or device; the caller keeps both alive and
// unchanged until the stream passes it).
void* cuda_host_alloc(size_t bytes);
void cuda_host_free(void* ptr);
void cuda_copy_async(void* dst, const void* src, size_t bytes, const CudaStream& stream);
void cuda_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n, int device_index);

}  // namespace sqlrl
