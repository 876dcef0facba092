// How hard each training question is for the policy about to be trained, and the two papers'
// data schedules built from it:
//   - SQL-Trail (Hua et al. 2025, "SQL-Trail: Multi-Turn Reinforcement Learning with Interleaved
//     Feedback for Text-to-SQL", A.6): S(q) = pass@G(q) when 0 < pass@G < 1, else 1; questions
//     ranked by S ascending, the first N kept ("hard yet solvable": every group has reward
//     variance), plus an exploration set of never-solved questions.
//   - MTSQL-R1 (Guo et al. 2025, "MTSQL-R1: Towards Long-Horizon Multi-Turn Text-to-SQL via
//     Agentic Training", §3.3.1): s_i = samples right by EX and EM out of 20; s_i = 20 dropped as
//     too easy; the rest sorted by s_i descending into contiguous bins (curriculum levels,
//     easiest first).
// The measurement is a pass@K evaluation (rl/eval/eval.h) of the initial policy at the training
// temperature, written to the run folder as difficulty.jsonl so a resumed run (or another run,
// --difficulty-file) reads it instead of sampling again.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "rl/eval/eval.h"
#include "sql/data/datasets.h"

namespace sqlrl::rl {

struct Difficulty {
  std::string id;        // Example::id, checked when read back against the dataset
  int64_t samples = 0;   // K
  int64_t solved = 0;    // samples counted as solved (EX, or EX and EM)
};

// One record per example, in dataset order; solved counts EX (ex_and_em: EX and EM).
std::vector<Difficulty> difficulty_of(const std::vector<sql::Example>& examples,
                                      const std::vector<ExampleResult>& results, bool ex_and_em);

// difficulty.jsonl: {"index", "id", "difficulty" (the dataset's label), "samples", "solved"} per line.
std::string difficulty_jsonl(const std::vector<sql::Example>& examples, const std::vector<Difficulty>& d);
// Reads it back; fails naming the file and line when it does not describe `examples` (count,
// order, ids) or a count is out of range.
std::vector<Difficulty> read_difficulty_jsonl(const std::string& path, const std::vector<sql::Example>& examples);

struct ScheduleCounts {
  int64_t always = 0, never = 0, sometimes = 0;  // questions solved by every, no, some samples
  int64_t kept = 0;                              // questions in the schedule
  std::vector<int64_t> level_sizes;              // curriculum: questions per level
};
ScheduleCounts count_pass_rates(const std::vector<Difficulty>& d);

// SQL-Trail A.6: indices of the kept questions (the `keep` sometimes-solved ones of lowest pass
// rate, 0 = all; then `unsolved` never-solved ones in dataset order), in dataset order.
std::vector<int64_t> curate_pass_at_g(const std::vector<Difficulty>& d, int64_t keep, int64_t unsolved,
                                      ScheduleCounts* counts = nullptr);

// MTSQL-R1 §3.3.1: levels of `bin_size` questions (the last may be smaller), the always-solved
// dropped, highest solved count first; ties in dataset order.
std::vector<std::vector<int64_t>> curriculum_levels(const std::vector<Difficulty>& d, int64_t bin_size,
                                                    ScheduleCounts* counts = nullptr);

}  // namespace sqlrl::rl
