// Which OpenBLAS kernels ("core") the CPU GEMMs run: chosen, not inherited.
//
// Debian's OpenBLAS is built for every x86-64 core (DYNAMIC_ARCH) and picks one from cpuid when
// it loads. On CPUs newer than the library it falls back to an old one: Debian 12's 0.3.21 calls
// a current Intel Xeon (family 6, model 207, AVX-512) `Prescott` and runs SSE3 kernels, 4.4x
// slower than its own `Cooperlake` kernels there. OpenBLAS reads OPENBLAS_CORETYPE only when it
// is loaded, so the choice is made first thing in main(): where the core OpenBLAS took is below
// what the CPU runs, the process sets OPENBLAS_CORETYPE and executes itself again, once.
//
// The core also fixes the GEMMs' bits (each core blocks and sums in its own order), so a run
// records its core and a resume on another core is refused unless asked (rl/run_folder.h).
#pragma once
#include <string>
#include <vector>

namespace sqlrl {

enum class CpuKernels { fast, portable, inherit };

// The modes of --cpu-kernels, one row each.
struct CpuKernelsMode {
  const char* name;
  CpuKernels mode;
  const char* help;
};
const std::vector<CpuKernelsMode>& cpu_kernel_modes();
const CpuKernelsMode* find_cpu_kernels_mode(const std::string& name);  // null when unknown
std::string cpu_kernels_help();  // "fast: ... portable: ... inherit: ..." for --help

// What cpuid says this CPU runs, as far as OpenBLAS's cores go.
struct CpuFeatures {
  bool amd = false;
  bool avx = false, avx2_fma = false, avx512 = false, avx512_bf16 = false;
};
CpuFeatures cpu_features();

// The vector ISA level of an OpenBLAS core name (case-insensitive): 0 SSE-class, 1 AVX,
// 2 AVX2, 3 AVX-512; -1 for a name this table does not know.
int blas_core_level(const std::string& core);
// The level the CPU deserves: on AMD, OpenBLAS's own Zen kernels count as the best (AVX2) even
// where the CPU has AVX-512, so "fast" never moves an AMD machine off the core it already runs.
int wanted_blas_level(const CpuFeatures& cpu);
// The core to run: "" = keep `current` (OpenBLAS's choice). Errors (portable on a CPU without
// AVX2 and FMA) name the mode and what is missing.
std::string pick_blas_core(CpuKernels mode, const CpuFeatures& cpu, const std::string& current);

// First thing in main(): reads --cpu-kernels MODE / --cpu-kernels=MODE from argv (default
// fast; an unknown name is left to the command-line parser to refuse), and where the pick
// differs from the core OpenBLAS loaded, sets OPENBLAS_CORETYPE (and, for portable, caps this
// program's own kernels at AVX2: SQLRL_CPU_ISA) and executes /proc/self/exe again with the same
// arguments. Returns normally otherwise; prints a warning when the library ignored the request.
void choose_cpu_kernels(int argc, char** argv);

// After choose_cpu_kernels: the mode in force and the core OpenBLAS runs (openblas_get_corename),
// and the core it had picked by itself when another was asked for ("" when none was).
CpuKernels cpu_kernels_mode();
const char* cpu_kernels_mode_name();
std::string blas_core();
std::string blas_core_inherited();

}  // namespace sqlrl
