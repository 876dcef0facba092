// A step's batch as JSON, whole (rl/grpo/train_data.h step_batch_json): what --async keeps in a
// checkpoint for the batches sampled ahead, so that a resumed run trains on the very samples the
// uninterrupted one would. Every field round-trips exactly (floats and doubles as the shortest
// text that reads back to the same bits, nlohmann's default).
#include <nlohmann/json.hpp>

#include "rl/grpo/train_data.h"
#include "runtime/error.h"

namespace sqlrl::rl {
namespace {

using json = nlohmann::ordered_json;

json turn_json(const TurnRecord& t) {
  return {{"assistant_text", t.assistant_text},
          {"kind", static_cast<int>(t.action.kind)},
          {"sql", t.action.sql},
          {"tool", t.action.tool},
          {"verdict", t.action.verdict},
          {"error", t.action.error},
          {"observation", t.observation},
          {"executed", t.executed},
          {"sql_error", t.sql_error},
          {"infra_error", t.infra_error},
          {"rows", t.rows},
          {"sql_seconds", t.sql_seconds}};
}

json trajectory_json_whole(const Trajectory& t) {
  json turns = json::array();
  for (const TurnRecord& r : t.turns) turns.push_back(turn_json(r));
  json terms = json::array();
  for (const auto& [name, value] : t.reward_terms) terms.push_back({name, value});
  return {{"example_index", t.example_index}, {"sample_index", t.sample_index},
          {"tokens", t.tokens},               {"policy_mask", t.policy_mask},
          {"sampler_logprobs", t.sampler_logprobs}, {"prompt_length", t.prompt_length},
          {"turns", turns},                   {"answered", t.answered},
          {"answer_fallback", t.answer_fallback}, {"final_sql", t.final_sql},
          {"truncated", t.truncated},         {"out_of_turns", t.out_of_turns},
          {"invalid_actions", t.invalid_actions}, {"decode_seconds", t.decode_seconds},
          {"sql_seconds", t.sql_seconds},     {"preemptions", t.preemptions},
          {"switch_at", t.switch_at},
          {"infra_failure", t.infra_failure}, {"infra_reason", t.infra_reason},
          {"reward", t.reward},               {"reward_terms", terms}};
}

// Reads field `key` of `j` into `out`; a missing or mistyped field names itself and `where`.
template <typename T>
void read(const nlohmann::json& j, const char* key, T& out, const std::string& where) {
  try {
    out = j.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    fail(where, ": field '", key, "': ", e.what());
  }
}

// Field `key` of `j`, which must be an array.
const nlohmann::json& array_at(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  check(it != j.end(), where, ": no field '", key, "'");
  check(it->is_array(), where, ": field '", key, "' is not an array");
  return *it;
}

TurnRecord turn_from_json(const nlohmann::json& j, const std::string& where) {
  TurnRecord t;
  int kind = 0;
  read(j, "assistant_text", t.assistant_text, where);
  read(j, "kind", kind, where);
  check(kind >= 0 && kind <= static_cast<int>(ActionKind::Reasoning), where, ": field 'kind': ", kind,
        " is not an action kind");
  t.action.kind = static_cast<ActionKind>(kind);
  read(j, "sql", t.action.sql, where);
  read(j, "tool", t.action.tool, where);
  read(j, "verdict", t.action.verdict, where);
  read(j, "error", t.action.error, where);
  read(j, "observation", t.observation, where);
  read(j, "executed", t.executed, where);
  read(j, "sql_error", t.sql_error, where);
  read(j, "infra_error", t.infra_error, where);
  read(j, "rows", t.rows, where);
  read(j, "sql_seconds", t.sql_seconds, where);
  return t;
}

Trajectory trajectory_from_json(const nlohmann::json& j, int64_t examples, const std::string& where) {
  Trajectory t;
  read(j, "example_index", t.example_index, where);
  check(t.example_index >= 0 && t.example_index < examples, where, ": example_index ", t.example_index, " of ",
        examples, " examples");
  read(j, "sample_index", t.sample_index, where);
  read(j, "tokens", t.tokens, where);
  read(j, "policy_mask", t.policy_mask, where);
  read(j, "sampler_logprobs", t.sampler_logprobs, where);
  check(t.policy_mask.size() == t.tokens.size() && t.sampler_logprobs.size() == t.tokens.size(), where, ": ",
        t.tokens.size(), " tokens, ", t.policy_mask.size(), " mask entries, ", t.sampler_logprobs.size(), " log-probs");
  read(j, "prompt_length", t.prompt_length, where);
  const nlohmann::json& turns = array_at(j, "turns", where);
  for (size_t i = 0; i < turns.size(); ++i) t.turns.push_back(turn_from_json(turns[i], str_cat(where, ".turns[", i, "]")));
  read(j, "answered", t.answered, where);
  read(j, "answer_fallback", t.answer_fallback, where);
  read(j, "final_sql", t.final_sql, where);
  read(j, "truncated", t.truncated, where);
  read(j, "out_of_turns", t.out_of_turns, where);
  read(j, "invalid_actions", t.invalid_actions, where);
  read(j, "decode_seconds", t.decode_seconds, where);
  read(j, "sql_seconds", t.sql_seconds, where);
  read(j, "preemptions", t.preemptions, where);
  if (j.contains("switch_at")) read(j, "switch_at", t.switch_at, where);  // absent before partial rollout
  read(j, "infra_failure", t.infra_failure, where);
  read(j, "infra_reason", t.infra_reason, where);
  read(j, "reward", t.reward, where);
  read(j, "reward_terms", t.reward_terms, where);
  return t;
}

}  // namespace

nlohmann::ordered_json step_batch_json(const StepBatch& b) {
  json trajs = json::array();
  for (const Trajectory& t : b.trajs) trajs.push_back(trajectory_json_whole(t));
  const RolloutStats& r = b.rollout;
  const json rollout = {{"sampled_tokens", r.sampled_tokens}, {"injected_tokens", r.injected_tokens},
                        {"prompt_tokens", r.prompt_tokens},   {"prefill_tokens", r.prefill_tokens},
                        {"sql_calls", r.sql_calls},           {"sql_errors", r.sql_errors},
                        {"sql_infra_errors", r.sql_infra_errors}, {"decode_seconds", r.decode_seconds},
                        {"prefill_seconds", r.prefill_seconds}, {"sql_seconds", r.sql_seconds},
                        {"wall_seconds", r.wall_seconds},     {"decode_steps", r.decode_steps},
                        {"kv_blocks", r.kv_blocks},           {"kv_blocks_peak", r.kv_blocks_peak},
                        {"preemptions", r.preemptions},       {"preempted_tokens", r.preempted_tokens},
                        {"live_sum", r.live_sum},             {"live_steps", r.live_steps},
                        {"live_max", r.live_max},             {"weight_switches", r.weight_switches},
                        {"switch_recomputed_tokens", r.switch_recomputed_tokens}};
  // A checkpoint keeps scores: a batch still being scored (--overlap-scoring) is waited for first.
  check(b.scored, "step_batch_json: the batch sampled by version ", b.version, " is not scored yet");
  return {{"example_ids", b.example_ids},
          {"trajectories", trajs},
          {"ex", b.ex},
          {"sums", b.sums},
          {"rollout", rollout},
          {"score_seconds", b.score_seconds},
          {"dynamic", {b.dynamic.tries, b.dynamic.prompts, b.dynamic.informative_groups, b.dynamic.kept_groups}},
          {"first_draw", b.first_draw},
          {"epoch", b.epoch},
          {"level", b.level},
          {"version", b.version}};
}

StepBatch step_batch_from_json(const nlohmann::json& j, const std::vector<sql::Example>& examples,
                               const std::string& where) {
  StepBatch b;
  read(j, "example_ids", b.example_ids, where);
  for (int64_t id : b.example_ids) {
    check(id >= 0 && id < static_cast<int64_t>(examples.size()), where, ": example id ", id, " of a dataset of ",
          examples.size());
    b.examples.push_back(examples[static_cast<size_t>(id)]);
  }
  const nlohmann::json& trajs = array_at(j, "trajectories", where);
  for (size_t i = 0; i < trajs.size(); ++i)
    b.trajs.push_back(trajectory_from_json(trajs[i], static_cast<int64_t>(b.examples.size()),
                                           str_cat(where, ".trajectories[", i, "]")));
  read(j, "ex", b.ex, where);
  check(b.ex.size() == b.trajs.size(), where, ": ", b.ex.size(), " EX flags for ", b.trajs.size(), " trajectories");
  read(j, "sums", b.sums, where);
  const std::string rw = where + ".rollout";
  nlohmann::json r;
  read(j, "rollout", r, where);
  RolloutStats& s = b.rollout;
  for (auto [key, field] : {std::pair{"sampled_tokens", &s.sampled_tokens}, {"injected_tokens", &s.injected_tokens},
                            {"prompt_tokens", &s.prompt_tokens},       {"prefill_tokens", &s.prefill_tokens},
                            {"sql_calls", &s.sql_calls},               {"sql_errors", &s.sql_errors},
                            {"sql_infra_errors", &s.sql_infra_errors}, {"decode_steps", &s.decode_steps},
                            {"kv_blocks", &s.kv_blocks},               {"kv_blocks_peak", &s.kv_blocks_peak},
                            {"preemptions", &s.preemptions},           {"preempted_tokens", &s.preempted_tokens},
                            {"live_sum", &s.live_sum},                 {"live_steps", &s.live_steps},
                            {"live_max", &s.live_max}})
    read(r, key, *field, rw);
  for (auto [key, field] : {std::pair{"weight_switches", &s.weight_switches},
                            {"switch_recomputed_tokens", &s.switch_recomputed_tokens}})
    if (r.contains(key)) read(r, key, *field, rw);  // absent before partial rollout
  for (auto [key, field] : {std::pair{"decode_seconds", &s.decode_seconds}, {"prefill_seconds", &s.prefill_seconds},
                            {"sql_seconds", &s.sql_seconds},             {"wall_seconds", &s.wall_seconds}})
    read(r, key, *field, rw);
  read(j, "score_seconds", b.score_seconds, where);
  std::vector<int64_t> dynamic;
  read(j, "dynamic", dynamic, where);
  check(dynamic.size() == 4, where, ": field 'dynamic' has ", dynamic.size(), " numbers, not 4");
  b.dynamic = {dynamic[0], dynamic[1], dynamic[2], dynamic[3]};
  read(j, "first_draw", b.first_draw, where);
  read(j, "epoch", b.epoch, where);
  read(j, "level", b.level, where);
  read(j, "version", b.version, where);
  return b;
}

}  // namespace sqlrl::rl
