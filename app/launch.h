// The multi-process job a command joins (runtime/comm.h): `mpirun -np N llm_sqlrl train ...`,
// `srun llm_sqlrl train ...` or torchrun-style RANK/WORLD_SIZE. Commands that run data-parallel
// take --rank/--world-size/--local-rank (overrides of the launcher's variables) and call
// join_job; main() reports an error of any rank with the rank in it and ends the whole job
// (comm_abort), so no rank waits forever on one that failed.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>

#include "runtime/comm.h"
#include "runtime/device.h"

namespace sqlrl {

// Adds the three override flags (not config keys: where a process runs is not part of a run's
// settings) filling `options`.
void add_launch_flags(CLI::App* cmd, CommOptions& options);
// comm_init once per process; later calls return the same communicator.
const Comm& join_job(const CommOptions& options);
// runtime/comm.h comm_bind_gpu on the job's communicator. Call after join_job.
int join_job_gpu();
// The rank's device for a command run on `device`: join_job_gpu on CUDA (each rank on its GPU,
// NCCL or host staging between them), nothing on the CPU. Returns the GPU index (0 on the CPU).
int join_job_device(DeviceType device);
// The joined job, or null when the command runs alone.
const Comm* joined_job();
// MPI_Finalize (and NCCL teardown) at a normal exit.
void leave_job();

}  // namespace sqlrl
