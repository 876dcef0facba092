// The communicator of a multi-process job: who this process is (rank, world size, local rank,
// read from the launcher) and the few collectives data parallelism needs. Three transports:
//   - none: one process, world size 1; every collective is a copy or nothing;
//   - MPI (Open MPI), host buffers: `mpirun -np N` and `srun --mpi=pmix`; runtime/comm_mpi.cpp;
//   - NCCL, device buffers on the communicator's own stream; the unique id travels over MPI, or
//     over the TCP / file rendezvous of runtime/rendezvous.h when no MPI launched the job
//     (torchrun-style variables, srun without PMI); runtime/cuda/comm_nccl.cu. Without MPI, the
//     host collectives of a NCCL job are staged through the device;
//   - host-staged device collectives: ranks that share one GPU (NCCL refuses two ranks on one
//     device) copy device buffers to the host and run the MPI collective there; slower, for tests
//     of N ranks on one lent GPU (runtime/comm_device.cpp).
// Collectives sum fp32, fp64 and int64; the ordered reduce-scatter (all-to-all, then a sum in rank
// order) makes N ranks bit-identical to one process adding the N shard gradients in rank order
// (add_in_rank_order below is that sum, shared by both).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/stream.h"

namespace sqlrl {

// Where this process sits in the job. Read, in order, from the MPI launcher (Open MPI's
// OMPI_COMM_WORLD_*, PMIx's PMIX_RANK, MPICH/PMI's PMI_RANK/PMI_SIZE), then SLURM (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID), then torchrun-style RANK / WORLD_SIZE / LOCAL_RANK; nothing set:
// one process. `source` names which ("mpirun", "slurm", "env", "single process").
struct Launch {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string source = "single process";
  bool under_mpi = false;  // an MPI/PMI launcher started us: MPI_Init will find the job
};
using EnvLookup = const char* (*)(const char* name);
// Fails naming the variable when one is set but not a number, or the rank is not below the size.
Launch detect_launch(EnvLookup env);
Launch detect_launch();  // from the process environment

// Flag overrides (-1: keep what the launcher says).
struct CommOptions {
  int rank = -1, world_size = -1, local_rank = -1;
};

struct Comm {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string source = "single process";
  bool mpi = false;          // host collectives through MPI
  // The MPI communicator of the ranks this Comm spans: 0 is MPI_COMM_WORLD, others come from
  // comm_split (rollout and trainer ranks, each their own group).
  int group = 0;
  // Device collectives through host memory and MPI instead of NCCL: set (on every rank alike) by
  // app/launch.h join_job_gpu when ranks of one machine outnumber its GPUs.
  bool host_staged = false;
  int device = -1;           // the CUDA device this rank drives (join_job_gpu); -1: none chosen
  int device_sharers = 1;    // ranks on that device (comm_bind_gpu), each planning its share of its memory
  void* nccl = nullptr;      // ncclComm_t after comm_init_nccl
  void* stream = nullptr;    // the NCCL collectives' cudaStream_t
  void* staging = nullptr;   // device scratch for host collectives staged through NCCL (no MPI)
  int64_t staging_bytes = 0;
  // Wall-clock seconds spent in host collectives so far (waiting for the slowest rank
  // included): a step's share of communication is the difference across it.
  mutable double seconds = 0;
  bool is_root() const { return rank == 0; }
};

bool mpi_compiled();               // built against an MPI library (CMake found one)
std::string mpi_library_version();  // "Open MPI v4.1.4, ..." or why there is none
bool nccl_compiled();
std::string nccl_library_version();  // "2.28.9" or why there is none

// Joins the job: MPI_Init when an MPI launcher started the process (and this build has MPI).
// With several ranks it starts the watchdog: a host collective waiting longer than
// SQLRL_COMM_TIMEOUT_S seconds (default 3600; 0 = never) prints which rank gave up and ends the
// job, so a dead or stuck rank never leaves the others waiting forever.
// Fails with one line when the launcher says world size N > 1 and no transport can serve the
// host collectives (a build without MPI, or srun without --mpi=pmix on a CPU run), when the
// overrides disagree with MPI, or when the rank is out of range.
Comm comm_init(const CommOptions& options = {});
void comm_finalize(Comm& comm);  // MPI_Finalize / ncclCommDestroy; safe on a world-1 comm
// Ends every rank of the job with `code` (MPI_Abort); a plain exit when there is no MPI.
[[noreturn]] void comm_abort(const Comm& comm, int code);

// Splits `comm` by color (a collective over comm): the ranks of one color form a group, ranked in
// comm's order. The group's Comm has its own rank and world size and keeps the local rank and the
// device; its host collectives go through MPI only (a group has no NCCL communicator), so a job
// of one process or without MPI splits into groups of one. Fails for a negative color.
Comm comm_split(const Comm& comm, int color);

// ---- point to point (MPI, host buffers): messages from one rank to another arrive in the order sent ----
// `bytes` bytes to rank `to` of comm; that rank receives them with comm_recv of the same size.
void comm_send(const Comm& comm, const void* data, int64_t bytes, int to);
void comm_recv(const Comm& comm, void* data, int64_t bytes, int from);
// A message of any size: its size, then its bytes.
void comm_send_bytes(const Comm& comm, const std::string& bytes, int to);
std::string comm_recv_bytes(const Comm& comm, int from);
// A broadcast of any size from root: every other rank's `bytes` is replaced by root's.
void comm_broadcast_bytes(const Comm& comm, std::string& bytes, int root);

// ---- host collectives (every rank calls them in the same order) ----
void comm_barrier(const Comm& comm);
void comm_broadcast(const Comm& comm, void* data, int64_t bytes, int root);
void comm_all_reduce_sum(const Comm& comm, float* data, int64_t n);
void comm_all_reduce_sum(const Comm& comm, double* data, int64_t n);
void comm_all_reduce_sum(const Comm& comm, int64_t* data, int64_t n);
void comm_all_reduce_max(const Comm& comm, double* data, int64_t n);
// values[k] := sum over ranks r = 0, 1, ... (in that order, from 0.0) of rank r's values[k], on
// every rank: deterministic sums of per-rank statistics (counts exact up to 2^53). All ranks
// pass vectors of one length.
void comm_sum_in_rank_order(const Comm& comm, std::vector<double>& values);
// Every rank's bytes, in rank order, on every rank.
std::vector<std::string> comm_all_gather_bytes(const Comm& comm, const std::string& mine);

// The ZeRO partition of a flat buffer of n elements: rank r owns [bounds[r], bounds[r + 1]).
// Shards are near-equal and start at multiples of 64 elements (256-byte aligned slices), so the
// partition depends only on (n, world_size).
std::vector<int64_t> shard_bounds(int64_t n, int world_size);

// full: this rank's n elements. shard: receives the sum over ranks of full[lo, hi) for this
// rank's [lo, hi) = shard_bounds(n, world)[rank..rank+1]. ordered: all-to-all, then
// add_in_rank_order, so the bits do not depend on MPI's reduction algorithm; otherwise
// MPI_Reduce_scatter (faster, and deterministic for a fixed world size and MPI build only).
void comm_reduce_scatter_sum(const Comm& comm, const float* full, float* shard, int64_t n, bool ordered);
// The general form: this rank holds `parts` (each a whole buffer of bounds.back() elements: the
// gradients of its consecutive shards, --grad-accum on several ranks) and rank r owns
// [bounds[r], bounds[r + 1]). shard receives the sum of every rank's every part over this rank's
// range, ordered: in shard order (rank, then part), add_in_rank_order's additions, so W ranks of A
// parts each give the bits of one process adding W x A shard gradients; unordered: each rank's
// parts summed in order, then MPI_Reduce_scatter.
void comm_reduce_scatter_sum(const Comm& comm, const std::vector<const float*>& parts, float* shard,
                             const std::vector<int64_t>& bounds, bool ordered);
// The sum over ranks of `data`, in place on every rank (reduce-scatter, then all-gather).
void comm_all_reduce_sum_ordered(const Comm& comm, float* data, int64_t n);
// The general form, on every rank: `out` (bounds.back() elements; it may be one of the parts)
// receives the sum of every rank's parts: comm_reduce_scatter_sum's, then comm_all_gather's.
void comm_all_reduce_sum(const Comm& comm, const std::vector<const float*>& parts, float* out,
                         const std::vector<int64_t>& bounds, bool ordered);
// In place: every rank's shard [lo_r, hi_r) of `full` (n elements) is copied into everyone's.
void comm_all_gather(const Comm& comm, float* full, int64_t n);
// Every rank's [bounds[r], bounds[r + 1]) of `full` copied into everyone's.
void comm_all_gather(const Comm& comm, float* full, const std::vector<int64_t>& bounds);

// acc[i] = ((parts[0][i] + parts[1][i]) + parts[2][i]) + ...: the one summation order of
// deterministic reduction, shared by the ordered reduce-scatter and by one-process gradient
// accumulation over shards (--grad-accum).
void add_in_rank_order(float* acc, const std::vector<const float*>& parts, int64_t n);

// The CUDA device a trainer of this job uses: comm.device when join_job_gpu chose it, else the
// local rank with several ranks, else 0.
int comm_gpu(const Comm& comm);
// The CUDA device this rank drives: local_rank with several ranks (one per GPU of the machine), 0
// alone; recorded in comm.device and made current; with several ranks the job's NCCL
// communicator is created on it (once). When some machine has more ranks than GPUs (an MPI job
// only; otherwise an error naming the rank), ranks share GPUs round-robin (local_rank % GPUs) and
// every rank's device collectives go through host memory (comm.host_staged): N ranks on one GPU.
// Every rank calls it (the ranks agree on the transport by one all-reduce).
int comm_bind_gpu(Comm& comm);
// Whether the device collectives below can run: a NCCL communicator, or host staging.
bool comm_has_device_transport(const Comm& comm);

// ---- device collectives (runtime/comm_device.cpp: NCCL, or host-staged over MPI) ----
// Creates the NCCL communicator on CUDA device `device` (the id broadcast over MPI, or over the
// rendezvous of runtime/rendezvous.h when the job has no MPI) and its stream. One rank: a NCCL
// communicator of one, so the GPU path is the same code. Fails naming the NCCL error.
void comm_init_nccl(Comm& comm, int device);
// Device buffers. Each call orders itself after the work already queued on `after` (the
// caller's stream; nullptr handle = the legacy default stream), runs on comm.stream, and makes
// `after` wait for it: callers see plain stream order, the host is never blocked. Host-staged
// (comm.host_staged): the buffer is copied to the host after `after`'s work, the host collective
// of the same name runs (the same sums in the same order: the same bits), and the result is
// copied back before returning; the host waits.
void comm_all_reduce_sum_device(const Comm& comm, float* data, int64_t n, const CudaStream& after);
// The sum over ranks in rank order, in place on every rank (the gradient of a data-parallel CUDA
// step under --deterministic-reduce): ordered reduce-scatter, then all-gather, over chunks of
// 2^24 elements so the all-to-all's receive buffer stays at 64 MB per chunk whatever n is.
void comm_all_reduce_sum_ordered_device(const Comm& comm, float* data, int64_t n, const CudaStream& after);
// As comm_reduce_scatter_sum (ordered: all-to-all by grouped send/recv, then the sum in rank
// order, the same fp32 additions as add_in_rank_order). shard may be full + bounds[rank] (in
// place). The first form partitions by shard_bounds(n, world size).
void comm_reduce_scatter_sum_device(const Comm& comm, const float* full, float* shard, int64_t n, bool ordered,
                                    const CudaStream& after);
void comm_reduce_scatter_sum_device(const Comm& comm, const float* full, float* shard,
                                    const std::vector<int64_t>& bounds, bool ordered, const CudaStream& after);
// In place, uneven shards (grouped broadcasts, one per owner): rank r's elements
// [bounds[r], bounds[r + 1]) of `full` (elements of elem_bytes each: fp32 master, bf16 weights)
// into everyone's. The first form: floats, shard_bounds(n, world size).
void comm_all_gather_device(const Comm& comm, float* full, int64_t n, const CudaStream& after);
void comm_all_gather_device(const Comm& comm, void* full, int64_t elem_bytes, const std::vector<int64_t>& bounds,
                            const CudaStream& after);
// The NCCL implementations behind the calls above (runtime/cuda/comm_nccl.cu).
void nccl_all_reduce_sum_device(const Comm& comm, float* data, int64_t n, const CudaStream& after);
void nccl_all_reduce_sum_ordered_device(const Comm& comm, float* data, int64_t n, const CudaStream& after);
void nccl_reduce_scatter_sum_device(const Comm& comm, const float* full, float* shard,
                                    const std::vector<int64_t>& bounds, bool ordered, const CudaStream& after);
void nccl_all_gather_device(const Comm& comm, void* full, int64_t elem_bytes, const std::vector<int64_t>& bounds,
                            const CudaStream& after);
// Host collectives of a job without MPI go through NCCL via comm.staging (comm.cpp calls these).
void nccl_host_all_reduce(const Comm& comm, void* data, int64_t n, int dtype, bool max);
void nccl_host_broadcast(const Comm& comm, void* data, int64_t bytes, int root);
void nccl_destroy(Comm& comm);

// ---- the MPI transport (runtime/comm_mpi.cpp; comm.cpp dispatches to it when comm.mpi) ----
namespace mpi {
enum class Type : uint8_t { F32, F64, I64, Bytes };
bool init(int& rank, int& world_size);  // false: this build has no MPI
void finalize();
[[noreturn]] void abort(int code);
// Every call below runs on communicator `group` (Comm::group: 0 is MPI_COMM_WORLD).
// A new group of the ranks of `group` with one color; its rank and size.
int split(int group, int color, int& rank, int& world_size);
void barrier(int group);
void broadcast(int group, void* data, int64_t bytes, int root);
void all_reduce(int group, void* data, int64_t n, Type type, bool max);
void send(int group, const void* data, int64_t bytes, int to);
void recv(int group, void* data, int64_t bytes, int from);
// send: world blocks, block r of counts[r] floats for rank r; recv: world blocks of counts[rank].
void all_to_all(int group, const float* send, const std::vector<int64_t>& send_counts, float* recv, int64_t recv_count);
void reduce_scatter(int group, const float* full, float* shard, const std::vector<int64_t>& counts);
void all_gather(int group, float* full, const std::vector<int64_t>& counts);  // in place, shard r at its offset
}  // namespace mpi

}  // namespace sqlrl
