// Built without the CUDA toolkit: the decode step's launchers (the few-row product, the fused
// attention prologue) exist so that callers link, and fail plainly if called.
#include "kernels/decode_qkv.h"
#include "kernels/matmul.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl {

void matmul_rows_cuda(const MatmulRowsProblem&, void*, size_t, const CudaStream&) {
  fail("matmul_rows_cuda: ", cuda_unavailable_reason());
}
void decode_qkv_cuda(uint16_t*, uint16_t*, uint16_t*, const uint16_t*, const uint16_t*, const uint16_t*,
                     const int32_t*, const int32_t*, int64_t, const DecodeQkvShape&, const CudaStream&) {
  fail("decode_qkv_cuda: ", cuda_unavailable_reason());
}

}  // namespace sqlrl
