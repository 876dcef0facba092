// The NCCL transport of runtime/comm.h: device buffers, the communicator's own non-blocking
// stream, ordering against the caller's stream by events. Shards are uneven (shard_bounds), and
// NCCL's reduce-scatter / all-gather want equal counts, so those are grouped per-owner reduces
// and broadcasts; the ordered reduce-scatter is an all-to-all of grouped send/recv and a kernel
// summing the received blocks in rank order.
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "runtime/comm.h"
#include "runtime/cuda/check.h"
#include "runtime/rendezvous.h"

namespace sqlrl {

namespace {

void nccl_ok(ncclResult_t r, const char* call, int rank) {
  if (r == ncclSuccess) return;
  fail("NCCL (rank ", rank, "): ", call, ": ", ncclGetErrorString(r),
       r == ncclSystemError || r == ncclRemoteError ? " (another rank may have died; NCCL_DEBUG=WARN says more)" : "");
}

ncclComm_t handle(const Comm& c) {
  check(c.nccl != nullptr, "rank ", c.rank, ": device collective without a NCCL communicator (comm_init_nccl)");
  return static_cast<ncclComm_t>(c.nccl);
}
cudaStream_t comm_stream(const Comm& c) { return static_cast<cudaStream_t>(c.stream); }
cudaStream_t user_stream(const CudaStream& s) { return static_cast<cudaStream_t>(s.handle); }

// comm.stream waits for `after`; the returned guard makes `after` wait for comm.stream.
struct Ordered {
  const Comm& c;
  cudaStream_t after;
  Ordered(const Comm& comm, cudaStream_t s) : c(comm), after(s) { link(after, comm_stream(c)); }
  ~Ordered() noexcept(false) { link(comm_stream(c), after); }
  static void link(cudaStream_t from, cudaStream_t to) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(e, from));
    CUDA_CHECK(cudaStreamWaitEvent(to, e, 0));
    CUDA_CHECK(cudaEventDestroy(e));
  }
};

__global__ void sum_in_rank_order_kernel(float* out, const float* parts, int64_t count, int world) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = parts[i];
    for (int r = 1; r < world; ++r) s = __fadd_rn(s, parts[r * count + i]);  // never contracted, as on the CPU
    out[i] = s;
  }
}

ncclDataType_t nccl_type(int type) {
  switch (static_cast<mpi::Type>(type)) {
    case mpi::Type::F32: return ncclFloat32;
    case mpi::Type::F64: return ncclFloat64;
    case mpi::Type::I64: return ncclInt64;
    case mpi::Type::Bytes: return ncclUint8;
  }
  return ncclUint8;
}
size_t nccl_size(int type) {
  return static_cast<mpi::Type>(type) == mpi::Type::F32 ? 4 : static_cast<mpi::Type>(type) == mpi::Type::Bytes ? 1 : 8;
}

}  // namespace

bool nccl_compiled() { return true; }

std::string nccl_library_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return str_cat(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
}

void comm_init_nccl(Comm& c, int device) {
  check(c.nccl == nullptr, "rank ", c.rank, ": NCCL communicator already created");
  CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (c.rank == 0) nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId", c.rank);
  if (c.world_size > 1) {
    if (c.mpi) {
      comm_broadcast(c, &id, sizeof id, 0);
    } else {
      std::string got = rendezvous_broadcast(rendezvous_from_env(), c.rank, c.world_size,
                                             std::string(reinterpret_cast<const char*>(&id), sizeof id));
      check(got.size() == sizeof id, "rank ", c.rank, ": rendezvous payload of ", got.size(), " bytes, expected ",
            sizeof id);
      std::memcpy(&id, got.data(), sizeof id);
    }
  }
  ncclComm_t comm = nullptr;
  nccl_ok(ncclCommInitRank(&comm, c.world_size, id, c.rank), "ncclCommInitRank", c.rank);
  c.nccl = comm;
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  c.stream = s;
}

void nccl_destroy(Comm& c) {
  if (c.staging) cudaFree(c.staging);
  if (c.nccl) ncclCommDestroy(static_cast<ncclComm_t>(c.nccl));
  if (c.stream) cudaStreamDestroy(comm_stream(c));
  c.staging = nullptr, c.staging_bytes = 0, c.nccl = nullptr, c.stream = nullptr;
}

void nccl_all_reduce_sum_device(const Comm& c, float* data, int64_t n, const CudaStream& after) {
  if (n == 0) return;
  Ordered order(c, user_stream(after));
  nccl_ok(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat32, ncclSum, handle(c), comm_stream(c)),
          "ncclAllReduce", c.rank);
}

void nccl_reduce_scatter_sum_device(const Comm& c, const float* full, float* shard, const std::vector<int64_t>& b,
                                    bool ordered, const CudaStream& after) {
  check(static_cast<int>(b.size()) == c.world_size + 1, "reduce-scatter (NCCL): ", b.size(), " bounds for ",
        c.world_size, " ranks");
  const int64_t count = b[c.rank + 1] - b[c.rank];
  Ordered order(c, user_stream(after));
  cudaStream_t s = comm_stream(c);
  ncclComm_t h = handle(c);
  if (!ordered) {
    nccl_ok(ncclGroupStart(), "ncclGroupStart", c.rank);
    for (int r = 0; r < c.world_size; ++r) {
      const int64_t k = b[r + 1] - b[r];
      if (k == 0) continue;
      // recvbuff is read only at the root; elsewhere any valid device pointer.
      nccl_ok(ncclReduce(full + b[r], r == c.rank ? shard : const_cast<float*>(full + b[r]), static_cast<size_t>(k), ncclFloat32, ncclSum, r, h, s),
              "ncclReduce", c.rank);
    }
    nccl_ok(ncclGroupEnd(), "ncclGroupEnd", c.rank);
    return;
  }
  float* recv = nullptr;
  const size_t recv_bytes = static_cast<size_t>(count) * c.world_size * sizeof(float);
  if (recv_bytes > 0) CUDA_CHECK(cudaMallocAsync(&recv, recv_bytes, s));
  nccl_ok(ncclGroupStart(), "ncclGroupStart", c.rank);
  for (int r = 0; r < c.world_size; ++r) {
    const int64_t k = b[r + 1] - b[r];
    if (k > 0) nccl_ok(ncclSend(full + b[r], static_cast<size_t>(k), ncclFloat32, r, h, s), "ncclSend", c.rank);
    if (count > 0) nccl_ok(ncclRecv(recv + r * count, static_cast<size_t>(count), ncclFloat32, r, h, s), "ncclRecv", c.rank);
  }
  nccl_ok(ncclGroupEnd(), "ncclGroupEnd", c.rank);
  if (count > 0) {
    // In place (shard == full + b[rank]) is safe: the sends read it before this kernel, in stream order.
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((count + threads - 1) / threads, 4096);
    sum_in_rank_order_kernel<<<static_cast<unsigned>(blocks), threads, 0, s>>>(shard, recv, count, c.world_size);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaFreeAsync(recv, s));
  }
}

void nccl_all_gather_device(const Comm& c, void* full, int64_t elem_bytes, const std::vector<int64_t>& b,
                            const CudaStream& after) {
  if (c.world_size == 1) return;
  check(static_cast<int>(b.size()) == c.world_size + 1, "all-gather (NCCL): ", b.size(), " bounds for ", c.world_size,
        " ranks");
  char* bytes = static_cast<char*>(full);
  Ordered order(c, user_stream(after));
  nccl_ok(ncclGroupStart(), "ncclGroupStart", c.rank);
  for (int r = 0; r < c.world_size; ++r) {
    const int64_t k = (b[r + 1] - b[r]) * elem_bytes;
    char* at = bytes + b[r] * elem_bytes;
    if (k > 0)
      nccl_ok(ncclBroadcast(at, at, static_cast<size_t>(k), ncclUint8, r, handle(c), comm_stream(c)), "ncclBroadcast",
              c.rank);
  }
  nccl_ok(ncclGroupEnd(), "ncclGroupEnd", c.rank);
}

void nccl_all_reduce_sum_ordered_device(const Comm& c, float* data, int64_t n, const CudaStream& after) {
  constexpr int64_t kChunk = int64_t(1) << 24;
  for (int64_t a = 0; a < n; a += kChunk) {
    const int64_t k = std::min(kChunk, n - a);
    // The chunk's own partition: every rank sums one slice in rank order (in place), then all gather.
    const std::vector<int64_t> b = shard_bounds(k, c.world_size);
    nccl_reduce_scatter_sum_device(c, data + a, data + a + b[c.rank], b, /*ordered=*/true, after);
    nccl_all_gather_device(c, data + a, sizeof(float), b, after);
  }
}

// Host collectives without MPI: through a device staging buffer, synchronously.
static void* staging(const Comm& c, int64_t bytes) {
  Comm& m = const_cast<Comm&>(c);  // the scratch buffer is a cache, not part of the comm's meaning
  if (m.staging_bytes < bytes) {
    if (m.staging) CUDA_CHECK(cudaFree(m.staging));
    m.staging = nullptr, m.staging_bytes = 0;
    CUDA_CHECK(cudaMalloc(&m.staging, static_cast<size_t>(bytes)));
    m.staging_bytes = bytes;
  }
  return m.staging;
}

void nccl_host_all_reduce(const Comm& c, void* data, int64_t n, int type, bool max) {
  const size_t bytes = static_cast<size_t>(n) * nccl_size(type);
  void* d = staging(c, static_cast<int64_t>(bytes));
  cudaStream_t s = comm_stream(c);
  CUDA_CHECK(cudaMemcpyAsync(d, data, bytes, cudaMemcpyHostToDevice, s));
  nccl_ok(ncclAllReduce(d, d, static_cast<size_t>(n), nccl_type(type), max ? ncclMax : ncclSum, handle(c), s),
          "ncclAllReduce (host data)", c.rank);
  CUDA_CHECK(cudaMemcpyAsync(data, d, bytes, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
}

void nccl_host_broadcast(const Comm& c, void* data, int64_t bytes, int root) {
  void* d = staging(c, bytes);
  cudaStream_t s = comm_stream(c);
  CUDA_CHECK(cudaMemcpyAsync(d, data, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, s));
  nccl_ok(ncclBroadcast(d, d, static_cast<size_t>(bytes), ncclUint8, root, handle(c), s), "ncclBroadcast (host data)",
          c.rank);
  CUDA_CHECK(cudaMemcpyAsync(data, d, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace sqlrl
