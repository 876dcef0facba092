#include "runtime/error.h"
#include "runtime/random.h"

namespace sqlrl {

void fill_uniform_cuda(float*, size_t, uint64_t, uint64_t, float, float, int device) {
  fail("cuda:", device, ": ", cuda_unavailable_reason());
}
void fill_normal_cuda(float*, size_t, uint64_t, uint64_t, float, float, int device) {
  fail("cuda:", device, ": ", cuda_unavailable_reason());
}
void fill_random_bits_cuda(uint32_t*, size_t, uint64_t, uint64_t, int device) {
  fail("cuda:", device, ": ", cuda_unavailable_reason());
}

}  // namespace sqlrl
