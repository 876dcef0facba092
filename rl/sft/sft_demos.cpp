#include "rl/sft/sft_demos.h"

#include <algorithm>

#include "rl/agent/reward.h"
#include "rl/agent/rollout.h"
#include "rl/agent/untrusted.h"
#include "runtime/error.h"
#include "runtime/progress.h"
#include "sql/exec/format.h"
#include "sql/data/synth_questions.h"

namespace sqlrl::rl {

std::vector<DemoTrap> record_traps(const nlohmann::json& record) {
  std::vector<DemoTrap> out;
  if (!record.is_object() || !record.contains("synth") || !record["synth"].contains("traps")) return out;
  for (const nlohmann::json& t : record["synth"]["traps"]) {
    auto str = [&](const char* key) { return t.contains(key) && t[key].is_string() ? t[key].get<std::string>() : ""; };
    out.push_back({str("kind"), str("table"), str("column"), str("question_value"), str("stored_value"), str("style")});
  }
  return out;
}

namespace {

enum class Step { Naive, Probe, Gold, Memory, Answer };

struct PlannedStep {
  Step step;
  size_t trap = 0;  // Probe: index into the traps
};

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

// The naive query a model would write first: the question's wording of each value, no CASTs.
std::string naive_sql(const std::string& gold, const std::vector<DemoTrap>& traps) {
  std::string sql = gold;
  for (const DemoTrap& t : traps)
    if (t.kind == "surface_form" && !t.stored_value.empty())
      sql = replace_all(sql, sql::synth::sql_quote(t.stored_value), sql::synth::sql_quote(t.question_value));
  return sql::synth::strip_casts(sql);
}

// Probe queries for one trap, most natural first; the first whose observation shows what the
// trap hides is used.
std::vector<std::string> probe_sqls(const DemoTrap& t) {
  const std::string col = t.column, table = t.table;
  if (t.kind == "number_as_text") return {"SELECT " + col + ", typeof(" + col + ") FROM " + table + " LIMIT 3"};
  if (t.style == "trailing_space")
    return {"SELECT DISTINCT " + col + ", length(" + col + ") FROM " + table + " WHERE trim(" + col +
            ") = " + sql::synth::sql_quote(t.question_value)};
  std::vector<std::string> out = {"SELECT DISTINCT " + col + " FROM " + table};
  if (t.style == "abbreviation" && !t.stored_value.empty())
    out.push_back("SELECT DISTINCT " + col + " FROM " + table + " WHERE " + col + " LIKE " +
                  sql::synth::sql_quote(t.stored_value.substr(0, 1) + "%"));
  else
    out.push_back("SELECT DISTINCT " + col + " FROM " + table + " WHERE lower(" + col + ") = lower(" +
                  sql::synth::sql_quote(t.question_value) + ")");
  return out;
}

// Whether an observation shows what the trap hides.
bool probe_shows(const DemoTrap& t, const std::string& observation) {
  if (t.kind == "number_as_text") return observation.find("text") != std::string::npos;
  std::string stored = t.stored_value;
  while (!stored.empty() && stored.back() == ' ') stored.pop_back();
  if (stored.empty() || observation.find(stored) == std::string::npos) return false;
  if (t.style == "trailing_space") return observation.find(std::to_string(t.stored_value.size())) != std::string::npos;
  return true;
}

std::string probe_intro(const DemoTrap& t) {
  if (t.kind == "number_as_text")
    return t.table + "." + t.column + " holds numbers; let me check how they are stored before comparing them.";
  return "The question says '" + t.question_value + "'. Let me check how " + t.table + "." + t.column +
         " stores that value.";
}

std::string probe_finding(const DemoTrap& t) {
  if (t.kind == "number_as_text")
    return t.table + "." + t.column + " is stored as text, so I compare it as a number with CAST(" + t.column +
           " AS INTEGER).";
  if (t.style == "trailing_space")
    return "The stored value is '" + t.question_value + "' with a trailing space (length " +
           std::to_string(t.stored_value.size()) + "), so an exact match needs " + sql::synth::sql_quote(t.stored_value) + ".";
  return "The column stores '" + t.stored_value + "' for what the question calls '" + t.question_value +
         "'. I will use the stored form.";
}

std::string result_note(const sql::Result& r) {
  if (!r.ok()) return "The query failed (" + r.error + ").";
  if (r.rows.empty()) return "The query returned no rows.";
  return "The query ran and returned rows.";
}

// One assistant turn in the protocol's format.
std::string write_turn(const Protocol& p, const std::string& reasoning, Step step, const std::string& sql,
                       const std::string& verdicts, const std::string& db_id) {
  const std::string name = p.name();
  const bool answer = step == Step::Answer;
  if (name == "skyrl" || name == "sqltrail") {
    const char* open = name == "skyrl" ? "<think>" : "<reasoning>";
    const char* close = name == "skyrl" ? "</think>" : "</reasoning>";
    return std::string(open) + reasoning + close + "\n" + (answer ? "<solution>" + sql + "</solution>" : "<sql>" + sql + "</sql>");
  }
  std::string out = "<think>\n" + reasoning + "\n</think>\n" + verdicts;
  if (name == "mtir") {
    if (answer) return out + "<answer>\n```sql\n" + sql + "\n```\n</answer>";
    nlohmann::ordered_json call = {{"name", "sql-execute_sql_query"}, {"arguments", {{"db_name", db_id}, {"sql", sql}}}};
    return out + "<tool_call>\n" + chat_json_dumps(call) + "\n</tool_call>";
  }
  if (name == "mtsql") {
    if (answer) return out + "<answer_sql>" + sql + "</answer_sql>";
    nlohmann::ordered_json call = {{"name", step == Step::Memory ? "memory_retrieve" : "exec_sql"},
                                   {"arguments", {{"code", sql}}}};
    return out + "<tool_call>\n" + chat_json_dumps(call) + "\n</tool_call>";
  }
  fail("sft synth-demos: no demonstration writer for protocol '", name, "'");
}

std::vector<PlannedStep> plan_steps(const Protocol& p, const std::vector<DemoTrap>& traps, bool naive, int budget) {
  const bool mtsql = std::string(p.name()) == "mtsql";
  bool memory = mtsql;
  for (;;) {
    std::vector<PlannedStep> s;
    if (naive) s.push_back({Step::Naive});
    for (size_t i = 0; i < traps.size(); ++i) s.push_back({Step::Probe, i});
    s.push_back({Step::Gold});
    if (memory) s.push_back({Step::Memory});
    s.push_back({Step::Answer});
    if (static_cast<int>(s.size()) <= budget) return s;
    if (naive) naive = false;
    else if (memory && !traps.empty()) memory = false;
    else return {};
  }
}

struct Builder {
  const Protocol& p;
  sql::Pool& pool;
  const sql::Example& ex;
  const SynthDemoOptions& o;
  Demo demo;
  int turn = 0;

  // Appends one turn; executes its SQL (and, for a retrieval, the dialogue's gold queries) and
  // injects the observation unless it is the answer. Returns the result.
  sql::Result add(const std::string& text, ActionKind kind, const std::string& sql) {
    Action a = p.parse(text);
    check(a.kind == kind && a.sql == sql, "sft synth-demos: ", p.name(), " reads the written turn as ",
          action_kind_name(a.kind), " '", a.sql, "' (", a.error, "), not ", action_kind_name(kind), " '", sql, "'");
    ++turn;
    demo.segments.push_back({text, true});
    DemoTurn dt{text, a, ""};
    sql::Result r;
    if (kind != ActionKind::Answer) {
      r = pool.execute(ex.db_path, sql, o.limits);
      std::vector<sql::Result> history;
      if (kind == ActionKind::MemoryRetrieve)
        for (const sql::Turn& h : ex.history) history.push_back(pool.execute(ex.db_path, h.gold_sql, o.limits));
      StepOutcome outcome;
      outcome.result = &r;
      outcome.db_path = sql::shown_db_path(ex.db_path);
      outcome.turns_left = p.max_turns() - turn;
      outcome.empty_think_block = o.chat_template == ChatTemplate::qwen3 && o.enable_thinking == false;
      if (kind == ActionKind::MemoryRetrieve) outcome.history_results = &history;
      const std::string injected = p.inject(a, outcome, ex);  // data spans marked (rl/agent/untrusted.h)
      dt.observation = strip_marks(injected);
      demo.segments.push_back(marked_segment(injected, false));  // tokenized as the rollout does
      demo.exec_turns += kind == ActionKind::ExecSql;
    } else {
      demo.segments.push_back({"<|im_end|>", true});
    }
    demo.turns.push_back(std::move(dt));
    return r;
  }
  // Drops the last turn (a probe whose observation did not show the value).
  void undo() {
    demo.segments.resize(demo.segments.size() - 2);
    demo.exec_turns -= demo.turns.back().action.kind == ActionKind::ExecSql;
    demo.turns.pop_back();
    --turn;
  }
};

enum class Built { Ok, Budget, Probe };

std::string to_answer(const Builder& b, const sql::Example& ex) {
  return b.o.restate_question ? "To answer \"" + ex.question + "\" " : "To answer the question ";
}

Built build_demo(Builder& b, const std::vector<DemoTrap>& traps, const std::vector<PlannedStep>& plan,
                 const std::string& prompt) {
  const Protocol& p = b.p;
  const sql::Example& ex = b.ex;
  const bool mtsql = std::string(p.name()) == "mtsql";
  if (plan.empty()) return Built::Budget;
  b.demo.segments.push_back(marked_segment(prompt, false));
  std::string note;      // what the last observation showed, opening the next turn's reasoning
  std::string verdicts;  // mtsql: the verdict on the last observation
  auto exec_verdict = [&](const sql::Result& r) {
    return mtsql ? std::string("<exec_verify>") + (r.ok() && !r.rows.empty() ? "pass" : "no_pass") + "</exec_verify>\n"
                 : std::string();
  };
  for (const PlannedStep& s : plan) {
    const std::string lead = note.empty() ? "" : note + " ";
    switch (s.step) {
      case Step::Naive: {
        std::string sql = naive_sql(ex.gold_sql, traps);
        sql::Result r = b.add(write_turn(p, to_answer(b, ex) + "I will run a first query and check its result.",
                                         s.step, sql, verdicts, ex.db_id),
                              ActionKind::ExecSql, sql);
        note = result_note(r) + (r.ok() && r.rows.empty() ? " The value may be stored in another form." : "");
        verdicts = exec_verdict(r);
        break;
      }
      case Step::Probe: {
        const DemoTrap& t = traps[s.trap];
        bool shown = false;
        for (const std::string& sql : probe_sqls(t)) {
          b.add(write_turn(p, lead + probe_intro(t), s.step, sql, verdicts, ex.db_id), ActionKind::ExecSql, sql);
          if (probe_shows(t, b.demo.turns.back().observation)) {
            shown = true;
            break;
          }
          b.undo();
        }
        if (!shown) return Built::Probe;
        note = probe_finding(t);
        verdicts = mtsql ? "<exec_verify>pass</exec_verify>\n" : "";
        break;
      }
      case Step::Gold: {
        std::string why = traps.empty() ? to_answer(b, ex) + "I will run this query and check its result."
                                        : lead + "Running the corrected query.";
        sql::Result r = b.add(write_turn(p, why, s.step, ex.gold_sql, verdicts, ex.db_id), ActionKind::ExecSql, ex.gold_sql);
        note = result_note(r);
        verdicts = exec_verdict(r);
        break;
      }
      case Step::Memory:
        b.add(write_turn(p, lead + "The results are valid. I check that the query is coherent with the dialogue memory.",
                         s.step, ex.gold_sql, verdicts, ex.db_id),
              ActionKind::MemoryRetrieve, ex.gold_sql);
        note = "The query is coherent with the memory.";
        verdicts = "<memory_verify>pass</memory_verify>\n";
        break;
      case Step::Answer:
        b.add(write_turn(p, lead + "This answers the question, so it is the final SQL.", s.step, ex.gold_sql, verdicts,
                         ex.db_id),
              ActionKind::Answer, ex.gold_sql);
        b.demo.final_sql = ex.gold_sql;
        break;
    }
  }
  return Built::Ok;
}

// Surface-form traps on the same column are probed once.
std::vector<DemoTrap> distinct_traps(const std::vector<DemoTrap>& traps) {
  std::vector<DemoTrap> out;
  for (const DemoTrap& t : traps) {
    bool seen = std::any_of(out.begin(), out.end(), [&](const DemoTrap& u) {
      return u.kind == t.kind && u.table == t.table && u.column == t.column && u.stored_value == t.stored_value;
    });
    if (!seen && !t.table.empty() && !t.column.empty()) out.push_back(t);
  }
  return out;
}

// The traps of an example: its question record's, or its dialogue turn's (SParC layout).
std::vector<DemoTrap> example_traps(const sql::Dataset& dataset, const sql::Example& ex) {
  if (ex.record_index >= dataset.records.size()) return {};
  const nlohmann::json& record = dataset.records[ex.record_index];
  if (record.contains("interaction")) {
    const nlohmann::json& turns = record["interaction"];
    const size_t k = static_cast<size_t>(ex.turn_index);
    return turns.is_array() && k < turns.size() ? record_traps(turns[k]) : std::vector<DemoTrap>{};
  }
  return record_traps(record);
}

// A trap an earlier turn's gold SQL resolves, where the prompt shows that SQL (a dialogue's
// history: the stored literal or the CAST is there to copy), needs no probe; the others, each
// column once. (Sample values in a schema do not count: they show the stored form, not which
// question wording it stands for.)
std::vector<DemoTrap> unresolved_traps(const std::vector<DemoTrap>& traps, const sql::Example& ex,
                                       const std::string& prompt) {
  std::vector<DemoTrap> out;
  for (const DemoTrap& t : distinct_traps(traps)) {
    const std::string literal =
        t.kind == "number_as_text" ? t.column + " AS INTEGER)" : sql::synth::sql_quote(t.stored_value);
    bool resolved = false;
    for (const sql::Turn& h : ex.history)
      resolved = resolved || (h.gold_sql.find(literal) != std::string::npos && prompt.find(h.gold_sql) != std::string::npos);
    if (!resolved) out.push_back(t);
  }
  return out;
}

}  // namespace

std::vector<Demo> synth_demos(const Protocol& protocol, sql::Pool& pool, const sql::Dataset& dataset,
                              const SynthDemoOptions& options, SynthDemoStats* stats) {
  SynthDemoStats st;
  std::vector<Demo> out;
  SchemaCache schemas;
  RewardContext ctx(pool, options.limits, sql::CompareMode::Spider);
  const RewardPanel panel = make_reward_panel("mtsql");  // its "ex" term is the EX check
  ChatOptions chat;
  chat.chat_template = options.chat_template;
  chat.add_generation_prompt = true;
  if (options.chat_template == ChatTemplate::qwen3) chat.enable_thinking = options.enable_thinking;
  Progress bar = progress_start("synth-demos", "questions", static_cast<int64_t>(dataset.examples.size()));
  for (size_t i = 0; i < dataset.examples.size(); ++i) {
    // The questions before this one are done (the body `continue`s on a skipped question).
    if (options.progress && i > 0) progress_update(bar, static_cast<int64_t>(i), str_cat(st.written, " written"));
    const sql::Example& ex = dataset.examples[i];
    ++st.questions;
    const std::string prompt = render_chat(protocol.first_prompt(ex, schemas.get(pool, ex.db_path)), chat);
    // `prompt` keeps the data marks for the segment's tokenization; the trap check reads the text.
    std::vector<DemoTrap> traps = unresolved_traps(example_traps(dataset, ex), ex, strip_marks(prompt));
    const std::string naive = naive_sql(ex.gold_sql, traps);
    const bool naive_first = options.naive_first && !traps.empty() && naive != ex.gold_sql;
    std::vector<PlannedStep> plan = plan_steps(protocol, traps, naive_first, protocol.max_turns());
    Builder b{protocol, pool, ex, options, {}, 0};
    b.demo.example = i;
    b.demo.traps = static_cast<int>(traps.size());
    Built built = build_demo(b, traps, plan, prompt);
    if (built == Built::Budget) { ++st.skipped_budget; continue; }
    if (built == Built::Probe) { ++st.skipped_probe; continue; }
    Trajectory t;
    t.answered = true;
    t.final_sql = b.demo.final_sql;
    for (const DemoTurn& dt : b.demo.turns) t.turns.push_back(TurnRecord{dt.text, dt.action, dt.observation});
    score(panel, ex, t, ctx);
    bool ex_ok = false;
    for (const auto& [name, value] : t.reward_terms) ex_ok = ex_ok || (name == "ex" && value > 0);
    if (!ex_ok) { ++st.skipped_not_ex; continue; }
    ++st.written;
    st.trap_demos += !traps.empty();
    st.turns += static_cast<int64_t>(b.demo.turns.size());
    st.exec_turns += b.demo.exec_turns;
    out.push_back(std::move(b.demo));
  }
  if (options.progress) {
    progress_update(bar, static_cast<int64_t>(dataset.examples.size()), str_cat(st.written, " written"));
    progress_finish(bar);
  }
  if (stats) *stats = st;
  return out;
}

std::string demo_jsonl(const Demo& demo, const sql::Example& example, const Protocol& protocol) {
  nlohmann::ordered_json extra;
  extra["id"] = example.id;
  extra["db_id"] = example.db_id;
  extra["protocol"] = protocol.name();
  extra["question"] = example.question;
  extra["gold"] = example.gold_sql;
  extra["traps"] = demo.traps;
  extra["turns"] = demo.turns.size();
  extra["exec_turns"] = demo.exec_turns;
  return segments_jsonl(demo.segments, extra);
}

}  // namespace sqlrl::rl
