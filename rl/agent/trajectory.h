// What one multi-turn rollout of the agent produced, shared by the protocols (which parse and
// format), the rollout engine (which fills it), the rewards (which score it), the GRPO trainer
// (which learns from it) and the run folder (which logs it).
//
// Token layout: tokens = prompt, then for each turn the assistant's sampled tokens followed by
// the injected observation tokens. policy_mask is 1 exactly on sampled tokens (the only ones
// trained on) and 0 on prompt, observation and any other injected text.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sqlrl::rl {

enum class ActionKind : uint8_t {
  ExecSql,         // run `sql` and observe (skyrl/sqltrail <sql>, mtir tool call, mtsql exec_sql)
  MemoryRetrieve,  // mtsql memory_retrieve: look up the dialogue history
  Answer,          // final answer: `sql` is the submitted query; ends the trajectory
  Invalid,         // malformed turn (unclosed tag, two actions, bad tool JSON, no action)
  // A segment with no action where the paper allows one (SQL-Trail's Algorithm 1 stops at
  // </reasoning>): nothing runs, the episode goes on, and it is not an invalid action.
  Reasoning,
};
const char* action_kind_name(ActionKind kind);

struct Action {
  ActionKind kind = ActionKind::Invalid;
  std::string sql;      // ExecSql / Answer: the query; MemoryRetrieve: the code argument
  std::string tool;     // tool name as written (mtir / mtsql), "" for tag protocols
  std::string verdict;  // mtsql E-/M-VERIFY verdict as written ("pass" / "no_pass"), else ""
  std::string error;    // Invalid: what was wrong, for logs
};

// One assistant turn and the environment's answer to it.
struct TurnRecord {
  // The turn's text: the head the environment forced (Protocol::final_turn_prefix), if any, then
  // the decoded sampled text (stop string included).
  std::string assistant_text;
  Action action;
  std::string observation;     // decoded injected text after the turn ("" when none)
  bool executed = false;       // the SQL reached the database
  bool sql_error = false;      // ... and failed (syntax, timeout, limit, or the machine's: infra_error)
  bool infra_error = false;    // ... for the infrastructure's reason (sql::Result::infra_error)
  int64_t rows = 0;            // rows returned when it succeeded
  double sql_seconds = 0;
};

struct Trajectory {
  int64_t example_index = 0;  // into the batch's example list
  int64_t sample_index = 0;   // 0..G-1 within its group
  std::vector<int32_t> tokens;
  std::vector<uint8_t> policy_mask;       // [tokens.size()]
  std::vector<float> sampler_logprobs;    // [tokens.size()]: log-prob under the sampling distribution, 0 where mask 0
  int64_t prompt_length = 0;              // tokens[0, prompt_length) are the prompt
  std::vector<TurnRecord> turns;
  bool answered = false;                  // ended with an Answer action
  // Not answered, but the protocol names the SQL to score (Protocol::fallback_answer: MTSQL-R1's
  // last tool call); final_sql holds it.
  bool answer_fallback = false;
  std::string final_sql;                  // the answer's (or the fallback's) SQL, else ""
  bool truncated = false;                 // hit the token cap (or context length) mid-turn
  bool out_of_turns = false;              // hit the turn budget without answering
  int64_t invalid_actions = 0;
  double decode_seconds = 0, sql_seconds = 0;
  // Times the rollout preempted this sample (its KV blocks freed when the cache ran out, its
  // history prefilled again when readmitted). Like the times, a fact of the schedule: what was
  // sampled does not depend on it.
  int64_t preemptions = 0;
  // Partial rollout (RolloutOptions::switch_weights): tokens [switch_at, end) were sampled by the
  // next weights, the ones before by the weights the rollout began with; -1: one version only.
  int64_t switch_at = -1;
  // Some SQL of this trajectory failed for the infrastructure's reason (sql::Result::infra_error):
  // a turn's query (set by the rollout) or, at scoring, the final answer's or the gold's (set by
  // the reward). Its reward says nothing about the model: GRPO leaves it out of its group's
  // baseline and of the loss (rl/grpo/grpo.h select_trajectories).
  bool infra_failure = false;
  std::string infra_reason;  // the first such failure: "turn 2: <the pool's error>"

  // Marks the trajectory (keeping the first reason) when `failed` is the infrastructure's.
  void note_infra_failure(bool failed, const std::string& where, const std::string& error);

  // Filled by the reward panel.
  double reward = 0;
  std::vector<std::pair<std::string, double>> reward_terms;  // name -> weighted value, in panel order

  int64_t generated_tokens() const;  // count of policy_mask == 1
  bool has_final_sql() const { return answered || answer_fallback; }  // final_sql is to be scored
  // The final SQL is, as text (same_sql), a query this trajectory executed without error in an
  // earlier turn: the answer was observed to run, not re-typed into something never run.
  bool answer_was_executed() const;
  // First token of the last turn's sampled text (the answer turn of an answered trajectory: the
  // last run of policy_mask 1; a forced head before it is injected, mask 0); tokens.size() when
  // nothing was sampled.
  int64_t last_turn_begin() const;
};

// Two SQL texts are the same query as typed: equal after trimming whitespace and trailing ';'.
bool same_sql(std::string_view a, std::string_view b);

}  // namespace sqlrl::rl
