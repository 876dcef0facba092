// The CUDA-model emulator's shim: the ops emulator's (which includes the attention emulator's)
// plus what model/cuda/model_ops.cu and the launchers add (memset, every stream flag).
#pragma once
#include "../../cuda_emu_ops/shim/cuda_runtime.h"

inline cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t) {
  std::memset(p, value, n);
  return 0;
}
