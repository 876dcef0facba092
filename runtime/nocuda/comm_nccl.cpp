#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl {

bool nccl_compiled() { return false; }
std::string nccl_library_version() { return "none (built without CUDA)"; }

void comm_init_nccl(Comm& c, int device) { fail("rank ", c.rank, ": NCCL on cuda:", device, ": ", cuda_unavailable_reason()); }
void nccl_destroy(Comm& c) { c.nccl = nullptr, c.stream = nullptr, c.staging = nullptr, c.staging_bytes = 0; }
void nccl_all_reduce_sum_device(const Comm&, float*, int64_t, const CudaStream&) { fail(cuda_unavailable_reason()); }
void nccl_all_reduce_sum_ordered_device(const Comm&, float*, int64_t, const CudaStream&) { fail(cuda_unavailable_reason()); }
void nccl_reduce_scatter_sum_device(const Comm&, const float*, float*, const std::vector<int64_t>&, bool,
                                    const CudaStream&) {
  fail(cuda_unavailable_reason());
}
void nccl_all_gather_device(const Comm&, void*, int64_t, const std::vector<int64_t>&, const CudaStream&) {
  fail(cuda_unavailable_reason());
}
void nccl_host_all_reduce(const Comm&, void*, int64_t, int, bool) { fail(cuda_unavailable_reason()); }
void nccl_host_broadcast(const Comm&, void*, int64_t, int) { fail(cuda_unavailable_reason()); }

}  // namespace sqlrl
