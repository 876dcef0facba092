// The run folder's records: per-step metrics, readable trajectories, checkpoints (atomic), and
// the progress line. Internal to rl/grpo/train*.cpp.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rl/grpo/grpo.h"
#include "rl/agent/rollout.h"
#include "rl/grpo/train.h"
#include "runtime/file_io.h"  // write_text_atomic, used by every run writer

namespace sqlrl::rl {

struct StepRecord {
  int64_t step = 0;  // 1-based: the step this record closes
  int64_t epoch = 0, data_position = 0;
  const std::vector<sql::Example>* examples = nullptr;
  const std::vector<Trajectory>* trajs = nullptr;
  const std::vector<uint8_t>* ex = nullptr;
  RolloutStats rollout;
  GrpoStepStats grpo;
  int64_t ppo_epochs = 1;  // training forward/backward passes over the packed positions
  double score_seconds = 0, step_seconds = 0;
};

// Everything measured lives at the top level except wall-clock figures, which go under "time"
// (they differ from run to run; the rest repeats bit for bit).
nlohmann::ordered_json metrics_json(const StepRecord& r, const RewardPanel& panel);
// `count` trajectories spread over the batch, one JSON object each.
std::vector<nlohmann::ordered_json> trajectory_json(const StepRecord& r, int64_t count);

// checkpoints/step-N written as checkpoints/.step-N.tmp, then renamed.
struct TrainerState {
  int64_t step = 0;  // steps done
  uint64_t seed = 0;
  int64_t batch_size = 0, group_size = 0, dataset_size = 0;
};
std::string checkpoint_dir(const std::string& run_dir, int64_t step);
void save_train_checkpoint(const std::string& run_dir, const TrainerState& state, const QwenModel& model,
                           const std::string& tokenizer_json, const OptimizerState& optimizer);
// The highest complete step-N folder, "" when none.
std::string latest_checkpoint(const std::string& run_dir);
TrainerState read_trainer_state(const std::string& checkpoint);

// Keeps the lines of a .jsonl file whose "step" is <= step (drops a crash's leftovers).
void truncate_jsonl(const std::string& path, int64_t step);

// "step 12/100 | reward 0.153 ... | ETA 3m05s"
std::string progress_line(const StepRecord& r, int64_t max_steps, double mean_step_seconds);

}  // namespace sqlrl::rl
