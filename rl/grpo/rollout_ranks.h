// Disaggregated rollout (`train --rollout-ranks R` under `mpirun -np N`): job ranks [0, N-R) only
// train, data parallel among themselves (their group is TrainEnv::comm: gradients, checkpoints,
// evaluation, logs stay among them), and job ranks [N-R, N) only roll out. A step's batch is
// sampled in V = max(N-R, R) units: unit u is what rank u of a synchronous run of V ranks would
// sample (its prompts [uB/V, (u+1)B/V), its Philox sample ids, the trainers' live samples and KV
// blocks), by rollout rank u % R, and goes to the trainers whose prompts it holds (split by prompt
// when it straddles two); a trainer merges its pieces in unit order. With R <= N-R a unit is one
// trainer's share, sampled exactly as that trainer would: `--async off` writes the bytes of the
// N-R trainers alone, and with `--async one-step` the rollout of step s+1 runs while step s trains
// (`full`: of step s+K), again their bytes with the same --async. With more rollout ranks than
// trainers a trainer's share is sampled in several smaller rollouts, which changes no token under
// --batch-invariant (otherwise a row's last bits may follow its batch), so such a job writes the
// bytes of the trainers alone with --batch-invariant, and its own bytes every time in any case.
// Dynamic sampling (R <= N-R only): each try's informative groups are counted per unit over the
// rollout group (sample_step_units), so each unit keeps what its trainer alone would.
//
// The messages, point to point over the job's communicator (runtime/comm.h), in this order:
//   start     trainer 0 -> rollout root: RolloutStart and the weights (resume: the checkpoint's);
//             the weights are what every rollout forward reads, as policy_read_rollout_weights
//             gives them (rl/policy.h): the f32 parameters on the CPU, the bf16 device copy on
//             CUDA (so a rollout rank samples the bits the trainers' own rollouts would), the
//             adapter's alone in a LoRA run;
//   batch s   rollout rank -> trainer k: its StepBatch of step s, the data cursor past its draws,
//             and the rollout rank's idle and wall seconds while sampling it;
//   ex s      trainer 0 -> rollout root: step s's training EX over every trainer's samples, which
//             moves the curriculum before step s+1 is drawn (the synchronous loop's order);
//   weights   trainer 0 -> rollout root after step s (when a step s+1 follows): stop or go on,
//             and the new weights.
// --partial-rollout N (rl/grpo/async.h; each rollout rank samples one unit, so R >= N-R): after
// step s's update the trainers take the batches ahead but the newest, then trainer 0 sends the
// weights (always "go on": the EX message of step s+1 says stop instead); the newest, batch s+K,
// takes them at its decode step N (RolloutOptions::switch_weights), or after its rollout when that
// ended sooner, and is sent after that; the trainers take it at the end of step s+1 (its rest runs
// while step s+1 trains), or at once before a save (a checkpoint keeps every batch ahead). Every
// send is blocking, so each side takes the other's messages in the order they are sent.
// The rollout root relays what it receives to the other rollout ranks (broadcast in their group).
// Per step the trainers receive batch s (off: after sending the weights of s; one-step and full
// with K = max-staleness: during step s-K, sampled by the weights step s-K started from), then
// send ex s, and weights. Resume:
// the trainers' checkpoint holds what the rollout ranks need (cursor, batches sampled ahead); the
// rollout ranks read nothing from the run folder.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "rl/grpo/data_schedule.h"
#include "rl/grpo/train_data.h"
#include "runtime/comm.h"

namespace sqlrl::rl {

struct TrainEnv;
struct TrainConfig;
struct Policy;

struct RankLayout {
  const Comm* job = nullptr;  // every rank of the job
  Comm group;                 // this rank's side: the trainers, or the rollout ranks
  int trainers = 0, rollout = 0;
  bool rolls_out() const { return job->rank >= trainers; }
  int rollout_root() const { return trainers; }  // a job rank
  int units() const { return trainers > rollout ? trainers : rollout; }
  int sampler_of_unit(int unit) const { return trainers + unit % rollout; }  // a job rank
  // The host copy of the weights that travel (trainer 0 and the rollout ranks), kept from update
  // to update: a Qwen3-4B's bf16 copy is 8 GB, allocated once.
  mutable std::vector<char> staging;
};

// Splits the job (a collective over it): the last `rollout_ranks` ranks roll out. Fails when no
// rank would be left to train, naming both numbers. A job with an NCCL communicator (one GPU per
// rank) gives the trainers one of their own for their device collectives; ranks sharing a GPU
// keep the job's host staging (runtime/comm.h).
RankLayout split_rollout_ranks(const Comm& job, int64_t rollout_ranks);

// What the trainers tell the rollout ranks before the first step: where the run stands and how
// its rollouts run.
struct RolloutStart {
  int64_t step = 0;       // the first step to run
  int64_t max_steps = 0;  // epochs resolved
  int64_t live = 0, kv_blocks = 0;  // max-batch-sequences and KV blocks, as the trainers planned them
  bool thread_independent = false;  // the CPU GEMMs' mode (runtime/gemm.h)
  int64_t ahead = 0;                // batches the trainers hold from step `step` on (a resumed --async checkpoint's)
  int64_t weight_bytes = 0;         // of the weights that travel (a rollout rank checks its own against it)
  DataCursor cursor;                // where the draws of step `step` + ahead begin
  DataSchedule schedule;
};

// ---- the trainers' side (rl/grpo/train_loop.cpp); trainer 0 sends, the others do nothing ----
// `policy`: the trainers' (its weights travel). start.weight_bytes is filled in here.
void send_rollout_start(const RankLayout& layout, const Policy& policy, RolloutStart start);
// This trainer's batch of the next step; `cursor` becomes the sampler's past its draws. The
// batch's wait / sampler seconds are filled in.
StepBatch receive_step_batch(const RankLayout& layout, const TrainEnv& env, DataCursor& cursor);
void send_step_ex(const RankLayout& layout, double ex);
// --partial-rollout, interrupted: in place of the next step's EX, the rollout ranks end.
void send_rollout_stop(const RankLayout& layout);
// stop: the trainers end here (interrupted) and the rollout ranks with them. Returns the seconds
// the send took (trainer 0; 0 elsewhere).
double send_rollout_weights(const RankLayout& layout, const Policy& policy, bool stop);

// What a layout cannot run, refused on every rank before any message: a batch smaller than the
// units (a rank without a prompt), --dynamic-sampling with more rollout ranks than trainers (a
// trainer's kept groups would come from several units' tries), --partial-rollout with fewer
// (a rollout rank's second unit would start on the switched weights).
void check_rollout_layout(const RankLayout& layout, const TrainConfig& config);

// ---- the rollout ranks' side: the whole life of a rollout rank, until the trainers' last step ----
void run_rollout_rank(TrainEnv& env, const RankLayout& layout);

}  // namespace sqlrl::rl
