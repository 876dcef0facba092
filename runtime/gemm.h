// GEMM on row-major tensors: C = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T.
// Shapes: op(A) [M, K], op(B) [K, N], C [M, N]. Batched when C is 3-D [batch, M, N]: A and B are
// then [batch, ...] or 2-D (the same matrix for every batch entry). The inner two dims of each
// operand must have unit column stride; row strides may exceed the width (narrowed views).
// CPU: f32 only (OpenBLAS sgemm). CUDA: cuBLASLt, A/B bf16, f16 or f32 (same type), C of that
// type or f32, always fp32 accumulation (no TF32).
#pragma once
#include "runtime/stream.h"
#include "runtime/tensor.h"

namespace sqlrl {

void gemm(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, float alpha = 1.0f,
          float beta = 0.0f, const CudaStream& stream = CudaStream{});

// The resolved problem every backend receives (column counts in elements, strides in elements).
struct GemmProblem {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // 0 = broadcast over the batch
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 0.0f;
  DType ab_type = DType::F32, c_type = DType::F32;
};

void gemm_cpu(const GemmProblem& p);

// CPU GEMM whose bits depend on a row's own values only, never on the thread count or on the
// other rows: OpenBLAS runs single-threaded on fixed tiles of C (kGemmTileRows x kGemmTileCols,
// the rows zero-padded to a full tile so every call has one shape; columns too, so a decode
// step's few rows still spread over the threads), the tiles spread over the thread pool. A
// rollout step of 32 sequences and one of 64 then give each sequence the same logits.
// OpenBLAS itself picks other kernels for other thread counts (a rank bound to one core by
// mpirun runs its small-matrix kernels, a process with two cores its threaded ones: the same
// GEMM then differs in the last bits). Data-parallel training turns this on in every process
// (rl/data_parallel.h) so N ranks and --grad-accum N compute the same bits, and `eval` so its
// answers do not depend on the machine's core count or the number of ranks; the GRPO trainer turns
// it on for its evaluations only. Off by default: OpenBLAS's own threading (turning it off again
// restores the thread count OpenBLAS had).
constexpr int64_t kGemmTileRows = 16, kGemmTileCols = 256;
// OpenBLAS's idle threads spin (sched_yield) for 2^28 cycles, ~0.1 s, after every GEMM before
// they sleep. Between GEMMs this program runs its own thread pool (attention, norms, the
// optimizer), so on a machine with as many cores as threads the spinning threads take turns from
// the working ones: 18% of the demo's SFT went to the scheduler and sched_yield. This restarts
// OpenBLAS's thread server with the shortest timeout (2^4 cycles: OPENBLAS_THREAD_TIMEOUT=4),
// which changes no GEMM's partition and so no bit (the demo's SFT: the same losses, 1.22x faster).
// Called once at start-up, before any GEMM. Nothing happens when OPENBLAS_THREAD_TIMEOUT is set
// (the user's choice stands) or when the OpenBLAS in use lacks the pthread server's entry points
// (an OpenMP or single-threaded build). Returns whether it restarted the server.
bool quiet_blas_threads();
void set_gemm_thread_independent(bool on);
bool gemm_thread_independent();
void gemm_cuda(const GemmProblem& p, int device, const CudaStream& stream);

}  // namespace sqlrl
