// Evaluation of a text-to-SQL agent: roll out every question (greedy, or k samples), score the
// final SQL of every sample (EX in the dataset's comparison mode, Spider exact-set match where
// the gold parses, the result's hash for voting), pick each question's prediction by mode, and
// aggregate: totals, pass@k, by difficulty, by dialogue turn with interaction match, turns,
// format errors, SQL calls, latency. Scoring needs no model (hand-made trajectories in tests).
//
// Modes (the papers' test-time practice, SQL-Trail §4.1):
//   greedy  one sample at T=0; the prediction is its answer (pass@1).
//   vote    k samples; the prediction is the majority by execution-result consensus.
//   passk   k samples; a question counts when any sample is right (pass@k with n=k); pass@j
//           for j = 1, 2, 4, ... < k is reported with the unbiased estimator.
// Every mode also reports pass@1 as the mean share of right samples, so greedy and sampled
// runs compare on one number.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "model/model.h"
#include "rl/agent/protocol.h"
#include "rl/agent/reward.h"
#include "rl/agent/rollout.h"
#include "rl/agent/trajectory.h"
#include "runtime/comm.h"
#include "sql/data/datasets.h"
#include "tokenizer/tokenizer.h"

namespace sqlrl::rl {

enum class EvalMode { Greedy, Vote, PassK };
EvalMode parse_eval_mode(const std::string& name);  // "greedy" | "vote" | "passk"; else an error naming them
const char* eval_mode_name(EvalMode mode);

// ---- pure metrics

// The unbiased pass@k estimator of Chen et al. (2021): 1 - C(n-c, k) / C(n, k), computed as
// 1 - prod_{i=n-c+1}^{n} (1 - k/i) so no binomial overflows. Needs 0 <= c <= n and 1 <= k <= n.
double pass_at_k(int64_t n, int64_t c, int64_t k);

// Majority vote by execution result. hashes[i] is sql::result_hash of sample i's final result,
// 0 when the sample has no executable answer (never a candidate). The largest group of equal
// hashes wins; among groups of equal size the one whose earliest member comes first wins, and
// the group's earliest member is the winner. winner = -1 when no sample is executable.
struct Vote {
  int64_t winner = -1;
  int64_t votes = 0;   // members of the winning group
  int64_t groups = 0;  // distinct executable results
};
Vote majority_vote(const std::vector<uint64_t>& hashes);

// ---- scoring (no model)

struct SampleOutcome {
  bool answered = false;
  // Answered in the protocol's format: an answer action ended it, no turn was malformed and
  // the token cap did not cut it. Its complement is the format-error rate.
  bool format_ok = false;
  bool executable = false;   // the final SQL ran: no error, no timeout, no second statement
  bool ex = false;           // executable and its result matches the gold's
  bool em = false;           // Spider exact-set match (false when the gold does not parse)
  uint64_t result_hash = 0;  // set semantics (duplicates and row order ignored); 0 = not executable or truncated
  int64_t turns = 0, sql_calls = 0;
  double seconds = 0;  // decode + SQL time of this sample (wall time of its batched steps)
  // Some SQL of the sample (a turn's, its answer's or the gold's) failed for the infrastructure's
  // reason (sql::Result::infra_error). Scored as it came out (EX as the official scripts would
  // count it); the summary counts these so a low number can be told from a broken machine.
  bool infra_failure = false;
  // The answer turn against the queries the sample executed (ExecSql turns that reached the
  // database). A "copy error" is an answer that is not, as text, the last executed query
  // (same_sql: whitespace and a trailing ';' aside): the agent re-typed it and changed it. It is
  // defined when the sample executed some SQL and then answered (copy_checked). first_ex and
  // last_ex are EX of the first and last executed query, judged exactly as the answer is (the
  // context's comparison mode, test-suite agreement); false when nothing was executed.
  bool executed_sql = false;
  bool copy_checked = false, copy_error = false;
  bool first_ex = false, last_ex = false;
};

struct ExampleResult {
  size_t example_index = 0;
  std::vector<SampleOutcome> samples;
  int64_t chosen = 0;             // the sample whose answer is the prediction
  std::string prediction;         // its final SQL ("" when it never answered)
  bool correct = false;           // the mode's verdict (passk: any sample right)
  bool em = false;                // exact-set match of the prediction
  bool gold_parsed = false;       // the gold parses with Spider's parser (EM is defined)
  bool gold_error = false;        // the gold query failed to run (no sample can be right)
  int64_t num_correct = 0;        // c: samples with EX
  int64_t votes = 0;              // vote: members of the winning group
  std::vector<TurnRecord> turns;  // the chosen sample's turns, for error analysis
  double seconds = 0;             // latency: the slowest of its samples
};

// Scores one sample's final SQL against the example's gold and counts its turns and SQL calls.
// Spider mode is test-suite-sql-eval's EX: its preprocessing, result_eq, and agreement on every
// *.sqlite file in the example's database folder; BIRD mode is set equality on the example's file.
SampleOutcome score_sample(const sql::Example& example, const Trajectory& traj, RewardContext& ctx);

// trajs holds `samples` trajectories per example in (example, sample) order, each with
// example_index into `examples`. Samples are scored on the context's worker threads; the
// result is the same whatever the thread count.
std::vector<ExampleResult> score_examples(const std::vector<sql::Example>& examples,
                                          const std::vector<Trajectory>& trajs, int64_t samples, EvalMode mode,
                                          RewardContext& ctx);

// Picks the prediction: greedy -> sample 0; vote -> the majority winner; passk -> the first
// right sample, else the majority winner. Without an executable sample: the first answered
// sample, else sample 0. Fills chosen, prediction, correct, em, num_correct, votes, seconds.
void choose_prediction(ExampleResult& result, EvalMode mode);

// ---- aggregation

struct Tally {
  int64_t n = 0, correct = 0;
  int64_t em_n = 0, em = 0;  // questions whose gold parses, and of those exact matches
  double ex() const { return n ? static_cast<double>(correct) / n : 0; }
  double em_rate() const { return em_n ? static_cast<double>(em) / em_n : 0; }
};

struct EvalSummary {
  int64_t samples = 1;
  Tally total;
  // Labels as the dataset gives them ("unknown" when none), known levels first in their
  // natural order (easy, medium, hard, extra, simple, moderate, challenging, ...), then others
  // by name. Their n add up to total.n.
  std::vector<std::pair<std::string, Tally>> by_difficulty;
  // The synthetic benchmark's trap categories (sql::Example::category) by name; questions without
  // one are in no row, dialogues are not grouped. Empty when no question has a category.
  std::vector<std::pair<std::string, Tally>> by_category;
  // Dialogue datasets: question match per turn ("1", "2", "3", "4", ">4" as the SParC/CoSQL
  // evaluation groups them) and interaction match (every turn of a dialogue right).
  bool dialogue = false;
  std::vector<std::pair<std::string, Tally>> by_turn;
  // n = dialogues, correct = every turn EX, em = every turn EM (em_n = n; a turn whose gold does
  // not parse counts as a miss). Only the turns evaluated count (--limit may cut a dialogue).
  Tally interactions;
  std::vector<std::pair<int64_t, double>> pass_at;  // k -> mean unbiased pass@k over questions
  double vote_ex = 0;                               // samples > 1: EX of the majority answer
  int64_t trajectories = 0;
  double answered_rate = 0, executable_rate = 0, format_error_rate = 0;  // over all trajectories
  double avg_turns = 0, sql_calls_per_trajectory = 0;
  double sql_calls_per_question = 0;  // all samples of a question together
  // The answer turn against the executed queries, over trajectories (every sample):
  //   copy errors: answers that differ from the last executed query, of copy_checked ones;
  //   first right -> final wrong / first wrong -> final right: of trajectories that executed SQL,
  //   the first executed query EX-right and the final answer not (lost), and the reverse (gained);
  //   last right -> final wrong: the last executed query was right and the answer is not (a
  //   correct query lost in the answer turn itself).
  int64_t copy_checked = 0, copy_errors = 0;
  int64_t with_sql = 0, first_right_final_wrong = 0, first_wrong_final_right = 0, last_right_final_wrong = 0;
  double copy_error_rate() const { return copy_checked ? static_cast<double>(copy_errors) / copy_checked : 0; }
  double rate_of_with_sql(int64_t count) const { return with_sql ? static_cast<double>(count) / with_sql : 0; }
  int64_t gold_errors = 0;
  int64_t infra_failures = 0;  // trajectories with SampleOutcome::infra_failure
  double mean_question_seconds = 0;  // latency (wall time; differs run to run)
};

// dialogue: group turns by Example::record_index for interaction match.
EvalSummary summarize(const std::vector<sql::Example>& examples, const std::vector<ExampleResult>& results,
                      int64_t samples, bool dialogue);

// ---- what is evaluated (shared by `eval` and evaluation during `train`)

// "FORMAT:PATH[,db=DBDIR]" (sql::parse_dataset_spec) as the load options of `split`, Spider
// hardness computed where the dataset has no label. Errors name `key` (the flag or config key) and
// the value: no colon, an unknown format or option, no such folder.
sql::LoadOptions eval_load_options(const std::string& spec, const std::string& split, const std::string& key);
// The split's first `limit` questions (0 = all); an error naming `what` when there are none.
std::vector<sql::Example> load_eval_examples(const sql::LoadOptions& load, int64_t limit, const std::string& what);
// EX semantics: `compare` ("spider" | "bird") when given, else BIRD's set equality for BIRD data
// and test-suite EX for the rest. A bad name is an error naming `key` and it.
sql::CompareMode eval_compare_mode(const std::string& compare, sql::DatasetFormat format,
                                   const std::string& key = "compare");
// SParC / CoSQL: turns of dialogues (interaction match is reported).
bool dialogue_format(sql::DatasetFormat format);

// ---- running

struct EvalOptions {
  EvalMode mode = EvalMode::Greedy;
  int64_t samples = 1;           // k (greedy: 1)
  RolloutOptions rollout;        // sampling, limits, chat template; group_size and single_turn are set from here
  bool single_turn = false;      // no execution: the first SQL written is the answer, one turn
  bool dialogue = false;         // the dataset is SParC/CoSQL
  int64_t batch_questions = 32;  // questions rolled out together (same value, same floats)
  // A progress line per batch (runtime/progress.h): questions done, running EX, ETA; redrawn in
  // place on a terminal, else a line per batch on stdout. Several ranks: rank 0's share.
  bool progress = false;
  std::string progress_label = "eval";
  // A KV cache the caller keeps (the trainer's, from its memory plan; rollout(..., kv)), so an
  // evaluation inside a run allocates no second one; null: each batch's rollout sizes its own.
  PolicyKV* kv = nullptr;
};

struct EvalRun {
  std::vector<ExampleResult> results;  // one per example, in order
  EvalSummary summary;
  RolloutStats stats;  // summed over batches
  double seconds = 0;
};

// Rolls out every example (batch by batch; sample s of example i draws Philox stream
// first_sample_id + i * samples + s, so a question's samples do not depend on the batching)
// and scores them with `ctx` (its comparison mode decides EX).
EvalRun run_eval(const QwenModel& model, const Tokenizer& tokenizer, const Protocol& protocol, sql::Pool& pool,
                 const std::vector<sql::Example>& examples, const EvalOptions& options, RewardContext& ctx);
// The same on either device (rl/policy.h).
EvalRun run_eval(const Policy& policy, const Tokenizer& tokenizer, const Protocol& protocol, sql::Pool& pool,
                 const std::vector<sql::Example>& examples, const EvalOptions& options, RewardContext& ctx);

// Data parallel (runtime/comm.h): rank r rolls out questions [rE/W, (r+1)E/W) with the sample
// streams of their global index, and every rank's results are gathered in dataset order: every
// rank returns the run one process returns (summed rollout stats, the slowest rank's seconds).
EvalRun run_eval(const Policy& policy, const Tokenizer& tokenizer, const Protocol& protocol, sql::Pool& pool,
                 const std::vector<sql::Example>& examples, const EvalOptions& options, RewardContext& ctx,
                 const Comm& comm);

// ---- output

// What the run was, for the summary's header.
struct EvalInfo {
  std::string dataset, split, protocol, weights, compare;
  uint64_t seed = 0;
  std::string device = "cpu";  // cpu (f32) or cuda (bf16 weights): the greedy choices can differ
  std::string adapter = "";    // a LoRA adapter folder applied unmerged; "" = none (not written then)
};

// Deterministic fields at the top level; wall-clock figures only under "time".
nlohmann::ordered_json summary_json(const EvalRun& run, const EvalOptions& options, const EvalInfo& info);
// The answer turn against the executed queries (copy errors; first/last executed query right and
// the final answer wrong, and the reverse), as summary.json and the demo's report.json write it.
void add_answer_turn_json(nlohmann::ordered_json& j, const EvalSummary& s);
// The paper-style tables (no timings, so it repeats bit for bit).
std::string summary_markdown(const EvalRun& run, const EvalOptions& options, const EvalInfo& info);
// One line per example: id, db_id, question, gold, prediction, correct, em, turns, sql_calls,
// format_ok, seconds (wall clock), plus difficulty, turn, samples, the chosen sample's actions.
std::string examples_jsonl(const std::vector<sql::Example>& examples, const EvalRun& run);

// summary.json, summary.md and examples.jsonl in `dir` (created), each written to a temporary
// file and renamed, so a reader never sees half a file.
void write_eval_outputs(const std::string& dir, const std::vector<sql::Example>& examples, const EvalRun& run,
                        const EvalOptions& options, const EvalInfo& info);

}  // namespace sqlrl::rl
