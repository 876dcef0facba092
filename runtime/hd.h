// SQLRL_HD marks small inline functions that must give identical results on host and device
// (dtype conversion, Philox): compiled by g++ for the CPU path and by nvcc for kernels.
#pragma once
#if defined(__CUDACC__)
#define SQLRL_HD __host__ __device__ __forceinline__
#else
#define SQLRL_HD inline
#endif
