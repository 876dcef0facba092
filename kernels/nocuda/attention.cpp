// Built without CUDA: the CUDA attention entry points exist (so callers and tests link) and
// fail with the reason when called.
#include "kernels/attention.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl {

void attention_forward_cuda(uint16_t*, float*, const uint16_t*, const uint16_t*, const uint16_t*, const int32_t*,
                            int64_t, int64_t, AttentionShape, const CudaStream&, const SharedPrefixesCuda&) {
  fail("attention_forward_cuda: ", cuda_unavailable_reason());
}

size_t attention_backward_workspace_bytes(int64_t total_tokens, AttentionShape shape) {
  return static_cast<size_t>(total_tokens * shape.heads) * sizeof(float);
}

void attention_backward_cuda(uint16_t*, uint16_t*, uint16_t*, const uint16_t*, const uint16_t*, const float*,
                             const uint16_t*, const uint16_t*, const uint16_t*, const int32_t*, int64_t, int64_t,
                             int64_t, AttentionShape, void*, size_t, const CudaStream&, const SharedPrefixesCuda&) {
  fail("attention_backward_cuda: ", cuda_unavailable_reason());
}

size_t paged_attention_workspace_bytes(int64_t, AttentionShape, int64_t, int64_t) { return 0; }

void paged_attention_cuda(uint16_t*, const uint16_t*, const uint16_t*, const uint16_t*, const PagedQueries&,
                          AttentionShape, int64_t, void*, size_t, int64_t, const CudaStream&) {
  fail("paged_attention_cuda: ", cuda_unavailable_reason());
}

}  // namespace sqlrl
