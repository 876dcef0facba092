// Data parallelism for the trainers (GRPO and SFT): how a step's gradient is spread over shards
// of its data and put back together, on one process (--grad-accum) or over ranks (runtime/comm.h).
//   - one process, grad_accum 1: the step as it always was (every figure bit-identical);
//   - one process, grad_accum N: N shards, each shard's gradient computed from zero over its own
//     packed micro-batches, exactly as rank r of N would, and added in shard order
//     (add_in_rank_order);
//   - N ranks (comm->world_size N): this process holds shard comm->rank, and the gradients are
//     reduced across ranks;
//   - N ranks with grad_accum A: N x A shards, rank r holding shards rA .. rA + A - 1, each one's
//     gradient from zero; the reduction adds all N x A in shard order. So 2 ranks with
//     --grad-accum 2 compute what 4 ranks, or one process with --grad-accum 4, compute: a run
//     resumes on another number of ranks and continues bit for bit, keeping N x A.
// What a shard cannot know alone is summed over all shards in shard order (sum_over_shards), and
// the gradient norm is the squared norms of the ZeRO slices shard_bounds(n, N), summed in order.
// So with `ordered`, N ranks and grad_accum N give bit-identical weights. docs/ARCHITECTURE.md §9.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "rl/optimizer.h"
#include "rl/policy.h"
#include "runtime/comm.h"

namespace sqlrl::rl {

struct DataParallel {
  const Comm* comm = nullptr;  // null or world size 1: one process
  int64_t grad_accum = 1;      // the shards each process holds
  bool ordered = true;         // rank-order sums (runtime/comm.h); false: MPI's all-reduce
  // 0: every rank keeps all moments and updates every parameter; 1: rank r keeps the moments of
  // its slice shard_bounds(n, N)[r..r+1] only and updates that slice, then the parameters are
  // all-gathered; 2: as 1, and only the slice's reduced gradient is formed (reduce-scatter; on
  // CUDA in place in the rank's gradient buffer); 3: as 2, and only the slice's fp32 master is
  // kept (CUDA; every bf16 weight stays on every rank, for rollouts and forwards). On the CPU the
  // fp32 weights every forward reads are the master itself, so 3 runs as 2 there.
  // A rank's own gradient is accumulated whole over its micro-batches and reduced once per
  // update (as FSDP's no_sync), which keeps N ranks bit-identical to --grad-accum N.
  // The optimizer state's m / v hold the slice (1-3) or everything (0).
  int zero_stage = 0;
  int64_t shards() const { return (comm && comm->world_size > 1 ? comm->world_size : 1) * grad_accum; }
  int rank() const { return comm ? comm->rank : 0; }
  bool distributed() const { return comm && comm->world_size > 1; }
};
// Where each rank's ZeRO slice of a flat buffer of n starts: rank r owns [b[r], b[r + 1]), the
// slices shard_bounds(n, shards()) of its own shards, r*A .. (r+1)*A - 1 (A = grad_accum; with A 1
// shard_bounds(n, world size)). The gradient norm is summed over shard_bounds(n, shards()), so
// every slice of it lies within one rank whatever the layout.
std::vector<int64_t> zero_bounds(const DataParallel& dp, int64_t n);
// The slice of the flat parameter buffer whose moments this rank keeps: [first, second).
std::pair<int64_t, int64_t> optimizer_slice(const DataParallel& dp, int64_t num_params);

// The sum over every shard of the step (this process's `local` rows, one per shard it holds, of
// every rank) of per-shard vectors, in shard order from 0: the same additions whether shards are
// ranks, --grad-accum or both.
std::vector<double> sum_over_shards(const DataParallel& dp, const std::vector<std::vector<double>>& local);

// The step's gradient once every local shard's backward is done (CUDA: every local shard's
// backward added into the one device buffer, reduced over ranks in place). With several local shards, `shard_grads` holds each one's gradient (from
// zero) and the policy's gradient buffer receives their sum in shard order; across ranks, the
// buffer (this rank's gradient) is reduced (ZeRO 2: only this rank's slice, into slice_buffer).
// Returns the squared gradient norm; `own` is set to this rank's ZeRO slice of the reduced
// gradient (null with one process).
double reduce_gradients(Policy& policy, const DataParallel& dp, const std::vector<std::vector<float>>& shard_grads,
                        std::vector<float>& slice_buffer, const float** own);
// AdamW over the whole buffer, or (ZeRO 1-3 across ranks) over this rank's slice from `own`,
// then the all-gather of the parameters (CUDA: of the bf16 copy, and of the master where each
// rank keeps a whole one). optimizer.adam_step must already be advanced.
void data_parallel_adamw(Policy& policy, OptimizerState& optimizer, const DataParallel& dp, const float* own,
                         const AdamWConfig& config, float lr, float max_norm, double grad_sq_sum);

// policy_download for a checkpoint, on every rank: a ZeRO-3 CUDA rank holds only its slice of the
// fp32 master (cuda_policy_sharded), so the slices are gathered over the host (MPI).
void data_parallel_download(const Policy& policy, const DataParallel& dp, QwenModel& out);

}  // namespace sqlrl::rl
