#include "runtime/error.h"
#include "runtime/gemm.h"

namespace sqlrl {

void gemm_cuda(const GemmProblem&, int device, const CudaStream&) {
  fail("gemm on cuda:", device, ": ", cuda_unavailable_reason());
}

}  // namespace sqlrl
