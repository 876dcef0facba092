// AdamW state for the model's single parameter buffer, the learning-rate schedule, and their
// save/load for exact resume (a safetensors file: tensors "m" and "v", f32 [num_params], the
// counters as metadata). The update itself is kernels/adamw.h.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/adamw.h"

namespace sqlrl::rl {

struct OptimizerState {
  bool bf16 = false;                  // the moments in bf16 (kernels/adamw.h, stochastic rounding)
  std::vector<float> m, v;            // fp32 moments [num_params], zero at the start
  std::vector<uint16_t> m16, v16;     // bf16 moments [num_params] (bf16 bits)
  int64_t adam_step = 0;    // AdamW updates so far (bias correction uses adam_step + 1 next)
  int64_t train_step = 0;   // trainer steps (rollout batches) so far: the schedule's clock
};

OptimizerState make_optimizer_state(int64_t num_params, bool bf16 = false);
// Converts the host moments to bf16 (round to nearest even) or fp32 (exact); no-op when they
// already are, or are not on the host.
void set_moment_precision(OptimizerState& state, bool bf16);
// The moments' element count (0: not held on the host, e.g. on the device).
int64_t moments_size(const OptimizerState& state);
// bf16 moments are written as BF16 tensors (exact), fp32 ones as F32.
// extra_metadata: more string pairs in the header (a shard's offset and total).
void save_optimizer(const OptimizerState& state, const std::string& path,
                    const std::vector<std::pair<std::string, std::string>>& extra_metadata = {});
// Fails naming the file when a tensor is missing or its size is not num_params. The moments
// come back in the precision asked for: BF16 files widen exactly, F32 files round to nearest
// even when bf16 (a run that switches modes on resume).
OptimizerState load_optimizer(const std::string& path, int64_t num_params, bool bf16 = false);

// A checkpoint's optimizer state is one file of every moment (optimizer.safetensors: one
// process, or ZeRO 0, where every rank holds them all) or, under ZeRO 1-3 with several ranks,
// one file per rank of its slice (each rank writes its own: no gather), named
// optimizer_shard_name(rank, world) and carrying its offset and the total in its metadata. Either
// loads into any slice of any world size (load_optimizer_range).
std::string optimizer_shard_name(int rank, int world_size);  // "optimizer-00001-of-00004.safetensors"
// `slice` holds moments [offset, offset + its size) of `total`.
void save_optimizer_shard(const OptimizerState& slice, const std::string& path, int64_t offset, int64_t total);
// Whether the folder holds optimizer state (either form; a shard set is complete once the
// checkpoint folder is in place: rl/run_folder.h).
bool has_optimizer_state(const std::string& checkpoint_dir);
// Moments [lo, hi) of the `total` a checkpoint folder holds, in the precision asked for, and
// its counters. Fails naming the file when a shard is missing, overlaps another, disagrees on the
// total or the counters, or the total is not `total`.
OptimizerState load_optimizer_range(const std::string& checkpoint_dir, int64_t total, int64_t lo, int64_t hi,
                                    bool bf16 = false);

// ZeRO (rl/data_parallel.h): the moments of parameters [lo, hi) of a state holding every moment.
// Counters are copied.
OptimizerState optimizer_slice_of(const OptimizerState& all, int64_t lo, int64_t hi);

enum class LrDecay : uint8_t { Constant, Cosine };

// Linear warmup from 0 over warmup_steps, then constant or cosine down to min_lr_ratio * lr at
// total_steps (the formulas of verl's / transformers' get_*_schedule_with_warmup).
struct LrSchedule {
  float lr = 1e-6f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // cosine only
  LrDecay decay = LrDecay::Constant;
  float min_lr_ratio = 0.0f;
};
float lr_at(const LrSchedule& schedule, int64_t step);  // step counts from 0

}  // namespace sqlrl::rl
