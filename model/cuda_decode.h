// The decode step of the CUDA model: every input one token (a rollout's live samples), run with
// fused kernels over fixed device buffers and, by default, replayed as a CUDA graph.
//
// A decode step of Qwen3-4B reads 8 GB of weights for a few rows of activations: it is bound by
// memory, and by launches (the unfused path issues ~17 per layer, ~620 per step, each a few
// microseconds of host time and a gap on the device). Here each layer is 8 launches: RMSNorm, the
// q/k/v product (kernels/matmul.h matmul_rows_cuda, one pass over the three weights), the fused
// attention prologue (kernels/decode_qkv.h: q/k norm, RoPE, the cache write), paged attention, the
// o product adding into the residual, RMSNorm, gate/up with SwiGLU in the epilogue, the down
// product adding into the residual; then the final norm and the lm_head. All of it is captured
// once per (batch bucket, block-table bucket) and replayed with one launch; the step's inputs
// (tokens, positions, cache slots, block tables) go up in one asynchronous copy from pinned memory
// into buffers the graph reads. Rows past the batch in its bucket are padding (position -1, slot
// -1: no cache write; their outputs are never read).
//
// Above CudaKVCache::decode_fused_rows rows the products run on cuBLASLt instead (as the unfused
// path's, but inside the same graph), where they were faster on an H200.
//
// Batch invariance: up to decode_fused_rows, every kernel of the step computes a row from that
// row's inputs alone (the few-row product plans by N and K, never M), so a sequence's logits do
// not depend on its batch, its bucket, or graph versus launches. cuBLASLt's products (larger
// steps) pick their algorithm by M: there a row's bits depend on the batch size.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/cuda_model.h"

namespace sqlrl {

// CudaDecodeMode (model/cuda_model.h), the way forward_cached_cuda runs a step whose inputs are
// all one token (and no adapter):
//   graphs   the fused kernels, captured as a CUDA graph per bucket and replayed (the default);
//   kernels  the same kernels launched one by one: the same bits, for debugging and the CPU
//            emulator (which has no graphs);
//   unfused  the prefill path (cuBLASLt GEMMs, separate norm, RoPE and cache-write kernels).
// SQLRL_CUDA_DECODE=graphs|kernels|unfused (unset: graphs, or kernels where graphs cannot run);
// any other value fails naming the variable.
CudaDecodeMode cuda_decode_mode_from_env();
const char* cuda_decode_mode_name(CudaDecodeMode mode);

// The buckets: a step of `rows` sequences runs the graph of decode_rows_bucket(rows) rows, and a
// table of `blocks` blocks per sequence that of decode_blocks_bucket(blocks). A step of more than
// kDecodeMaxRows rows runs as several.
constexpr int64_t kDecodeMaxRows = 128;
int64_t decode_rows_bucket(int64_t rows);
int64_t decode_blocks_bucket(int64_t blocks);

// Whether the step can run here: every input has one token, no adapter, logits of the last
// tokens only, and the model's shapes fit the fused kernels. The reason when not.
bool decode_step_supported(const CudaModel& m, const std::vector<CachedInput>& inputs, bool all_positions,
                           const CudaLora* lora, const char** why = nullptr);

struct CudaDecodeStats {
  int64_t steps = 0, graph_launches = 0, captures = 0, eager_steps = 0;
};
CudaDecodeStats decode_stats(const CudaKVCache& cache);

// As forward_cached_cuda for a supported step, with cache.decode_mode graphs or kernels: logits
// [inputs, vocab] f32 on the device (a view of the decoder's buffer: valid until the next step).
void decode_step_cuda(const CudaModel& m, CudaKVCache& cache, const std::vector<CachedInput>& inputs, Tensor& logits);

// Where a step's time goes, for the benchmark: the step of `inputs` (as decode_step_cuda's, the
// cache advancing the same way; logits not returned) captured with an event between every two
// kernels and replayed; the device milliseconds of each op summed over the layers, indexed by
// DecodeOp. The events add a little time of their own. Needs CUDA graphs.
enum class DecodeOp : uint8_t { embed, norm, qkv, prologue, attention, o, gate_up, down, lm_head, count };
const char* decode_op_name(DecodeOp op);
std::vector<double> decode_step_profile_cuda(const CudaModel& m, CudaKVCache& cache,
                                             const std::vector<CachedInput>& inputs);

}  // namespace sqlrl
