// What a GRPO step records in its run folder (rl/run_folder.h): the metrics line, readable
// trajectories, and the progress line. Internal to rl/grpo/train*.cpp.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rl/grpo/grpo.h"
#include "rl/agent/rollout.h"
#include "rl/grpo/train.h"
#include "rl/grpo/train_data.h"
#include "rl/run_folder.h"

namespace sqlrl::rl {

struct StepRecord {
  int64_t step = 0;  // 1-based: the step this record closes
  int64_t epoch = 0, data_position = 0;
  int64_t level = 0;  // curriculum level (1-based) the step drew from; 0 = no curriculum
  const DynamicSamplingStats* dynamic = nullptr;  // with dynamic sampling
  const std::vector<sql::Example>* examples = nullptr;
  const std::vector<Trajectory>* trajs = nullptr;
  const std::vector<uint8_t>* ex = nullptr;
  // Sums over the step's trajectories (every rank's, when data parallel): trajectory_sums.
  std::vector<double> sums;
  RolloutStats rollout;
  GrpoStepStats grpo;
  int64_t ppo_epochs = 1;  // training forward/backward passes over the packed positions
  double score_seconds = 0, step_seconds = 0;
  double comm_seconds = 0;  // data parallel: rank 0's time in collectives (waiting for the slowest rank included)
  // eval-every: this step's evaluation (eval_metrics_json), null on steps without one.
  const nlohmann::ordered_json* eval = nullptr;
  double eval_seconds = 0;
  double checkpoint_seconds = 0;  // this step's save (0: none)
  // --async other than off: trainer steps between the weights that sampled the batch and those
  // it trains (metrics.jsonl "staleness"); -1: the synchronous loop (no field written).
  int64_t staleness = -1;
  // --async: the newest sampled token's staleness and the mean over the step's sampled tokens
  // (with --partial-rollout those after a switch are one less; otherwise both equal staleness);
  // negative: not logged. No group is ever dropped as too stale: the bound is met by construction.
  int64_t staleness_min = -1;
  double staleness_mean = -1;
  // --rollout-ranks (rl/grpo/rollout_ranks.h), metrics.jsonl "time": the seconds the trainers
  // waited for this step's batch (the slowest trainer's) and the rollout ranks waited for the
  // trainers while sampling it (the slowest rollout rank's), each over its side's wall time of the
  // step, and trainer rank 0's seconds sending the new weights; negative: no rollout ranks.
  double trainer_idle_seconds = -1, rollout_idle_seconds = -1, rollout_wall_seconds = -1, weight_sync_seconds = -1;
  // --overlap-scoring: the seconds the scoring of the batches ahead ran while this step trained
  // (metrics.jsonl time.overlap_s, and its fraction of the step); negative: not overlapped.
  double overlap_seconds = -1;
};

// What metrics_json reports as means over the step's trajectories, as sums in one vector, so
// data-parallel ranks can add theirs: [count, reward, reward^2, ex, format, answered, truncated,
// out_of_turns, turns, invalid actions, generated tokens, tokens, then one per panel term].
std::vector<double> trajectory_sums(const std::vector<Trajectory>& trajs, const std::vector<uint8_t>* ex,
                                    const RewardPanel& panel);

// Everything measured lives at the top level except wall-clock figures, which go under "time"
// (they differ from run to run; the rest repeats bit for bit).
nlohmann::ordered_json metrics_json(const StepRecord& r, const RewardPanel& panel);
// `count` trajectories spread over the batch, one JSON object each.
std::vector<nlohmann::ordered_json> trajectory_json(const StepRecord& r, int64_t count);

// metrics.jsonl's "eval" object: summary.json's deterministic figures (rl/eval/eval_output.cpp)
// of the step's evaluation: n, ex, correct, by_difficulty (n, ex, correct per label),
// answered_rate, format_error_rate, avg_turns, sql_calls_per_question.
nlohmann::ordered_json eval_metrics_json(const nlohmann::ordered_json& summary);

// The best evaluation of a run: the highest EX, the earliest step among equals; step 0 = none yet.
struct BestEval {
  int64_t step = 0;
  double ex = 0;
};
// An evaluation of `ex` is a new best: the first one, or strictly above the best (so among equal
// EX the earliest step stays the best).
bool is_new_best(const BestEval& best, double ex);
// The best "eval" in a metrics.jsonl (a resumed run's kept lines); none when no line has one.
BestEval best_eval_in(const std::string& metrics_path);
// RUN/best.json {"step", "eval_ex", "checkpoint": "checkpoints/step-N"}, atomically.
void write_best_json(const std::string& run_dir, const BestEval& best);

// "step 12/100 | reward 0.153 ... | ETA 3m05s" (runtime/progress.h format_duration: "1h02m05s"
// from an hour), with "| eval 31.2%" once an evaluation ran (last_eval_ex < 0: none yet).
std::string progress_line(const StepRecord& r, int64_t max_steps, double mean_step_seconds, double last_eval_ex = -1);

}  // namespace sqlrl::rl
