// Built without the CUDA toolkit: the CUDA launchers of the log-prob and sampling kernels exist
// so that callers link, and fail plainly if called.
#include "kernels/logprob.h"
#include "kernels/sampling.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl {

size_t logprob_cuda_workspace_bytes(const LogprobCudaShape&) { return 0; }
void logprob_forward_cuda(float*, float*, float*, const uint16_t*, const uint16_t*, const int32_t*,
                          const LogprobCudaShape&, void*, size_t, const CudaStream&) {
  fail("logprob_forward_cuda: ", cuda_unavailable_reason());
}
void logprob_backward_cuda(uint16_t*, float*, const float*, const float*, const uint16_t*, const uint16_t*,
                           const int32_t*, const float*, const float*, const LogprobCudaShape&, void*, size_t,
                           const CudaStream&) {
  fail("logprob_backward_cuda: ", cuda_unavailable_reason());
}

size_t sample_tokens_cuda_workspace_bytes(int64_t, int64_t) { return 0; }
void sample_tokens_cuda(SampledToken*, const float*, int64_t, int64_t, int64_t, const SamplingRequest*, void*, size_t,
                        const CudaStream&) {
  fail("sample_tokens_cuda: ", cuda_unavailable_reason());
}

}  // namespace sqlrl
