// Built without the CUDA toolkit: the CUDA launchers of the GRPO kernels (advantage, loss,
// AdamW, grad norm) exist so that callers and tests link, and fail plainly if called.
#include "kernels/adamw.h"
#include "kernels/advantage.h"
#include "kernels/grpo_loss.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl {

void group_advantage_cuda(float*, const float*, int64_t, int64_t, AdvantageOptions, const CudaStream&) {
  fail("group_advantage_cuda: ", cuda_unavailable_reason());
}
void broadcast_spans_cuda(float*, const float*, const int32_t*, int64_t, int64_t, const CudaStream&) {
  fail("broadcast_spans_cuda: ", cuda_unavailable_reason());
}

size_t grpo_loss_workspace_bytes(int64_t, int64_t) { return 0; }
void grpo_loss_cuda(float*, GrpoLossStats*, const float*, const float*, const float*, const float*, const uint8_t*,
                    const int32_t*, int64_t, int64_t, const GrpoLossConfig&, void*, const CudaStream&) {
  fail("grpo_loss_cuda: ", cuda_unavailable_reason());
}

void adamw_cuda(float*, float*, float*, const float*, uint16_t*, int64_t, const AdamWConfig&, int64_t, float,
                const double*, float, const CudaStream&) {
  fail("adamw_cuda: ", cuda_unavailable_reason());
}
size_t grad_sq_sum_workspace_bytes() { return 0; }
void grad_sq_sum_cuda(double*, const float*, int64_t, void*, const CudaStream&) {
  fail("grad_sq_sum_cuda: ", cuda_unavailable_reason());
}

}  // namespace sqlrl
