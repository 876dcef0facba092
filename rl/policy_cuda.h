// The CUDA row's calls (rl/policy_backend.h) shared by its two files: rl/policy_cuda.cpp (the
// model calls, and the row) and rl/policy_cuda_train.cpp (data parallel, the memory phases).
// Nothing outside them includes this.
#pragma once
#include <vector>

#include "rl/policy_backend.h"

namespace sqlrl::rl::cuda_impl {

// The device adapter a CUDA model call takes: null without one. Checked so that a `lora` set by
// hand on a CUDA policy (not uploaded) fails by name instead of the device forward silently
// running the base alone.
CudaLora* device_lora(Policy& policy, const char* who);
const CudaLora* device_lora(const Policy& policy, const char* who);

// rl/policy_cuda_train.cpp
double reduce_gradients(Policy& policy, const DataParallel& dp, const std::vector<std::vector<float>>& shard_grads,
                        std::vector<float>& slice_buffer, const float** own);
void gather_update(Policy& policy, const DataParallel& dp, const std::vector<int64_t>& bounds);
void gather_download(const Policy& policy, const DataParallel& dp, QwenModel& out);
void start_memory(Policy& policy, TrainMemory& memory, const AdamWConfig& adamw, OptimizerState& optimizer);
void memory_to_rollout(Policy& policy, TrainMemory& memory, OptimizerState& optimizer);
void memory_to_train(Policy& policy, TrainMemory& memory, OptimizerState& optimizer);
void memory_optimizer_to_host(const Policy& policy, const TrainMemory& memory, OptimizerState& optimizer);
TrainModes live_modes(const Policy& policy, const TrainMemory& memory, const OptimizerState& optimizer);

}  // namespace sqlrl::rl::cuda_impl
