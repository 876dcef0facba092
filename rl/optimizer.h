// AdamW state for the model's single parameter buffer, the learning-rate schedule, and their
// save/load for exact resume (a safetensors file: tensors "m" and "v", f32 [num_params], the
// counters as metadata). The update itself is kernels/adamw.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/adamw.h"
#include "runtime/comm.h"

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
void save_optimizer(const OptimizerState& state, const std::string& path);
// Fails naming the file when a tensor is missing or its size is not num_params. The moments
// come back in the precision asked for: BF16 files widen exactly, F32 files round to nearest
// even when bf16 (a run that switches modes on resume).
OptimizerState load_optimizer(const std::string& path, int64_t num_params, bool bf16 = false);

// ZeRO (rl/grpo/grpo.h DataParallel): the moments of parameters [lo, hi) of a state holding
// every moment, and the reverse, every rank's slice gathered into a state of all num_params
// moments on every rank (a collective: every rank calls it). Counters are copied.
OptimizerState optimizer_slice_of(const OptimizerState& all, int64_t lo, int64_t hi);
OptimizerState gather_optimizer(const Comm& comm, const OptimizerState& slice, int64_t num_params);

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
