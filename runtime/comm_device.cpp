// The device collectives of runtime/comm.h: NCCL between GPUs (runtime/cuda/comm_nccl.cu), or,
// when ranks share a GPU (NCCL refuses two ranks on one device), staged through host memory: the
// device range is copied to the host once the caller's stream has produced it, the host
// collective of the same meaning runs over MPI (the same sums in the same order as NCCL's ordered
// path: the same bits), and the result is copied back. The host waits; it is the transport of
// tests (2 and 4 ranks on one lent GPU), not of production.
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/device_memory.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace sqlrl {

int comm_gpu(const Comm& comm) {
  if (comm.device >= 0) return comm.device;
  return comm.world_size > 1 ? comm.local_rank : 0;
}

bool comm_has_device_transport(const Comm& comm) { return comm.nccl != nullptr || comm.host_staged; }

int comm_bind_gpu(Comm& job) {
  const int count = cuda_device_count();
  check(count > 0, "device cuda: ", cuda_unavailable_reason());
  if (job.world_size == 1) {
    job.device = 0;
    cuda_set_device(0);
    return 0;
  }
  // More ranks on a machine than GPUs: they share them round-robin and exchange device buffers
  // through host memory over MPI (NCCL refuses two ranks on one device). Every rank must take the
  // same transport, so the ranks agree on it by one all-reduce.
  int64_t crowded = job.local_rank >= count ? 1 : 0;
  if (job.mpi) comm_all_reduce_sum(job, &crowded, 1);
  check(crowded == 0 || job.mpi, "device cuda: rank ", job.rank, " has local rank ", job.local_rank,
        " but this machine has ", count, " GPU", count == 1 ? "" : "s",
        ": start at most that many ranks per machine, or start the job with mpirun (ranks sharing a GPU exchange "
        "through host memory over MPI)");
  const int gpu = job.local_rank % count;
  job.device = gpu;
  cuda_set_device(gpu);
  if (crowded > 0) {
    job.host_staged = true;
    // How many ranks drive this GPU (this machine's ranks with the same index): each plans a share.
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const std::string mine = str_cat(host, "#", gpu);
    job.device_sharers = 0;
    for (const std::string& other : comm_all_gather_bytes(job, mine)) job.device_sharers += other == mine;
    if (job.is_root())
      log_info("device cuda: ", job.world_size, " ranks share ", count, " GPU", count == 1 ? "" : "s",
               " on some machine: device collectives go through host memory over MPI, not NCCL (slower; meant for "
               "tests)");
  } else if (job.nccl == nullptr) {
    comm_init_nccl(job, gpu);
  }
  return gpu;
}

namespace {

// Host bytes of a device range, after the work queued on `after`.
std::vector<char> download(const void* device, int64_t bytes, const CudaStream& after) {
  std::vector<char> host(static_cast<size_t>(bytes));
  if (bytes > 0) {
    cuda_copy_async(host.data(), device, static_cast<size_t>(bytes), after);
    cuda_stream_synchronize(after);
  }
  return host;
}

void upload(void* device, const void* host, int64_t bytes, const CudaStream& after) {
  if (bytes <= 0) return;
  cuda_copy_async(device, host, static_cast<size_t>(bytes), after);
  cuda_stream_synchronize(after);  // `host` dies with the caller's frame
}

float* floats(std::vector<char>& bytes) { return reinterpret_cast<float*>(bytes.data()); }

}  // namespace

void comm_all_reduce_sum_device(const Comm& c, float* data, int64_t n, const CudaStream& after) {
  if (!c.host_staged) return nccl_all_reduce_sum_device(c, data, n, after);
  if (c.world_size == 1 || n == 0) return;
  std::vector<char> h = download(data, n * 4, after);
  comm_all_reduce_sum(c, floats(h), n);
  upload(data, h.data(), n * 4, after);
}

void comm_all_reduce_sum_ordered_device(const Comm& c, float* data, int64_t n, const CudaStream& after) {
  if (!c.host_staged) return nccl_all_reduce_sum_ordered_device(c, data, n, after);
  if (c.world_size == 1 || n == 0) return;
  std::vector<char> h = download(data, n * 4, after);
  comm_all_reduce_sum_ordered(c, floats(h), n);
  upload(data, h.data(), n * 4, after);
}

void comm_reduce_scatter_sum_device(const Comm& c, const float* full, float* shard, int64_t n, bool ordered,
                                    const CudaStream& after) {
  comm_reduce_scatter_sum_device(c, full, shard, shard_bounds(n, c.world_size), ordered, after);
}

void comm_reduce_scatter_sum_device(const Comm& c, const float* full, float* shard, const std::vector<int64_t>& bounds,
                                    bool ordered, const CudaStream& after) {
  check(static_cast<int>(bounds.size()) == c.world_size + 1, "reduce-scatter (device): ", bounds.size(),
        " bounds for ", c.world_size, " ranks");
  if (!c.host_staged) return nccl_reduce_scatter_sum_device(c, full, shard, bounds, ordered, after);
  const int64_t n = bounds.back(), count = bounds[c.rank + 1] - bounds[c.rank];
  std::vector<char> h = download(full, n * 4, after);  // before the upload: shard may lie inside full
  std::vector<float> mine(static_cast<size_t>(count));
  comm_reduce_scatter_sum(c, {floats(h)}, mine.data(), bounds, ordered);
  upload(shard, mine.data(), count * 4, after);
}

void comm_all_gather_device(const Comm& c, float* full, int64_t n, const CudaStream& after) {
  comm_all_gather_device(c, full, sizeof(float), shard_bounds(n, c.world_size), after);
}

void comm_all_gather_device(const Comm& c, void* full, int64_t elem_bytes, const std::vector<int64_t>& bounds,
                            const CudaStream& after) {
  check(static_cast<int>(bounds.size()) == c.world_size + 1, "all-gather (device): ", bounds.size(), " bounds for ",
        c.world_size, " ranks");
  check(elem_bytes > 0, "all-gather (device): element size ", elem_bytes);
  if (!c.host_staged) return nccl_all_gather_device(c, full, elem_bytes, bounds, after);
  if (c.world_size == 1) return;
  const int64_t bytes = bounds.back() * elem_bytes;
  std::vector<char> h = download(full, bytes, after);
  // One broadcast per owner: any element size, uneven shards.
  for (int r = 0; r < c.world_size; ++r)
    if (const int64_t k = (bounds[r + 1] - bounds[r]) * elem_bytes; k > 0)
      comm_broadcast(c, h.data() + bounds[r] * elem_bytes, k, r);
  upload(full, h.data(), bytes, after);
}

}  // namespace sqlrl
