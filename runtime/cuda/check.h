// CUDA status checks for host code: the failing call's text, file:line and CUDA's own message.
// A macro because the call's source text is part of the message.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "runtime/error.h"

namespace sqlrl {
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
}  // namespace sqlrl

#define CUDA_CHECK(call)                                                                     \
  do {                                                                                       \
    cudaError_t status_ = (call);                                                            \
    if (status_ != cudaSuccess) ::sqlrl::throw_cuda_error(status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                                              \
  do {                                                                                                  \
    cublasStatus_t status_ = (call);                                                                    \
    if (status_ != CUBLAS_STATUS_SUCCESS) ::sqlrl::throw_cublas_error(status_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: catches bad launch configurations at the launch site.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
