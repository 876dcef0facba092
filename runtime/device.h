// Devices: the CPU or CUDA device n. Detection never crashes: with no driver or no GPU it
// reports zero devices and the reason ("no CUDA device: CUDA driver version is insufficient...").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace sqlrl {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device&) const = default;
};

inline Device cpu_device() { return Device{DeviceType::CPU, 0}; }
inline Device cuda_device(int index = 0) { return Device{DeviceType::CUDA, index}; }

std::string device_name(Device device);  // "cpu", "cuda:0"
int64_t host_memory_bytes();  // physical RAM (sysconf); 0 when the system does not say
// Memory a process could still take without swapping (Linux /proc/meminfo MemAvailable: free
// plus reclaimable cache); 0 when the system does not say.
int64_t host_available_bytes();
Device parse_device(const std::string& name);  // "cpu", "cuda", "cuda:1"; throws otherwise

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  size_t total_memory = 0;
  int driver_version = 0, runtime_version = 0;
};

bool cuda_compiled();           // built with the CUDA toolkit
int cuda_device_count();        // 0 when not compiled, no driver, or no device
std::string cuda_unavailable_reason();  // empty when a device is present
CudaDeviceInfo cuda_device_info(int index);  // throws if the device does not exist
void cuda_set_device(int index);
void cuda_synchronize();

}  // namespace sqlrl
