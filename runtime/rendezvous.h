// Rank 0 hands a few bytes (the NCCL unique id) to every other rank of a job that has no MPI:
// torchrun-style variables or `srun` without PMI. Two ways, as torch.distributed's:
//   - TCP: rank 0 listens on MASTER_PORT, the others connect to MASTER_ADDR:MASTER_PORT;
//   - a file on a filesystem every rank sees (SQLRL_RENDEZVOUS_FILE): rank 0 writes it atomically,
//     the others poll. The file carries a job key (SLURM_JOB_ID.SLURM_STEP_ID, or MASTER_PORT) so a
//     stale file of an earlier job is never read.
// Both give up after `timeout_s` with an error naming the address or file and the rank.
#pragma once
#include <string>

namespace sqlrl {

struct Rendezvous {
  std::string file;          // set: the file way
  std::string addr;          // MASTER_ADDR (TCP)
  int port = 0;              // MASTER_PORT
  std::string job_key;       // the file's key
  double timeout_s = 300;
};
// From SQLRL_RENDEZVOUS_FILE, MASTER_ADDR, MASTER_PORT (and the job key's variables); fails
// saying which variables a job without MPI must set when none is.
Rendezvous rendezvous_from_env();

// Rank 0 passes `payload` and gets it back; every other rank gets rank 0's payload. All
// world_size ranks must call it.
std::string rendezvous_broadcast(const Rendezvous& r, int rank, int world_size, const std::string& payload);

}  // namespace sqlrl
