// Built without the CUDA toolkit: host copies work, anything touching a CUDA device fails plainly.
#include <cstring>

#include "runtime/device_memory.h"
#include "runtime/error.h"

namespace sqlrl {

void* cuda_malloc_raw(size_t, int device_index) { fail("cuda:", device_index, ": ", cuda_unavailable_reason()); }
void cuda_free_raw(void*, int device_index) { fail("cuda:", device_index, ": ", cuda_unavailable_reason()); }

void memcpy_between(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  check(dst_device.is_cpu() && src_device.is_cpu(), "copy ", device_name(src_device), " -> ",
        device_name(dst_device), ": ", cuda_unavailable_reason());
  if (bytes) std::memcpy(dst, src, bytes);
}

void cuda_fill(void*, DType, size_t, float, int device_index) {
  fail("cuda:", device_index, ": ", cuda_unavailable_reason());
}
void cuda_convert(const void*, DType, void*, DType, size_t, int device_index) {
  fail("cuda:", device_index, ": ", cuda_unavailable_reason());
}

void* cuda_host_alloc(size_t) { fail(cuda_unavailable_reason()); }
void cuda_host_free(void*) {}
void cuda_copy_async(void*, const void*, size_t, const CudaStream&) { fail(cuda_unavailable_reason()); }

}  // namespace sqlrl
