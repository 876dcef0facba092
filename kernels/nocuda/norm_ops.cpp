// Built without the CUDA toolkit: the CUDA launchers of rmsnorm, rope, swiglu and embedding
// exist so that callers link, and fail plainly if called.
#include "kernels/embedding.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl {

void rmsnorm_forward_cuda(uint16_t*, float*, const uint16_t*, const uint16_t*, int64_t, int64_t, float,
                          const CudaStream&) {
  fail("rmsnorm_forward_cuda: ", cuda_unavailable_reason());
}
size_t rmsnorm_backward_workspace_bytes(int64_t, int64_t) { return 0; }
void rmsnorm_backward_cuda(uint16_t*, float*, const uint16_t*, const uint16_t*, const uint16_t*, const float*, int64_t,
                           int64_t, void*, size_t, const CudaStream&) {
  fail("rmsnorm_backward_cuda: ", cuda_unavailable_reason());
}
void rope_forward_cuda(uint16_t*, const int32_t*, int64_t, int64_t, int64_t, int64_t, float, const CudaStream&) {
  fail("rope_forward_cuda: ", cuda_unavailable_reason());
}
void rope_backward_cuda(uint16_t*, const int32_t*, int64_t, int64_t, int64_t, int64_t, float, const CudaStream&) {
  fail("rope_backward_cuda: ", cuda_unavailable_reason());
}
void swiglu_forward_cuda(uint16_t*, const uint16_t*, const uint16_t*, int64_t, const CudaStream&) {
  fail("swiglu_forward_cuda: ", cuda_unavailable_reason());
}
void swiglu_backward_cuda(uint16_t*, uint16_t*, const uint16_t*, const uint16_t*, const uint16_t*, int64_t,
                          const CudaStream&) {
  fail("swiglu_backward_cuda: ", cuda_unavailable_reason());
}
void embedding_forward_cuda(uint16_t*, const uint16_t*, const int32_t*, int64_t, int64_t, int64_t, const CudaStream&) {
  fail("embedding_forward_cuda: ", cuda_unavailable_reason());
}
size_t embedding_backward_workspace_bytes(int64_t, int64_t) { return 0; }
void embedding_backward_cuda(float*, const uint16_t*, const int32_t*, int64_t, int64_t, int64_t, void*, size_t,
                             const CudaStream&) {
  fail("embedding_backward_cuda: ", cuda_unavailable_reason());
}

}  // namespace sqlrl
