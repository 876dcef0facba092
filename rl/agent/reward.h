// Reward panels: each paper's reward (its row of rl/agent/paper.h) as named terms x weights, scored on finished
// trajectories. A term's raw value is the paper's indicator/score; the weight is the paper's
// coefficient, overridable per term by name (config "reward.<panel>.<term>=<w>").
//
//   mtir      format (±1) ×0.1, exec (+1/0/−1) ×0.1, result (+1/0/−1) ×1     MTIR-SQL §3.3 eq. 5-7
//   sqltrail  exec ×5, turns ×2, schema, bigram, syntax, format (each 0..1) ×1  SQL-Trail §3.3.2, A.4
//   skyrl     outcome (−1 bad format / 0 wrong / 1 right) ×1                  SkyRL-SQL §4.1
//   mtsql     ex ×1, em ×1, clause_f1 ×0.8, verify (E-mean + M-mean, 0..2) ×0.1  MTSQL-R1 §3.3.2
//   arctic    execution (1 right / 0.1 executes / 0) ×1                        Arctic-Text2SQL-R1 §3
//
// Any panel may end with optional terms, each added once, after the paper's:
//   overlong  DAPO's soft overlong punishment (Yu et al. 2025, arXiv 2503.14476, §3.4 eq. 13) on
//             the trajectory's length against its token cap (add_overlong_term, the trainer's
//             overlong-buffer);
//   executed  +1 when the answer is a query the trajectory executed without error in an earlier
//             turn, −1 when it answered anything else, 0 without an answer (add_executed_term, the
//             trainer's executed-reward). MTIR-SQL's execution term (arXiv 2510.25510 §3.3 eq. 6)
//             rewards an answer that runs; this one asks that it ran and was observed, so that an
//             answer re-typed from a right query into a wrong one (a copy error) is paid less.
//
// Execution comparison follows the SQL environment's EX (sql/exec/compare.h) in the context's mode;
// gold results are executed once per (database, gold SQL) and shared by every sample.
// Where a paper leaves a choice open, rl/agent/reward.cpp and rl/agent/reward_terms.cpp say what was chosen.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rl/agent/trajectory.h"
#include "runtime/thread_pool.h"
#include "sql/exec/compare.h"
#include "sql/data/datasets.h"
#include "sql/exec/pool.h"

namespace sqlrl::rl {

struct RewardTerm {
  std::string name;
  double weight = 1;
};

struct RewardPanel {
  std::string name;               // its paper's row (rl/agent/paper.h)
  std::vector<RewardTerm> terms;  // fixed per panel, in the order reward_terms reports them
};

// The panel with the paper's weights; an unknown name is an error listing the names.
RewardPanel make_reward_panel(const std::string& name);
std::vector<std::string> reward_panel_names();

// Sets one term's weight. `key` is the term name ("exec") or the config key
// ("reward.sqltrail.exec"); an unknown term, or a key for another panel, is an error naming
// the panel's terms.
void set_reward_weight(RewardPanel& panel, std::string_view key, double weight);
// "reward.sqltrail.exec=5" (config/CLI form); the value must be a finite number.
void apply_reward_override(RewardPanel& panel, std::string_view assignment);

struct RewardCaches;  // parsed gold queries and database schemas (rl/agent/reward.cpp)

// Shared by every scoring thread of a run. Not copyable.
struct RewardContext {
  explicit RewardContext(sql::Pool& pool, sql::Limits limits = {}, sql::CompareMode mode = sql::CompareMode::Spider);
  ~RewardContext();
  RewardContext(const RewardContext&) = delete;
  RewardContext& operator=(const RewardContext&) = delete;

  sql::Pool& pool;
  const sql::Limits limits;  // for predicted and gold queries alike
  // Spider: test-suite-sql-eval's EX on the example's database (DISTINCT removed from both
  // queries unless keep_distinct, bag of rows, order checked iff the gold says ORDER BY).
  // BirdSet: BIRD / SkyRL set equality of rows.
  const sql::CompareMode mode;
  bool keep_distinct = false;
  // SQL-Trail's turn budget T (A.4 eq. 7: hard/extra pay only when t < T). SQL-Trail trains
  // with 10 turns (§4 / A.8); the trainer sets it from the recipe's max turns.
  int turn_budget = 10;
  // MTSQL-R1's E-/M-VERIFY: a turn after a tool call that writes no verdict counts as "pass"
  // (the released text2sql_process.py: _first_exec_verify_outside_responses returns "pass");
  // false: it scores 0 (the paper asks for a verdict, §3.3.2).
  bool mtsql_missing_verdict_passes = true;
  // The "overlong" term's cap (the trajectory token cap) and buffer L_cache (add_overlong_term).
  int64_t overlong_cap = 0, overlong_buffer = 0;
  // score_batch's threads; nullptr = default_thread_pool() (what the SQLite pool submits to).
  ThreadPool* workers = nullptr;

  sql::GoldCache gold;  // (db_path, processed gold SQL) -> result, executed once
  std::unique_ptr<RewardCaches> caches;
};

// DAPO's soft overlong punishment of a trajectory of `length` tokens under `cap`, ramping over the
// last `buffer` tokens: 0 up to cap - buffer, then (cap - buffer - length) / buffer, -1 past cap.
double overlong_penalty(int64_t length, int64_t cap, int64_t buffer);
// Appends the "overlong" term (weight: DAPO's penalty factor) to the panel; score() then computes it
// from the context's overlong_cap and overlong_buffer.
void add_overlong_term(RewardPanel& panel, double weight);
// Appends the "executed" term (see the top of this file) with the given weight.
void add_executed_term(RewardPanel& panel, double weight);
// The "executed" term's raw value for one trajectory: +1, −1, or 0 (no final SQL).
double executed_term(const Trajectory& traj);

// Fills traj.reward (the weighted sum) and traj.reward_terms (name -> weighted value, panel
// order). Runs the predicted SQL once on the pool (and the gold once per context); when either
// fails for the infrastructure's reason, marks traj.infra_failure (the reward is still filled
// in, and says nothing about the model: GRPO leaves such trajectories out). Thread-safe
// for distinct trajectories. Throws only for unusable input (an unknown difficulty label, a
// database whose schema cannot be read).
void score(const RewardPanel& panel, const sql::Example& example, Trajectory& traj, RewardContext& ctx);

// score() for every trajectory, trajs[i] against examples[trajs[i].example_index], on the
// context's worker threads. Distinct gold queries run first (once each), then the samples.
void score_batch(const RewardPanel& panel, const std::vector<sql::Example>& examples, std::vector<Trajectory>& trajs,
                 RewardContext& ctx);

}  // namespace sqlrl::rl
