// Which training examples the GRPO trainer draws, step after step: the shuffled stream of the
// dataset, optionally cut into curriculum levels (MTSQL-R1) or curated by pass@G (SQL-Trail)
// from a difficulty pre-pass (rl/grpo/difficulty.h). The cursor is the only state: it goes into
// every checkpoint's trainer_state.json, so a resumed run draws what the uninterrupted one would.
//
// Without levels the stream is the one the trainer always drew: draw d (0, 1, 2, ...) is
// example order(seed, d / n)[d % n], each epoch a Philox Fisher-Yates shuffle of all n examples.
// With levels each level is such a stream over its own examples (its own shuffle key), and the
// cursor moves to the next level when the policy solves the current one (promote_at over the
// last `window` steps' training EX) or has seen it `level_epochs` times; the last level stays.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace sqlrl::rl {

struct DataSchedule {
  // Example indices of each level, easiest first; one level = the whole dataset in index order.
  std::vector<std::vector<int64_t>> levels;
  int64_t level_epochs = 1;  // passes over a level before moving on (levels > 1)
  double promote_at = 0;     // > 0: move on once the mean training EX of the last `window` steps reaches it
  int64_t window = 4;
};

// One level holding examples 0..n-1: the plain shuffled stream.
DataSchedule whole_dataset_schedule(int64_t n);

struct DataCursor {
  int64_t level = 0;
  int64_t level_draws = 0;        // draws from the current level
  int64_t draws = 0;              // draws in all (the Philox sample streams are numbered by it)
  std::vector<double> recent_ex;  // the current level's last `window` step EX rates
};

// The example of the cursor's next draw, and the cursor advanced past it.
int64_t draw_example(const DataSchedule& schedule, DataCursor& cursor, uint64_t seed);
// The epoch (pass over the current level) the next draw belongs to.
int64_t cursor_epoch(const DataSchedule& schedule, const DataCursor& cursor);

// After a step: records its training EX rate (every sampled trajectory's EX, over every rank)
// and moves to the next level when the schedule says so. Returns true when it moved.
bool observe_step(const DataSchedule& schedule, DataCursor& cursor, double step_ex);

// trainer_state.json fields ("data_cursor"): written at each checkpoint, read on resume; a
// checkpoint written before cursors existed (no field) resumes at draws = steps * batch_size.
nlohmann::ordered_json cursor_json(const DataCursor& cursor);
DataCursor cursor_from_json(const nlohmann::json& state, int64_t fallback_draws);

}  // namespace sqlrl::rl
