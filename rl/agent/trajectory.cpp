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

int64_t Trajectory::generated_tokens() const {
  int64_t n = 0;
  for (uint8_t m : policy_mask) n += m;
  return n;
}

}  // namespace sqlrl::rl
