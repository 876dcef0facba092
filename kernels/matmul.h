// Linear layers as llm.c writes them: activations [T, C] row-major, weights [OC, C] as Hugging
// Face stores them (out = inp @ weight^T + bias). The CPU path is OpenBLAS sgemm (runtime/gemm.h).
// Backward accumulates (+=) into every gradient it is given, so residual branches and tied
// weights add up without extra buffers; pass nullptr for a gradient that is not wanted.
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/stream.h"

namespace sqlrl {

// out[T, OC] = inp[T, C] @ weight[OC, C]^T + bias[OC] (bias may be null). Overwrites out.
void matmul_forward_cpu(float* out, const float* inp, const float* weight, const float* bias, int64_t tokens,
                        int64_t in_features, int64_t out_features);

// The same product for a few tokens (decode steps, T <= ~16): streams each weight row once,
// where sgemm packs the whole weight on every call. Sums in another order than sgemm (results
// differ from matmul_forward_cpu in the last bits); threads split the outputs. Each output of a
// token is one fixed-order sum over that token's row, so its bits depend neither on T, nor on
// where the token sits in the call, nor on the thread count (sgemm's do: runtime/gemm.h); any T
// is taken (many tokens in blocks: a batch-invariant prefill, model/infer.h).
void matmul_forward_rows_cpu(float* out, const float* inp, const float* weight, const float* bias, int64_t tokens,
                             int64_t in_features, int64_t out_features);

// dinp[T, C] += dout @ weight; dweight[OC, C] += dout^T @ inp; dbias[OC] += column sums of dout.
void matmul_backward_cpu(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, int64_t tokens, int64_t in_features, int64_t out_features);


// --- CUDA: the few-row product of decode steps (kernels/cuda/matmul.cu) ----------------------
// out[M, N] = x[M, K] @ W[N, K]^T on bf16 operands (uint16_t bits) with f32 accumulation, for the
// M <= 128 rows of a decode step (one per live sequence). There the weights are read once and
// used M times: the product is bound by streaming W from memory, which cuBLASLt's GEMMs do at a
// fraction of the bandwidth for M this small. W may come in up to three parts stored apart (q, k
// and v of a layer; gate and up), each with an optional bias; output column j of the plain
// epilogues is row j of the parts laid end to end.
//
// Batch invariance: an output element's arithmetic (the order of its k sums, the split of K over
// blocks) depends on N, K and the device's multiprocessor count only, never on M or the other rows
// of x: a sequence decoded alone or beside 63 others gets the same bits.
struct MatmulRowsPart {
  const uint16_t* weight = nullptr;  // [rows, K] row-major (as Hugging Face stores a Linear)
  const uint16_t* bias = nullptr;    // [rows] or null
  int64_t rows = 0;
};
enum class MatmulRowsEpilogue : uint8_t {
  store,       // out (bf16) = x W^T + bias
  accumulate,  // out (bf16) += x W^T + bias: the residual, one f32 sum, one rounding
  store_f32,   // out (f32) = x W^T + bias: the lm_head's logits
  swiglu,      // parts {gate, up} of equal rows; out (bf16) [M, rows] = silu(x Wg^T) * (x Wu^T),
               // both products kept in f32 (no bias)
};
// staged (the default): W and x stream through shared memory with cp.async, several K chunks in
// flight, read as fragments with ldmatrix. direct: each lane loads W into its mma fragments from
// global memory (measured at 0.27-0.56 of copy bandwidth on an H200; kept beside staged for the
// benchmark). Both are batch invariant; they round differently from each other.
enum class MatmulRowsVariant : uint8_t { staged, direct };
struct MatmulRowsProblem {
  void* out = nullptr;  // [M, ld_out]
  int64_t ld_out = 0;
  const uint16_t* x = nullptr;  // [M, ld_x]
  int64_t ld_x = 0;
  int64_t rows = 0;         // M: 1..128
  int64_t in_features = 0;  // K: a multiple of 8; every pointer and leading dimension 16-byte aligned
  MatmulRowsPart parts[3];
  int num_parts = 1;
  MatmulRowsEpilogue epilogue = MatmulRowsEpilogue::store;
  MatmulRowsVariant variant = MatmulRowsVariant::staged;
};
constexpr int64_t kMatmulRowsMaxRows = 128;
// A block computes 64 rows of W (4 warps x 16) over K in chunks of 128. The planner counts on 3
// blocks resident per SM (the staged variant's shared memory at M <= 16) and picks the K split
// that fills those slots in the fewest, fullest waves.
constexpr int64_t kMatmulRowsBlockRows = 64, kMatmulRowsBlockK = 128, kMatmulRowsBlocksPerSm = 3;
inline int64_t matmul_rows_total(const MatmulRowsProblem& p) {
  int64_t n = 0;
  for (int i = 0; i < p.num_parts; ++i) n += p.parts[i].rows;
  return n;
}
// The blocks (output tiles x K splits) a problem runs as on a device with `multiprocessors` SMs.
struct MatmulRowsGrid {
  int64_t tiles = 0, splits = 1, split_k = 0;  // split_k: K elements per split (the last may be short)
};
MatmulRowsGrid matmul_rows_grid(int64_t total_rows, int64_t in_features, bool swiglu, int multiprocessors);
size_t matmul_rows_ticket_bytes(const MatmulRowsGrid& grid);  // the workspace's first part
// Whether matmul_rows_cuda takes the problem (shapes and alignment); the reason when not.
bool matmul_rows_supported(const MatmulRowsProblem& p, const char** why = nullptr);
// Workspace for the split-K partial sums of `max_rows` rows and the tiles' tickets. The ticket
// part must be zero before the first call (model_zero once); every call leaves it zero again, so
// the same workspace serves any number of launches and CUDA-graph replays in stream order.
size_t matmul_rows_workspace_bytes(int64_t total_rows, int64_t in_features, bool swiglu, int64_t max_rows,
                                   int multiprocessors);
void matmul_rows_cuda(const MatmulRowsProblem& p, void* workspace, size_t workspace_bytes, const CudaStream& stream);

}  // namespace sqlrl
