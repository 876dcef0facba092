// Built without the CUDA toolkit: the CUDA launchers of AdamW and the grad norm exist so that
// callers and tests link, and fail plainly if called.
#include "kernels/adamw.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl {

void adamw_cuda(float*, float*, float*, const float*, uint16_t*, int64_t, const AdamWConfig&, int64_t, float,
                const double*, float, const CudaStream&) {
  fail("adamw_cuda: ", cuda_unavailable_reason());
}
void adamw_bf16_moments_cuda(float*, uint16_t*, uint16_t*, const float*, uint16_t*, int64_t, const AdamWConfig&,
                             int64_t, float, const double*, float, const CudaStream&, int64_t) {
  fail("adamw_bf16_moments_cuda: ", cuda_unavailable_reason());
}
size_t grad_sq_sum_workspace_bytes() { return 0; }
void grad_sq_sum_cuda(double*, const float*, int64_t, void*, const CudaStream&) {
  fail("grad_sq_sum_cuda: ", cuda_unavailable_reason());
}

}  // namespace sqlrl
