#include "rl/agent/trajectory.h"

namespace sqlrl::rl {

const char* action_kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::ExecSql: return "exec_sql";
    case ActionKind::MemoryRetrieve: return "memory_retrieve";
    case ActionKind::Answer: return "answer";
    case ActionKind::Invalid: return "invalid";
    case ActionKind::Reasoning: return "reasoning";
  }
  return "unknown";
}

void Trajectory::note_infra_failure(bool failed, const std::string& where, const std::string& error) {
  if (!failed || infra_failure) return;
  infra_failure = true;
  infra_reason = where + ": " + error;
}

namespace {

std::string_view trimmed_sql(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  for (;;) {
    while (!s.empty() && space(s.front())) s.remove_prefix(1);
    while (!s.empty() && space(s.back())) s.remove_suffix(1);
    if (s.empty() || s.back() != ';') return s;
    s.remove_suffix(1);
  }
}

}  // namespace

bool same_sql(std::string_view a, std::string_view b) { return trimmed_sql(a) == trimmed_sql(b); }

bool Trajectory::answer_was_executed() const {
  if (!has_final_sql()) return false;
  for (const TurnRecord& turn : turns)
    if (turn.action.kind == ActionKind::ExecSql && turn.executed && !turn.sql_error && same_sql(turn.action.sql, final_sql))
      return true;
  return false;
}

int64_t Trajectory::last_turn_begin() const {
  int64_t end = static_cast<int64_t>(policy_mask.size());
  while (end > 0 && !policy_mask[end - 1]) --end;
  if (end == 0) return static_cast<int64_t>(tokens.size());
  int64_t begin = end;
  while (begin > 0 && policy_mask[begin - 1]) --begin;
  return begin;
}

int64_t Trajectory::generated_tokens() const {
  int64_t n = 0;
  for (uint8_t m : policy_mask) n += m;
  return n;
}

}  // namespace sqlrl::rl
