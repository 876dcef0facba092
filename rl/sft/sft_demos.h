// Gold multi-turn demonstrations for the built-in synthetic benchmark (sql/data/synth.h): the
// generator wrote down each question's traps, so a demonstration can act them out in a
// protocol's exact format, to bootstrap a model from scratch (the embedded end-to-end run's SFT
// data: gold trajectory synthesis).
//
// Per question (turns are assistant turns; every observation is the REAL result of the turn's
// SQL on the question's database through the pool, formatted by the protocol's inject()). Every
// demonstration opens with the same reasoning; what follows depends only on what the first
// observation shows, so the model learns a conditional skill, not a ritual:
//   no trap:        exec the gold query -> rows -> answer it
//                   (mtsql: exec -> <exec_verify>pass + memory_retrieve -> <memory_verify>pass + answer)
//   repair (a share of the trap-free, SynthDemoOptions::repair_share): exec the gold with a
//                   column misnamed -> "no such column" -> exec the gold -> answer
//   with traps:     the naive query (the question's wording of each stored value) -> no rows or
//                   a zero count -> one probe per value (the column's stored values) -> the gold
//                   query -> answer (mtsql: + [pass + memory_retrieve] when the budget allows).
// Numbers stored as text are not probed: the schema's TEXT type shows it and the gold's CAST is
// written from the first query on. mtsql's memory check is dropped when the protocol's turn
// budget does not fit; a question that still does not fit, whose opening query gives no cue (a
// naive query that returns rows), whose probe does not show the stored value within the
// observation's truncation, or whose final SQL is not EX-correct (asserted through the reward
// context) is skipped and counted.
//
// The demonstration is the token stream the rollout engine would produce: the rendered first
// prompt (masked), each assistant turn (trained), each injected observation (masked), and
// "<|im_end|>" after the answer (trained: the model learns to end its turn). A turn that runs
// SQL ends on the protocol's stop string, as at rollout time; the "<|im_end|>" that closes it is
// the protocol's inject() text and stays masked (a messages-format file trains every assistant
// message's <|im_end|>: there the chat template, not a stop string, ends each turn).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rl/agent/protocol.h"
#include "rl/sft/sft_data.h"
#include "sql/data/datasets.h"
#include "sql/exec/pool.h"

namespace sqlrl::rl {

struct SynthDemoOptions {
  ChatTemplate chat_template = ChatTemplate::qwen3;
  std::optional<bool> enable_thinking;  // Qwen3 flag for the prompt (false: empty think blocks)
  // Open trap demos with the naive query (the question's wording of the value), whose empty
  // result is the cue to probe; false: probe first (no cue: the decision is taken blind).
  bool naive_first = true;
  // Share of trap-free questions demonstrated as a repair: a first query naming a column that does
  // not exist (column_slip in sft_demos.cpp), the error, the corrected query.
  double repair_share = 0.15;
  // The first turn's reasoning restates the question ("To answer \"...\" I will ..."). Off: a fixed
  // sentence (tiny models spend much of their capacity copying the question, and a garbled copy
  // derails the SQL that follows).
  bool restate_question = true;
  sql::Limits limits;
  bool progress = false;  // a progress line per question (runtime/progress.h)
};

struct DemoTurn {
  std::string text;         // the assistant turn as written (trained)
  Action action;            // protocol.parse(text)
  std::string observation;  // inject() text after it ("" after the answer)
};

struct Demo {
  size_t example = 0;  // index into the dataset's examples
  std::vector<SftSegment> segments;
  std::vector<DemoTurn> turns;
  int traps = 0;
  int exec_turns = 0;
  bool repair = false;  // opens with a query the database rejects, then fixes it
  std::string final_sql;
};

struct SynthDemoStats {
  int64_t questions = 0, written = 0, trap_demos = 0;
  int64_t repair_demos = 0;
  // skipped_no_cue: the opening query's result gives no sign to look further (a trap whose naive
  // query returns rows, a slip the database accepts), so no honest demonstration exists.
  int64_t skipped_budget = 0, skipped_probe = 0, skipped_not_ex = 0, skipped_no_cue = 0;
  int64_t turns = 0, exec_turns = 0;
};

// The traps of one question record ("synth": {"traps": [...]}); [] when absent.
struct DemoTrap {
  std::string kind, table, column, question_value, stored_value, style;
};
std::vector<DemoTrap> record_traps(const nlohmann::json& record);

// Demonstrations for every example of `dataset` (a synthetic benchmark split loaded with
// load_dataset: Spider format, or SParC format from <bench>/sparc, one example per dialogue
// turn), in example order. A trap that an earlier dialogue turn's gold SQL resolves, shown in
// the rendered prompt (the stored literal or the CAST is there to copy), is not probed.
std::vector<Demo> synth_demos(const Protocol& protocol, sql::Pool& pool, const sql::Dataset& dataset,
                              const SynthDemoOptions& options, SynthDemoStats* stats = nullptr);

// The JSONL line of a demo: its segments plus id, db_id, protocol, question, gold, traps,
// turns, exec_turns.
std::string demo_jsonl(const Demo& demo, const sql::Example& example, const Protocol& protocol);

}  // namespace sqlrl::rl
