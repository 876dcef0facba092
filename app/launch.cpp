#include "app/launch.h"

#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl {

namespace {
std::unique_ptr<Comm> g_job;
}

void add_launch_flags(CLI::App* cmd, CommOptions& o) {
  cmd->add_option("--rank", o.rank, "this process's rank (default: from mpirun, srun or RANK)")->group("Launch");
  cmd->add_option("--world-size", o.world_size, "processes in the job (default: from mpirun, srun or WORLD_SIZE)")
      ->group("Launch");
  cmd->add_option("--local-rank", o.local_rank, "rank on this machine, the GPU it uses (default: from the launcher)")
      ->group("Launch");
}

const Comm& join_job(const CommOptions& options) {
  if (!g_job) g_job = std::make_unique<Comm>(comm_init(options));
  return *g_job;
}

int join_job_gpu() {
  check(g_job != nullptr, "join_job_gpu before join_job");
  return comm_bind_gpu(*g_job);
}

int join_job_device(DeviceType device) { return device == DeviceType::CUDA ? join_job_gpu() : 0; }

const Comm* joined_job() { return g_job.get(); }

void leave_job() {
  if (g_job) comm_finalize(*g_job);
}

}  // namespace sqlrl
