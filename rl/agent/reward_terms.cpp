// The four panels' terms, each beside the paper's definition. Raw values; rl/agent/reward.cpp weights.
#include <algorithm>
#include <cctype>

#include "rl/agent/protocol.h"
#include "rl/agent/reward_detail.h"
#include "runtime/error.h"
#include "sql/eval/sql_features.h"

namespace sqlrl::rl::detail {
namespace {

size_t first_of(std::string_view text, std::initializer_list<std::string_view> tags, size_t from = 0) {
  size_t best = std::string_view::npos;
  for (std::string_view tag : tags) best = std::min(best, text.find(tag, from));
  return best;
}

// A closed reasoning block `open`...`close` that ends before the turn's first action tag
// (the action itself was read by the protocol; here only the order of the blocks matters).
bool reasoning_before_action(std::string_view text, std::string_view open, std::string_view close,
                             std::initializer_list<std::string_view> action_tags, bool at_start) {
  size_t o = text.find(open), c = text.find(close);
  // A close with no opener before it: the chat template put the opener in the prompt (Qwen3
  // thinking templates do), so the block is the model's all the same (as rl/agent/protocol reads it).
  bool opener_in_prompt = c != std::string_view::npos && (o == std::string_view::npos || c < o);
  if (!opener_in_prompt) {
    if (o == std::string_view::npos) return false;
    if (at_start && text.find_first_not_of(" \t\r\n") != o) return false;
    c = text.find(close, o + open.size());
    if (c == std::string_view::npos) return false;
  }
  size_t a = first_of(text, action_tags);
  return a != std::string_view::npos && c + close.size() <= a;
}

// A single-turn rollout (RolloutOptions::single_turn: `train --single-turn`, `eval --single-turn`)
// takes the first SQL written as the answer, an execution call included; that is the only way an
// ExecSql action ends an answered trajectory. Its call is then the episode's answer for the format
// terms, as the evaluation reads it (otherwise every such rollout of a model that probes first
// would be malformed, and single-turn GRPO would see one reward in every group).
bool answered_by_sql_call(const Trajectory& t) {
  return t.answered && !t.turns.empty() && t.turns.back().action.kind == ActionKind::ExecSql;
}

bool clean_ending(const Trajectory& t) {
  if (!t.answered || t.truncated || t.invalid_actions > 0 || t.turns.empty()) return false;
  for (const TurnRecord& turn : t.turns)
    if (turn.action.kind == ActionKind::Invalid) return false;
  return t.turns.back().action.kind == ActionKind::Answer || answered_by_sql_call(t);
}

size_t count_of(std::string_view text, std::string_view what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string_view::npos; p = text.find(what, p + what.size())) ++n;
  return n;
}

}  // namespace

// ---- MTIR-SQL §3.3 --------------------------------------------------------------------------
// Format (eq. 5): "a strict order: starting with <think>...</think>, followed optionally by
// <tool_call>...</tool_response>, and concluding with the <answer>...</answer> tag". Read per
// assistant turn: each starts with a closed <think> block followed by its action (a tool call
// or, last, the answer); no invalid turn; the episode ends with the answer, not truncated.
// Execution (eq. 6) and result (eq. 7) read the final answer's SQL: both 0 when the format is
// wrong, result also 0 when the SQL does not execute (its timeout is the pool's limit).
std::vector<double> mtir_terms(const sql::Example&, const Trajectory& t, const Outcome& o, RewardContext&) {
  bool format = clean_ending(t);
  for (const TurnRecord& turn : t.turns)
    format = format && reasoning_before_action(turn.assistant_text, "<think>", "</think>", {"<tool_call>", "<answer>"}, true);
  double r_format = format ? 1 : -1;
  double r_exec = !format ? 0 : (o.executable ? 1 : -1);
  double r_result = (!format || !o.executable) ? 0 : (o.ex ? 1 : -1);
  return {r_format, r_exec, r_result};
}

// ---- SQL-Trail A.4 --------------------------------------------------------------------------
std::vector<double> sqltrail_terms(const sql::Example& ex, const Trajectory& t, const Outcome& o, RewardContext& ctx) {
  // r_exec (eq. 6): 1[exec(pred) = exec(gold)] for the SQL inside <solution>.
  double r_exec = o.ex ? 1 : 0;

  // r_turns (eq. 7), t = the finishing turn (turns taken, the answering turn included):
  // simple ∧ t≤2, medium ∧ t≤3, (hard ∨ extra) ∧ r_exec=1 ∧ t<T. A trajectory that never
  // submitted a solution has no finishing turn and gets 0 (our reading). Unlabelled examples
  // take Spider's hardness of the gold; a gold Spider's parser rejects counts as hard.
  double r_turns = 0;
  if (o.answered) {
    auto gold = gold_facts(ctx, ex);
    TurnClass cls = TurnClass::Hard;
    if (!ex.difficulty.empty()) {
      cls = turn_class_of_label(ex.difficulty, ex.id);
    } else if (gold->q.parsed) {
      try {
        cls = turn_class_of_label(sql::hardness_name(sql::spider_hardness(gold->q.raw)), ex.id);
      } catch (const Error&) {
        cls = TurnClass::Hard;
      }
    }
    int64_t turns = static_cast<int64_t>(t.turns.size());
    if (cls == TurnClass::Simple) r_turns = turns <= 2;
    if (cls == TurnClass::Medium) r_turns = turns <= 3;
    if (cls == TurnClass::Hard) r_turns = r_exec == 1 && turns < ctx.turn_budget;
  }

  // r_schema (eq. 10) and r_ngram (eq. 9): Jaccard of schema items and of SQL-token bigrams of
  // the final SQL against the gold. Items come from Spider's parse when both queries parse,
  // else from the lexical reader for both (so a hallucinated column still counts in the union,
  // as in the paper's Employees/Wages example). Tokens are Spider's (lower-cased, a quoted
  // value is one token). No solution: 0.
  double r_schema = 0, r_bigram = 0;
  if (o.answered) {
    auto gold = gold_facts(ctx, ex);
    auto db = db_facts(ctx, ex.db_path);
    QueryFacts pred = query_facts(*db, o.pred);
    r_schema = (pred.parsed && gold->q.parsed) ? sql::jaccard(pred.parsed_items, gold->q.parsed_items)
                                               : sql::jaccard(pred.lexical_items, gold->q.lexical_items);
    try {
      if (gold->bigrams_ok) r_bigram = sql::jaccard(sql::token_bigrams(o.pred), gold->bigrams);
    } catch (const Error&) {
      r_bigram = 0;  // odd number of quotes: the tokeniser (and so the paper's scorer) rejects it
    }
  }

  // r_syntax (eq. 8): 1[pred_sql is executable].
  double r_syntax = o.executable ? 1 : 0;

  // r_format (eq. 11): "the output must include think and think-end ... as well as sol and
  // sol-end": the final turn holds a closed reasoning block before <solution>...</solution>.
  // The prompt (A.8) names the block <reasoning> while its example and A.4 use <think>: either.
  double r_format = 0;
  if (o.answered && !t.turns.empty()) {
    std::string_view last = t.turns.back().assistant_text;
    bool solution = last.find("<solution>") != std::string_view::npos &&
                    last.find("</solution>", last.find("<solution>")) != std::string_view::npos;
    bool reasoning = reasoning_before_action(last, "<think>", "</think>", {"<solution>"}, false) ||
                     reasoning_before_action(last, "<reasoning>", "</reasoning>", {"<solution>"}, false);
    r_format = solution && reasoning ? 1 : 0;
  }
  // Order of the panel: exec, turns, schema, bigram, syntax, format.
  return {r_exec, r_turns, r_schema, r_bigram, r_syntax, r_format};
}

// ---- SkyRL-SQL §4.1 -------------------------------------------------------------------------
// "−1 if format is invalid; 0 if format is valid but execution is incorrect; 1 if correct".
// Format: "<think> blocks indicating reasoning and <sql> blocks indicating an intermediate SQL
// query in each turn and a <solution> block indicating commitment to a final query in each
// rollout": every turn has a closed <think> block before its action, every turn before the last
// is an <sql> call, the last is the one <solution> (the released checker also demands exactly
// one <solution> in the whole history, kept here), nothing truncated.
std::vector<double> skyrl_terms(const sql::Example&, const Trajectory& t, const Outcome& o, RewardContext&) {
  bool format = clean_ending(t);
  size_t solutions = 0;
  for (size_t i = 0; format && i < t.turns.size(); ++i) {
    const TurnRecord& turn = t.turns[i];
    bool last = i + 1 == t.turns.size();
    format = reasoning_before_action(turn.assistant_text, "<think>", "</think>", {"<sql>", "<solution>"}, false) &&
             (last || turn.action.kind == ActionKind::ExecSql);
    solutions += count_of(turn.assistant_text, "<solution>");
  }
  format = format && solutions == (answered_by_sql_call(t) ? 0 : 1);  // single-turn: the <sql> call answered
  return {format ? (o.ex ? 1.0 : 0.0) : -1.0};
}

// ---- MTSQL-R1 §3.3.2 ------------------------------------------------------------------------
namespace {

enum class Verdict { Missing, Pass, Fail };

// The verdict written in the turn after a tool call (outside <think>, the last if repeated:
// the protocol's reading). "pass" passes; "no_pass" (the prompts' word, Appendix B) and "fail"
// (§3.3.2's) fail; anything else, or nothing, is Missing.
Verdict verdict_of(const std::string& word) {
  std::string w;
  for (char ch : word)
    if (!std::isspace(static_cast<unsigned char>(ch))) w += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (w == "pass") return Verdict::Pass;
  if (w == "no_pass" || w == "fail" || w == "nopass") return Verdict::Fail;
  return Verdict::Missing;
}

}  // namespace

// R_EX: 1[Exec(ŷ_n) == Exec(y)]. R_EM: the paper calls it a strict string match, but its EM
// metric ("the same definitions as in our reward design", §4) and the released reward are
// Spider's exact-set match on CoSQL/SParC; we use that (string_em when the gold does not parse).
// R_Propose/Self-Correct: AVG clause F1 of each candidate SQL (every exec_sql call: the first
// is PROPOSE, later ones SELF-CORRECT; the answer itself when nothing was executed), averaged
// over the candidates so more tool calls earn no more reward (the released code averages too).
// R_E-Verify: table over (result of the executed SQL: ok / null = no rows / error) × verdict
// in the next turn; R_M-Verify: F1 of the memory_retrieve'd SQL if pass, 1 − F1 otherwise.
// Each averaged over its verifications; a call with no following turn had no verification and
// is not counted (the released code counts it as a pass on an "ok" result: a trajectory cut
// after its last call would earn the verify reward for a check it never made); a following
// turn without a verdict reads "pass" as the released code does (ctx.mtsql_missing_verdict_passes;
// off: it scores 0). verify = mean E + mean M.
std::vector<double> mtsql_terms(const sql::Example& ex, const Trajectory& t, const Outcome& o, RewardContext& ctx) {
  auto gold = gold_facts(ctx, ex);
  auto db = db_facts(ctx, ex.db_path);
  double r_ex = o.ex ? 1 : 0;
  double r_em = 0;
  if (o.answered) {
    if (gold->q.parsed) {
      QueryFacts pred = query_facts(*db, o.pred);
      r_em = pred.parsed && sql::spider_match(pred.rebuilt, gold->q.rebuilt).exact ? 1 : 0;
    } else {
      r_em = sql::string_em(o.pred, ex.gold_sql) ? 1 : 0;
    }
  }

  std::vector<std::string> candidates;
  for (const TurnRecord& turn : t.turns)
    if (turn.action.kind == ActionKind::ExecSql) candidates.push_back(turn.action.sql);
  if (candidates.empty() && o.answered) candidates.push_back(o.pred);
  double r_clause = 0;
  for (const std::string& c : candidates) r_clause += clause_f1_to_gold(*db, *gold, c);
  if (!candidates.empty()) r_clause /= static_cast<double>(candidates.size());

  const Verdict missing = ctx.mtsql_missing_verdict_passes ? Verdict::Pass : Verdict::Missing;
  auto read = [&](const std::string& word) {
    Verdict v = verdict_of(word);
    return v == Verdict::Missing ? missing : v;
  };
  double e_sum = 0, m_sum = 0;
  int e_n = 0, m_n = 0;
  std::string last_executed;
  for (size_t i = 0; i < t.turns.size(); ++i) {
    const TurnRecord& turn = t.turns[i];
    bool has_next = i + 1 < t.turns.size();
    if (turn.action.kind == ActionKind::ExecSql) {
      last_executed = turn.action.sql;
      if (!has_next) continue;
      Verdict v = read(mtsql_verdicts(t.turns[i + 1].assistant_text).exec);
      bool error = !turn.executed || turn.sql_error;
      bool null = !error && turn.rows == 0;
      double r = 0;  // table of §3.3.2: rows ok/null/error × VR fail/pass
      if (v == Verdict::Pass) r = (!error && !null) ? 1 : 0;
      if (v == Verdict::Fail) r = error ? 1 : (null ? 0.1 : 0);
      e_sum += r;
      ++e_n;
    } else if (turn.action.kind == ActionKind::MemoryRetrieve) {
      if (!has_next) continue;
      Verdict v = read(mtsql_verdicts(t.turns[i + 1].assistant_text).memory);
      const std::string& checked = turn.action.sql.empty() ? last_executed : turn.action.sql;
      double f1 = clause_f1_to_gold(*db, *gold, checked);
      m_sum += v == Verdict::Pass ? f1 : (v == Verdict::Fail ? 1 - f1 : 0);
      ++m_n;
    }
  }
  double r_verify = (e_n ? e_sum / e_n : 0) + (m_n ? m_sum / m_n : 0);
  return {r_ex, r_em, r_clause, r_verify};
}

}  // namespace sqlrl::rl::detail
