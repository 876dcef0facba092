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

// "step 12/100 | reward 0.153 ... | ETA 3m05s"
std::string progress_line(const StepRecord& r, int64_t max_steps, double mean_step_seconds);

}  // namespace sqlrl::rl
