#include "runtime/device.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "runtime/error.h"

namespace sqlrl {

std::string device_name(Device device) {
  return device.is_cpu() ? std::string("cpu") : str_cat("cuda:", device.index);
}

Device parse_device(const std::string& name) {
  if (name == "cpu") return cpu_device();
  if (name == "cuda") return cuda_device(0);
  if (name.rfind("cuda:", 0) == 0 && name.size() > 5) {
    char* end = nullptr;
    long index = std::strtol(name.c_str() + 5, &end, 10);
    if (*end == '\0' && index >= 0 && index < 1024) return cuda_device(static_cast<int>(index));
  }
  fail("unknown device '", name, "' (expected cpu, cuda or cuda:N)");
}

int64_t host_available_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
  std::fclose(f);
  return kib > 0 ? static_cast<int64_t>(kib) * 1024 : 0;
}

int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<int64_t>(pages) * size : 0;
}

}  // namespace sqlrl
