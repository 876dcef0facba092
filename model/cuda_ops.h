// The few device operations the CUDA model needs beyond kernels/ and runtime/gemm.h: stream-
// ordered copies and zeroing (runtime's cuda_fill/cuda_convert synchronise the device on every
// call), f32 -> bf16, bias broadcast and bias gradient, the paged-cache write and a row gather.
// bf16 is passed as uint16_t bits. Implemented in model/cuda/model_ops.cu (model/nocuda: fail).
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/stream.h"

namespace sqlrl {

enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };
// Host-to-device and device-to-device are ordered on the stream; device-to-host waits for it.
void model_copy(void* dst, const void* src, size_t bytes, CopyKind kind, const CudaStream& stream);
void model_zero(void* dst, size_t bytes, const CudaStream& stream);

void f32_to_bf16_cuda(uint16_t* dst, const float* src, int64_t n, const CudaStream& stream);
// out[r, :] = row[:] (or out[r, :] + row[:] when `add`) for r < rows: a bias placed in C before
// a GEMM with beta = 1, so that the product and the bias are summed in f32 and rounded once.
void broadcast_rows_cuda(uint16_t* out, const uint16_t* row, int64_t rows, int64_t cols, bool add,
                         const CudaStream& stream);
// dsum[c] += sum_r x[r, c] (bias gradients), rows summed in order by one thread per column.
void column_sum_add_cuda(float* dsum, const uint16_t* x, int64_t rows, int64_t cols, const CudaStream& stream);
// For each token t: the K and V rows [width] go to cache row slots[t] (block * block_size +
// offset) of one layer's caches.
void kv_write_cuda(uint16_t* k_cache, uint16_t* v_cache, const uint16_t* k, const uint16_t* v, const int32_t* slots,
                   int64_t tokens, int64_t width, const CudaStream& stream);
// out[r, :] = in[rows[r], :].
void gather_rows_cuda(uint16_t* out, const uint16_t* in, const int32_t* rows, int64_t num_rows, int64_t cols,
                      const CudaStream& stream);

}  // namespace sqlrl
