// How far the rollout runs ahead of the trainer, as rows (`--async`): `off` samples each step's
// batch with the weights that step trains (on-policy, the synchronous loop); `one-step` samples the
// next step's batch before this step's update, with the weights this step starts from, so every
// batch after the first is trained one update after the weights that sampled it (verl's
// one_step_off policy, NeMo-RL's and AReaL's bounded staleness 1). The trainer's own old log-probs
// are the proximal policy; --rollout-is corrects the sampler's staleness exactly, token by token
// (Fu et al., "AReaL", arXiv 2505.24298, decoupled PPO).
//
// The data order is the synchronous run's whatever the lag: a step's EX moves the curriculum
// before the next batch is drawn (rl/grpo/train_loop.cpp), and a batch's Philox streams are its
// draw's. On one process the batches ahead are sampled in turn with the training (no overlap);
// rollout ranks that sample while trainer ranks train are the next step of this design.
#pragma once
#include <cstdint>
#include <string>

namespace sqlrl::rl {

struct AsyncMode {
  const char* name;
  const char* help;
  int64_t lag;  // updates between the weights that sample a batch and those that train on it
};

// The row of `name`; an unknown name fails listing the rows.
const AsyncMode& find_async_mode(const std::string& name);
const char* async_mode_help();  // the key's help: each row's name and line

}  // namespace sqlrl::rl
