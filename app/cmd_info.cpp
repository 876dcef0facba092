// `llm_sqlrl info`: what this build can use — CPU threads, CUDA devices (or why none), the
// multi-process transports (MPI, NCCL) and where the launcher put this process.
#include <cstdio>
#include <thread>

#include "app/commands.h"
#include "runtime/blas_core.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace sqlrl {

void add_info_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("info", "Print the build's capabilities and the devices it sees");
  cmd->callback([] {
    std::printf("llm_sqlrl 0.1\n");
    std::printf("cpu threads : %u\n", std::thread::hardware_concurrency());
    const CpuFeatures cpu = cpu_features();
    std::printf("cpu isa     : %s%s%s%s%s\n", cpu.amd ? "AMD, " : "", cpu.avx ? "avx" : "no avx",
                cpu.avx2_fma ? ", avx2+fma" : "", cpu.avx512 ? ", avx512" : "", cpu.avx512_bf16 ? ", avx512_bf16" : "");
    const std::string inherited = blas_core_inherited();
    std::printf("cpu kernels : %s: OpenBLAS core %s%s\n", cpu_kernels_mode_name(), blas_core().c_str(),
                inherited.empty() ? "" : str_cat(" (it had picked ", inherited, ")").c_str());
    std::printf("cuda        : %s\n", cuda_compiled() ? "compiled in" : "not compiled (CPU-only build)");
    std::printf("mpi         : %s\n", mpi_library_version().c_str());
    std::printf("nccl        : %s\n", nccl_library_version().c_str());
    Launch launch = detect_launch();
    std::printf("launch      : rank %d of %d, local rank %d (%s)\n", launch.rank, launch.world_size, launch.local_rank,
                launch.source.c_str());
    int n = cuda_device_count();
    if (n == 0) {
      std::printf("devices     : %s\n", cuda_unavailable_reason().c_str());
      return;
    }
    for (int i = 0; i < n; ++i) {
      CudaDeviceInfo info = cuda_device_info(i);
      std::printf("cuda:%d      : %s, sm_%d%d, %d SMs, %.1f GiB, driver %d, runtime %d\n", i, info.name.c_str(),
                  info.sm_major, info.sm_minor, info.multiprocessors, info.total_memory / double(1 << 30),
                  info.driver_version, info.runtime_version);
    }
  });
}

}  // namespace sqlrl
