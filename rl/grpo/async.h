// How far the rollout runs ahead of the trainer, as rows (`--async`): `off` samples each step's
// batch with the weights that step trains (on-policy, the synchronous loop); `one-step` samples the
// next step's batch before this step's update, with the weights this step starts from, so every
// batch after the first is trained one update after the weights that sampled it (verl's
// one_step_off policy, NeMo-RL's and AReaL's bounded staleness 1); `full` keeps K = max-staleness
// batches ahead, so batch t is sampled by the weights of update t - K (those of the first step
// for t <= K): the bound itself, reached on every batch, because a version chosen by whichever
// update happened to arrive first would make the bits depend on timing. With rollout ranks,
// `--partial-rollout N` lets the newest batch sampled ahead take the next weights before its decode
// step N (the point fixed by the engine's step count, not by when the update arrives, for the same
// reason): its trajectories then hold tokens of two versions (Trajectory::switch_at), the oldest
// still at the bound, the rest one update fresher (metrics.jsonl staleness_mean, staleness_min;
// staleness is the oldest token's). No group is ever dropped as too stale: the bound holds by
// construction. The
// trainer's own old log-probs are the proximal policy; --rollout-is corrects the sampler's
// staleness exactly, token by token (Fu et al., "AReaL", arXiv 2505.24298, decoupled PPO).
//
// Data order: a step's EX moves the curriculum before the batch `lag` steps later is drawn
// (rl/grpo/train_loop.cpp), which for off and one-step is the synchronous run's order; a batch's
// Philox streams are its draw's. On one process the batches ahead are sampled in turn with the
// training, their scoring overlapping it (--overlap-scoring, rl/grpo/train_loop.cpp); rollout
// ranks (rl/grpo/rollout_ranks.h) sample them while the trainers train.
#pragma once
#include <cstdint>
#include <string>

namespace sqlrl::rl {

struct AsyncMode {
  const char* name;
  const char* help;
  // Updates between the weights that sample a batch and those that train on it, for --max-staleness K.
  int64_t (*lag)(int64_t max_staleness);
};

// What a partial rollout does with the cached tokens of samples in flight when the weights switch
// (`--partial-kv`, rl/agent/rollout.h RolloutOptions::partial_kv_keep).
struct PartialKvMode {
  const char* name;
  const char* help;
  bool keep;
};

// The row of `name`; an unknown name fails listing the rows.
const AsyncMode& find_async_mode(const std::string& name);
const PartialKvMode& find_partial_kv(const std::string& name);
const char* partial_kv_help();
// The row's lag for --max-staleness K.
int64_t async_lag(const std::string& name, int64_t max_staleness);
const char* async_mode_help();  // the key's help: each row's name and line

}  // namespace sqlrl::rl
