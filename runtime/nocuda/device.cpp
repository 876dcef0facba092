// Built without the CUDA toolkit: every CUDA entry point reports that plainly.
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl {

bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return "no CUDA device: llm_sqlrl was built without the CUDA toolkit"; }
CudaDeviceInfo cuda_device_info(int index) { fail("cuda:", index, ": ", cuda_unavailable_reason()); }
void cuda_set_device(int index) { fail("cuda:", index, ": ", cuda_unavailable_reason()); }
void cuda_synchronize() { fail(cuda_unavailable_reason()); }

}  // namespace sqlrl
