// Built without the CUDA toolkit: the CUDA model's device helpers exist so that the model
// library links, and fail plainly if called.
#include "model/cuda_ops.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl {

void model_copy(void*, const void*, size_t, CopyKind, const CudaStream&) {
  fail("model_copy: ", cuda_unavailable_reason());
}
void model_zero(void*, size_t, const CudaStream&) { fail("model_zero: ", cuda_unavailable_reason()); }
void f32_to_bf16_cuda(uint16_t*, const float*, int64_t, const CudaStream&) {
  fail("f32_to_bf16_cuda: ", cuda_unavailable_reason());
}
void broadcast_rows_cuda(uint16_t*, const uint16_t*, int64_t, int64_t, bool, const CudaStream&) {
  fail("broadcast_rows_cuda: ", cuda_unavailable_reason());
}
void column_sum_add_cuda(float*, const uint16_t*, int64_t, int64_t, const CudaStream&) {
  fail("column_sum_add_cuda: ", cuda_unavailable_reason());
}
void kv_write_cuda(uint16_t*, uint16_t*, const uint16_t*, const uint16_t*, const int32_t*, int64_t, int64_t,
                   const CudaStream&) {
  fail("kv_write_cuda: ", cuda_unavailable_reason());
}
void gather_rows_cuda(uint16_t*, const uint16_t*, const int32_t*, int64_t, int64_t, const CudaStream&) {
  fail("gather_rows_cuda: ", cuda_unavailable_reason());
}

}  // namespace sqlrl
