// What a GRPO step trains on: the data schedule of the run (the whole split, SQL-Trail's pass@G
// curation or MTSQL-R1's curriculum, from a difficulty pre-pass) and each step's rollout batch,
// with DAPO's dynamic sampling. Internal to rl/grpo/train*.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rl/grpo/data_schedule.h"
#include "rl/grpo/train.h"
#include "rl/policy.h"
#include "runtime/comm.h"

namespace sqlrl::rl {

// The run's schedule. Without curate / curriculum: the whole split. Otherwise the difficulty of
// every training question comes from RUN/difficulty.jsonl when the run already has one (a
// resume), else from config.difficulty_file, else from a pass@K rollout of `policy` now (every
// rank takes part; rank 0 writes the file) through the rollout's cache `kv`. `summary` receives
// the counts (data_schedule.json).
DataSchedule make_data_schedule(TrainEnv& env, const Policy& policy, PolicyKV& kv, const RolloutOptions& base,
                                const Comm& comm, bool owner, bool quiet, nlohmann::ordered_json* summary);

struct DynamicSamplingStats {
  int64_t tries = 0;               // rollout batches made this step
  int64_t prompts = 0;             // prompts rolled out (every rank's)
  int64_t informative_groups = 0;  // of them, groups with reward variance
  int64_t kept_groups = 0;         // trained on: at most batch-size
};

struct StepBatch {
  std::vector<sql::Example> examples;  // this rank's trained prompts; trajs' example_index points here
  std::vector<int64_t> example_ids;    // their indices in TrainEnv::examples
  std::vector<Trajectory> trajs;       // G samples per prompt, in prompt order
  std::vector<uint8_t> ex;             // EX of each trajectory
  // trajectory_sums over every trajectory sampled this step on this rank (all tries), so the
  // reward curve measures the policy, not the selection.
  std::vector<double> sums;
  RolloutStats rollout;  // summed over tries
  double score_seconds = 0;
  // False while its scoring is deferred (sample_step_batch's defer_score): ex and sums are empty
  // until score_step_batch fills them.
  bool scored = true;
  DynamicSamplingStats dynamic;
  int64_t first_draw = 0, epoch = 0, level = 0;  // the cursor before the step
  int64_t version = 0;  // trainer steps done when it was sampled: the sampling weights' version
  // --rollout-ranks (rl/grpo/rollout_ranks.h; not in checkpoints): the seconds a trainer waited to
  // receive it, and the seconds its rollout rank waited for the trainers while sampling it, of
  // that rank's wall seconds.
  double wait_seconds = 0, sampler_idle_seconds = 0, sampler_wall_seconds = 0;
};

// Rolls out batch-size prompts from the cursor (rank r takes prompts [rB/W, (r+1)B/W) of each
// draw; sample s of draw d uses Philox stream d * G + s on any rank) and scores them. With
// dynamic sampling it rolls out further batches until batch-size groups over every rank have
// reward variance or max-tries is reached, and keeps the first batch-size of them in draw order.
// The whole batch as JSON and back (rl/grpo/step_batch_json.cpp): --async checkpoints keep the
// batches sampled ahead. `examples` is TrainEnv::examples (example_ids index it); errors name
// `where` and the field.
nlohmann::ordered_json step_batch_json(const StepBatch& batch);
StepBatch step_batch_from_json(const nlohmann::json& j, const std::vector<sql::Example>& examples,
                               const std::string& where);

// defer_score (taken without dynamic sampling only, which needs the rewards to choose): the batch
// comes back rolled out but not scored, for score_step_batch to finish on another thread (the
// scores do not depend on when they are computed).
StepBatch sample_step_batch(TrainEnv& env, const Policy& policy, PolicyKV& kv, const RolloutOptions& base,
                            const DataSchedule& schedule, DataCursor& cursor, SchemaCache& schemas, const Comm& comm,
                            bool defer_score = false);
// Scores a batch sampled with defer_score (env.score, then the batch's sums); a scored one is left
// as it is. Touches nothing but the batch and env.score's context.
void score_step_batch(TrainEnv& env, StepBatch& batch);

// The same for several ranks' shares on this process (--rollout-ranks: unit u of V samples what
// rank u of V would), one after the other within each try. `sum_counts` adds a V-long vector of
// per-unit counts, each unit's slot filled by the process that holds it, over every process.
using SumCounts = std::function<void(std::vector<double>& per_unit)>;
std::vector<StepBatch> sample_step_units(TrainEnv& env, const Policy& policy, PolicyKV& kv, const RolloutOptions& base,
                                         const DataSchedule& schedule, DataCursor& cursor, SchemaCache& schemas,
                                         const std::vector<int>& units, int V, const SumCounts& sum_counts,
                                         bool defer_score = false);

}  // namespace sqlrl::rl
