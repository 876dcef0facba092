#include "runtime/blas_core.h"

#include <cblas.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "runtime/error.h"

namespace sqlrl {
namespace {

// Set in the environment of the process that executes itself again: the core OpenBLAS had
// picked by itself (for `info` and the run's record), removed at once by the new process.
constexpr const char* kInheritedVar = "SQLRL_BLAS_CORE_INHERITED";

CpuKernels g_mode = CpuKernels::fast;
std::string g_inherited;

bool same_name(const std::string& a, const std::string& b) { return strcasecmp(a.c_str(), b.c_str()) == 0; }

std::vector<std::string> argv_of_this_process() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t at = 0; at < all.size();) {
    const size_t end = all.find('\0', at);
    args.push_back(all.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return args;
}

std::string mode_from_args(const std::vector<std::string>& args) {
  std::string name = "fast";
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--cpu-kernels" && i + 1 < args.size()) name = args[i + 1];
    else if (args[i].rfind("--cpu-kernels=", 0) == 0) name = args[i].substr(std::strlen("--cpu-kernels="));
  }
  return name;
}

}  // namespace

const std::vector<CpuKernelsMode>& cpu_kernel_modes() {
  static const std::vector<CpuKernelsMode> modes = {
      {"fast", CpuKernels::fast,
       "the best OpenBLAS kernels this CPU runs (AVX-512 ones on Intel CPUs that have it), wherever OpenBLAS "
       "picked older ones; AMD CPUs keep OpenBLAS's Zen kernels"},
      {"portable", CpuKernels::portable,
       "OpenBLAS's Haswell kernels and this program's AVX2 ones on every x86-64 CPU with AVX2 and FMA: the same "
       "bits on Intel and AMD machines (at the same OpenBLAS thread count)"},
      {"inherit", CpuKernels::inherit,
       "whatever OpenBLAS picked when it loaded (OPENBLAS_CORETYPE honoured); a resume on another core goes on "
       "with a note instead of an error"},
  };
  return modes;
}

const CpuKernelsMode* find_cpu_kernels_mode(const std::string& name) {
  for (const CpuKernelsMode& m : cpu_kernel_modes())
    if (name == m.name) return &m;
  return nullptr;
}

std::string cpu_kernels_help() {
  std::string help = "Which CPU GEMM kernels to run (they fix a CPU run's bits):";
  for (const CpuKernelsMode& m : cpu_kernel_modes()) help += str_cat(" ", m.name, ": ", m.help, ".");
  return help + " Default: fast.";
}

CpuFeatures cpu_features() {
  __builtin_cpu_init();
  CpuFeatures f;
  f.amd = __builtin_cpu_is("amd");
  // libgcc's cpuid also checks that the OS saves the ymm / zmm state (XGETBV).
  f.avx = __builtin_cpu_supports("avx");
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  // OpenBLAS's SkylakeX kernels use F, BW, VL, DQ and CD.
  f.avx512 = f.avx2_fma && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512cd");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
  return f;
}

int blas_core_level(const std::string& core) {
  // OpenBLAS 0.3.21's x86-64 core names (driver/others/dynamic.c), by the widest vectors their
  // single-precision kernels use.
  static const struct {
    const char* name;
    int level;
  } cores[] = {
      {"Katmai", 0},      {"Coppermine", 0},   {"Northwood", 0}, {"Prescott", 0},  {"Banias", 0},
      {"Atom", 0},        {"Core2", 0},        {"Penryn", 0},    {"Dunnington", 0}, {"Nehalem", 0},
      {"Athlon", 0},      {"Opteron", 0},      {"Opteron_SSE3", 0}, {"Barcelona", 0}, {"Nano", 0},
      {"Bobcat", 0},      {"Sandybridge", 1},  {"Bulldozer", 1}, {"Piledriver", 1}, {"Steamroller", 1},
      {"Excavator", 1},   {"Haswell", 2},      {"Zen", 2},       {"SkylakeX", 3},  {"Cooperlake", 3},
      {"SapphireRapids", 3},
  };
  for (const auto& c : cores)
    if (same_name(core, c.name)) return c.level;
  return -1;
}

int wanted_blas_level(const CpuFeatures& cpu) {
  const int level = cpu.avx512 ? 3 : cpu.avx2_fma ? 2 : cpu.avx ? 1 : 0;
  return cpu.amd ? std::min(level, 2) : level;
}

std::string pick_blas_core(CpuKernels mode, const CpuFeatures& cpu, const std::string& current) {
  switch (mode) {
    case CpuKernels::inherit:
      return "";
    case CpuKernels::portable:
      check(cpu.avx2_fma, "--cpu-kernels portable: this CPU lacks AVX2 or FMA, which the portable kernels (OpenBLAS "
            "Haswell) need; use --cpu-kernels fast");
      return same_name(current, "Haswell") ? "" : "Haswell";
    case CpuKernels::fast: {
      const int want = wanted_blas_level(cpu), have = blas_core_level(current);
      // A core this table does not know is newer than it: OpenBLAS's choice stands.
      if (have < 0 || have >= want) return "";
      if (want == 3) return cpu.avx512_bf16 ? "Cooperlake" : "SkylakeX";
      if (want == 2) return cpu.amd ? "Zen" : "Haswell";
      return cpu.amd ? "Bulldozer" : "Sandybridge";
    }
  }
  return "";
}

void choose_cpu_kernels(int argc, char** argv) {
  std::vector<std::string> args;
  if (argv) args.assign(argv, argv + argc);
  else args = argv_of_this_process();
  const CpuKernelsMode* mode = find_cpu_kernels_mode(mode_from_args(args));
  if (!mode) return;  // the command-line parser refuses the name with the list of modes
  g_mode = mode->mode;
  const bool again = std::getenv(kInheritedVar) != nullptr;
  if (again) {
    g_inherited = std::getenv(kInheritedVar);
    unsetenv(kInheritedVar);  // not for the processes this one starts
  }
  // This program's own clones: AVX2 and AVX-512 ones compute the same bits, the SSE2 baseline
  // not (kernels/cpu/vec.h); portable pins AVX2 so that a machine without AVX-512 agrees.
  if (g_mode == CpuKernels::portable) setenv("SQLRL_CPU_ISA", "avx2", 1);
  const std::string current = openblas_get_corename();
  const std::string want = pick_blas_core(g_mode, cpu_features(), current);
  if (want.empty() || same_name(want, current)) return;
  if (again) {
    std::fprintf(stderr, "warning: --cpu-kernels %s asked OpenBLAS for its %s kernels, but it runs %s (a build without "
                 "DYNAMIC_ARCH ignores OPENBLAS_CORETYPE)\n", mode->name, want.c_str(), current.c_str());
    return;
  }
  setenv("OPENBLAS_CORETYPE", want.c_str(), 1);
  setenv(kInheritedVar, current.c_str(), 1);
  std::vector<char*> exec_args;
  for (std::string& a : args) exec_args.push_back(a.data());
  exec_args.push_back(nullptr);
  execv("/proc/self/exe", exec_args.data());
  const int err = errno;
  unsetenv(kInheritedVar);
  std::fprintf(stderr, "warning: could not start this program again with OpenBLAS's %s kernels (%s): it runs on its "
               "%s kernels\n", want.c_str(), std::strerror(err), current.c_str());
}

CpuKernels cpu_kernels_mode() { return g_mode; }

const char* cpu_kernels_mode_name() {
  for (const CpuKernelsMode& m : cpu_kernel_modes())
    if (m.mode == g_mode) return m.name;
  return "fast";
}

std::string blas_core() { return openblas_get_corename(); }

std::string blas_core_inherited() { return g_inherited; }

}  // namespace sqlrl
