// RUN/tb: what the trainers (GRPO `train`, `sft`) log for TensorBoard beside metrics.jsonl, as
// native event files (runtime/tfevents.h; docs/tensorboard.md):
//   scalars  every number of each metrics.jsonl line at its "step", nested objects joined into
//            tag paths ("reward_terms/ex", "filtered/truncated", "eval/by_difficulty/easy/ex",
//            "time/step_s"); "step" itself is the event's step
//   text     "config": the resolved config.toml, at the step the process starts from (0, or the
//            resumed checkpoint's); "trajectories": the step's trajectories.jsonl lines (GRPO)
// Resume: truncate_tb_log drops what an earlier process logged past the checkpoint (as
// truncate_jsonl does to metrics.jsonl), so no step appears twice; the resumed process then
// writes a file of its own, which sorts after the earlier ones.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tfevents.h"

namespace sqlrl::rl {

// The help text of the `tensorboard` key (train and sft).
constexpr const char* kTensorboardHelp =
    "also write TensorBoard event files to RUN/tb (the metrics.jsonl scalars, the config and sampled trajectories "
    "as text; `tensorboard --logdir RUN/tb`; docs/tensorboard.md)";

// The event folder of a run: `tb_dir` when given (the demo gathers its runs under OUT/tb/<run>,
// so that one `tensorboard --logdir OUT/tb` shows them side by side), else RUN/tb.
std::string tb_log_dir(const std::string& run_dir, const std::string& tb_dir = "");

// The events in `tb_dir` past `step` (and the "config" text at `step`, which the process starting
// there writes again) are dropped; nothing happens when the folder does not exist.
void truncate_tb_log(const std::string& tb_dir, int64_t step);

struct TbLog {
  EventFile file;
};
// A new events file in `tb_dir`, with the config text (config_toml; none when "") at `step`.
TbLog open_tb_log(const std::string& tb_dir, int64_t step, const std::string& config_toml);
// Every number of one metrics.jsonl line (its "step" the event's), as metrics_scalars lists them.
void tb_log_metrics(TbLog& log, const nlohmann::ordered_json& line);
// A step's sampled trajectories (its trajectories.jsonl lines) as one markdown text.
void tb_log_trajectories(TbLog& log, int64_t step, const std::vector<std::string>& jsonl_lines);

// (tag, value) of every number and boolean of a metrics line but "step", in the line's order,
// nested keys joined by '/'; strings and nulls are not scalars and are left out.
std::vector<std::pair<std::string, double>> metrics_scalars(const nlohmann::ordered_json& line);

}  // namespace sqlrl::rl
