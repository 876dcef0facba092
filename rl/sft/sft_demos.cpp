#include "rl/sft/sft_demos.h"

#include <algorithm>
#include <cctype>

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

enum class Step { Naive, Slip, Probe, Gold, Memory, Answer };

struct PlannedStep {
  Step step;
  size_t trap = 0;  // Probe: index into the traps
};

// The question's wording in place of each stored literal (sql/data/synth_questions.h).
std::string naive_sql(const std::string& gold, const std::vector<DemoTrap>& traps) {
  std::vector<sql::synth::Trap> t;
  for (const DemoTrap& d : traps) t.push_back({d.kind, d.table, d.column, d.question_value, d.stored_value, d.style});
  return sql::synth::naive_sql(gold, t);
}

// A plausible slip for a repair demonstration: the first selected column of the gold named as
// "<table singular>_<column>" ("SELECT student_name FROM student"), which the database rejects.
// "" when the gold selects no plain column.
struct Slip {
  std::string sql, wrong, right, table;
};
Slip column_slip(const std::string& gold) {
  size_t at = gold.rfind("SELECT ", 0) == 0 ? 7 : std::string::npos;
  if (at == std::string::npos) return {};
  if (gold.compare(at, 9, "DISTINCT ") == 0) at += 9;
  size_t dot = gold.compare(at, 3, "T1.") == 0 ? at + 3 : at;
  size_t end = dot;
  while (end < gold.size() && (std::isalnum(static_cast<unsigned char>(gold[end])) || gold[end] == '_')) ++end;
  if (end == dot || end >= gold.size() || (gold[end] != ' ' && gold[end] != ',')) return {};
  const std::string col = gold.substr(dot, end - dot);
  const size_t from = gold.find(" FROM ");
  if (from == std::string::npos) return {};
  size_t t0 = from + 6, t1 = t0;
  while (t1 < gold.size() && (std::isalnum(static_cast<unsigned char>(gold[t1])) || gold[t1] == '_')) ++t1;
  const std::string table = gold.substr(t0, t1 - t0);
  if (table.empty() || col == "id") return {};
  const std::string wrong = table + "_" + col;
  return {gold.substr(0, dot) + wrong + gold.substr(end), wrong, col, table};
}

// The probes of one surface-form trap, the same two for every style (the style is what the
// model does not know): first the stored values that start like the question's wording (LIKE is
// case-insensitive and takes a trailing space), then, when none does, every stored value. quote()
// shows each value as the SQL literal to write, trailing space included (an observation table
// would not show it).
std::string probe_like(const DemoTrap& t) {
  return "SELECT DISTINCT quote(" + t.column + ") FROM " + t.table + " WHERE " + t.column + " LIKE " +
         sql::synth::sql_quote(t.question_value + "%");
}
std::string probe_all(const DemoTrap& t) { return "SELECT DISTINCT quote(" + t.column + ") FROM " + t.table; }
// The turns its probes take: abbreviations start otherwise, so the first probe finds nothing.
int probe_turns(const DemoTrap& t) {
  const std::string prefix = t.question_value;
  bool starts = t.stored_value.size() >= prefix.size();
  for (size_t i = 0; starts && i < prefix.size(); ++i)
    starts = std::tolower(static_cast<unsigned char>(prefix[i])) == std::tolower(static_cast<unsigned char>(t.stored_value[i]));
  return starts ? 1 : 2;
}

// Whether an observation shows the stored value as a literal.
bool probe_shows(const DemoTrap& t, const std::string& observation) {
  return observation.find(sql::synth::sql_quote(t.stored_value)) != std::string::npos;
}

std::string probe_intro(const DemoTrap& t) {
  return "The question says '" + t.question_value + "'. Let me check how " + t.table + "." + t.column +
         " stores that value.";
}

std::string probe_finding(const DemoTrap& t) {
  return "The column stores " + sql::synth::sql_quote(t.stored_value) + " for what the question calls '" +
         t.question_value + "'. I will use the stored form.";
}

// What the first observation says, in the words of the reasoning that follows it.
std::string result_note(const sql::Result& r) {
  if (!r.ok()) return "The query failed (" + r.error + ").";
  if (r.rows.empty()) return "The query returned no rows.";
  if (sql::synth::result_looks_empty(r)) return "The query found nothing (the result is 0).";
  return "The query ran and returned rows.";
}

// One assistant turn in the protocol's format (Protocol::demo_turn, written beside its parser).
std::string write_turn(const Protocol& p, const std::string& reasoning, Step step, const std::string& sql,
                       const std::string& verdicts, const std::string& db_id) {
  DemoStep t;
  t.reasoning = reasoning;
  t.action = step == Step::Answer ? DemoAction::Answer : step == Step::Memory ? DemoAction::Memory : DemoAction::ExecSql;
  t.sql = sql;
  t.verdicts = verdicts;
  t.db_id = db_id;
  return p.demo_turn(t);
}

// first: the step that opens the demonstration before the gold query (Naive, Slip) or Gold.
std::vector<PlannedStep> plan_steps(const Protocol& p, const std::vector<DemoTrap>& traps, Step first, int budget) {
  bool memory = p.has_memory();
  for (;;) {
    std::vector<PlannedStep> s;
    if (first != Step::Gold) s.push_back({first});
    int turns = 0;  // a probe step takes one or two turns (probe_turns)
    for (size_t i = 0; i < traps.size(); ++i) s.push_back({Step::Probe, i}), turns += probe_turns(traps[i]) - 1;
    s.push_back({Step::Gold});
    if (memory) s.push_back({Step::Memory});
    s.push_back({Step::Answer});
    if (static_cast<int>(s.size()) + turns <= budget) return s;
    if (memory && (first != Step::Gold || !traps.empty())) memory = false;
    // A single-turn protocol (Arctic-Text2SQL-R1): the answer alone, written without a look at the
    // data; a question that needs a probe or a repair cannot be shown in one turn.
    else if (budget == 1 && first == Step::Gold && traps.empty()) return {{Step::Answer}};
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
};

enum class Built { Ok, Budget, Probe, NoCue };

std::string to_answer(const Builder& b, const sql::Example& ex) {
  return b.o.restate_question ? "To answer \"" + ex.question + "\" " : "To answer the question ";
}

// Every demonstration opens with the same words, whatever the question hides: the decision to
// look further is taken after the first observation, from what it shows (an empty result, an
// error), never before.
Built build_demo(Builder& b, const std::vector<DemoTrap>& traps, const std::vector<PlannedStep>& plan,
                 const std::string& prompt) {
  const Protocol& p = b.p;
  const sql::Example& ex = b.ex;
  if (plan.empty()) return Built::Budget;
  b.demo.segments.push_back(marked_segment(prompt, false));
  const std::string opening = to_answer(b, ex) + "I will run a query and check its result.";
  std::string note;      // what the last observation showed, opening the next turn's reasoning
  std::string verdicts;  // the protocol's verdict on the last observation (Protocol::verdict)
  auto exec_verdict = [&](const sql::Result& r) {
    return p.verdict(DemoAction::ExecSql, r.ok() && !sql::synth::result_looks_empty(r));
  };
  for (const PlannedStep& s : plan) {
    const std::string lead = note.empty() ? "" : note + " ";
    switch (s.step) {
      case Step::Naive: {
        std::string sql = naive_sql(ex.gold_sql, traps);
        sql::Result r = b.add(write_turn(p, opening, s.step, sql, verdicts, ex.db_id), ActionKind::ExecSql, sql);
        if (!sql::synth::result_looks_empty(r)) return Built::NoCue;  // nothing here says "look further"
        note = result_note(r) + " The value may be stored in another form.";
        verdicts = exec_verdict(r);
        break;
      }
      case Step::Slip: {
        const Slip slip = column_slip(ex.gold_sql);
        sql::Result r = b.add(write_turn(p, opening, s.step, slip.sql, verdicts, ex.db_id), ActionKind::ExecSql, slip.sql);
        if (r.ok() || r.error.find("no such column") == std::string::npos) return Built::NoCue;
        // Only what the observation shows (SQL-Trail's says "invalid", not SQLite's message).
        const bool shown = b.demo.turns.back().observation.find(r.error) != std::string::npos;
        note = (shown ? result_note(r) : std::string("The query failed.")) + " " + slip.table + " has no column " +
               slip.wrong + "; the schema names it " + slip.right + ".";
        verdicts = exec_verdict(r);
        break;
      }
      case Step::Probe: {
        const DemoTrap& t = traps[s.trap];
        b.add(write_turn(p, lead + probe_intro(t), s.step, probe_like(t), verdicts, ex.db_id), ActionKind::ExecSql,
              probe_like(t));
        if (!probe_shows(t, b.demo.turns.back().observation)) {
          const std::string none = "No stored value starts with '" + t.question_value +
                                   "'; it may be abbreviated. Let me list the stored values of " + t.table + "." + t.column + ".";
          b.add(write_turn(p, none, s.step, probe_all(t), p.verdict(DemoAction::ExecSql, false), ex.db_id),
                ActionKind::ExecSql, probe_all(t));
          if (!probe_shows(t, b.demo.turns.back().observation)) return Built::Probe;
        }
        note = probe_finding(t);
        verdicts = p.verdict(DemoAction::ExecSql, true);
        break;
      }
      case Step::Gold: {
        std::string why = b.turn == 0 ? opening : lead + "Running the corrected query.";
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
        verdicts = p.verdict(DemoAction::Memory, true);
        break;
      case Step::Answer:
        // The first turn only in a single-turn protocol's demonstration: no observation to cite.
        b.add(write_turn(p, b.turn == 0 ? to_answer(b, ex) + "I write the query that selects it."
                                        : lead + "This answers the question, so it is the final SQL.",
                         s.step, ex.gold_sql, verdicts, ex.db_id),
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
    // Numbers kept as text need no probe: the schema's TEXT type says so, and the gold's CAST is
    // written from the start.
    std::vector<DemoTrap> traps;
    for (const DemoTrap& t : unresolved_traps(example_traps(dataset, ex), ex, strip_marks(prompt)))
      if (t.kind == "surface_form") traps.push_back(t);
    const std::string naive = naive_sql(ex.gold_sql, traps);
    // Which plain questions get a repair demonstration: a fixed pseudo-random share by index.
    const bool repair = traps.empty() && options.repair_share > 0 && !column_slip(ex.gold_sql).sql.empty() &&
                        static_cast<double>((i * 0x9E3779B97F4A7C15ull) >> 44) < options.repair_share * 1048576.0;
    Step first = Step::Gold;
    if (!traps.empty() && naive != ex.gold_sql && options.naive_first) first = Step::Naive;
    if (repair) first = Step::Slip;
    std::vector<PlannedStep> plan = plan_steps(protocol, traps, first, protocol.max_turns());
    Builder b{protocol, pool, ex, options, {}, 0};
    b.demo.example = i;
    b.demo.traps = static_cast<int>(traps.size());
    b.demo.repair = repair;
    Built built = build_demo(b, traps, plan, prompt);
    if (built == Built::Budget) { ++st.skipped_budget; continue; }
    if (built == Built::Probe) { ++st.skipped_probe; continue; }
    if (built == Built::NoCue) { ++st.skipped_no_cue; continue; }
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
    st.repair_demos += repair;
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
  if (demo.repair) extra["repair"] = true;
  return segments_jsonl(demo.segments, extra);
}

}  // namespace sqlrl::rl
