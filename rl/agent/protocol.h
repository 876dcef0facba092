// An agent protocol is one paper's way of talking to the database: the first prompt, how an
// assistant turn is read into an Action, what text the environment injects after it, and when
// the episode ends. The rollout engine knows nothing of tags or tools; it asks the protocol.
//
// Turn mechanics, as the rollout engine drives them:
//   1. prompt tokens = encode_marked(render_chat(first_prompt(...), add_generation_prompt)).
//   2. decode until one of stop_strings() appears in the decoded text of this turn (or EOS /
//      <|im_end|>, or the token cap); the stop string's tokens are kept.
//   3. action = parse(turn text). ExecSql runs on the SQLite pool; MemoryRetrieve reads the
//      example's history; Answer and an Invalid turn may end the episode (see done()).
//   4. if not done: inject(...) text is tokenized (encode_marked), appended with policy_mask 0 and prefilled;
//      decoding resumes. The injected text closes the assistant turn and opens the next one
//      where the paper's chat format does so (e.g. "<|im_end|>\n<|im_start|>user\n..."), or
//      continues the model's own stream where the paper appends to it (skyrl's observations,
//      mtir's rethink line, nothing at all after sqltrail's reasoning segment).
//   5. the last turn the budget allows may be forced: final_turn_prefix() is appended after the
//      injected text (policy_mask 0), parse() reads it as the head of that turn, and only
//      final_turn_stops() end it (SQL-Trail's Algorithm 1 line 31). A first turn is never forced.
//   6. an episode that ends with no Answer is scored on fallback_answer(), if any.
// first_prompt() contents and inject() texts carry the text that comes from the dataset or the
// database (schema, sample values, question, evidence, results, errors, echoed SQL) wrapped by
// untrusted() (rl/agent/untrusted.h), so that it never becomes a control token; strip_marks() gives the
// plain text.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rl/agent/trajectory.h"
#include "sql/data/datasets.h"
#include "sql/exec/result.h"
#include "sql/exec/schema.h"
#include "tokenizer/chat_template.h"

namespace sqlrl::rl {

// What the environment did with an action, for inject().
struct StepOutcome {
  const sql::Result* result = nullptr;  // ExecSql: the pool's result (error/timeout inside); else null
  std::string db_path;                  // as observations name it: sql::shown_db_path
  int turns_left = 0;                   // assistant turns still allowed after this one
  // The turn ended on a sampled end-of-turn token (<|im_end|> / EOS) rather than a stop string:
  // the chat-markup protocols then do not write <|im_end|> again when they open the next turn.
  bool turn_ended_with_eos = false;
  // Qwen3 rendered with enable_thinking=false writes "<think>\n\n</think>\n\n" after each
  // generation prompt; the protocols that open a new assistant turn then write it too.
  bool empty_think_block = false;
  // mtsql memory_retrieve: results of example.history[i].gold_sql, in order, when the engine ran
  // them (the memory text then carries MTSQL-R1's "SQL Results" line per turn); null = omitted.
  const std::vector<sql::Result>* history_results = nullptr;
};

// The papers' details that a run may switch off for an ablation; the defaults are the papers'
// (docs/protocols.md lists each with its citation and the deviations that remain). The flags
// are the protocol option group's (rl/options.h ProtocolOptions, keys sqltrail-*, mtir-*,
// mtsql-*); each protocol reads its own.
struct ProtocolSettings {
  // SQL-Trail (arXiv 2601.17699) Algorithm 1 line 10: </reasoning> ends a segment, which uses a
  // turn; one with no <sql>/<solution> appends nothing (lines 15-28). false: a turn runs to
  // </sql> or </solution>, and one without an action gets the "invalid" observation.
  bool sqltrail_reasoning_stop = true;
  // Line 31: after T turns one more generation gives the <solution> block: the last turn starts
  // with "<solution>" and ends at </solution>. false: the last turn is an ordinary one.
  bool sqltrail_final_solution = true;
  // MTIR-SQL (arXiv 2510.25510) Algorithm 1 line 20: y <- y + "My action is not correct. Let me
  // rethink." into the model's own stream ("assistant"), or as a user turn ("user").
  std::string mtir_rethink = "assistant";
  // MTSQL-R1 (arXiv 2510.12831) appendix D.1/D.2: each memory turn shows Spider's parse of its
  // gold SQL ("Parsed Elements for each term").
  bool mtsql_memory_parse = true;
  // MTSQL-R1's released reward (verl/utils/reward_score/text2sql.py extract_code): with no
  // <answer_sql>, the last tool call's SQL is scored.
  bool mtsql_answer_fallback = true;
};

// One assistant turn of a gold demonstration (rl/sft/sft_demos.cpp), for Protocol::demo_turn.
enum class DemoAction { ExecSql, Memory, Answer };
struct DemoStep {
  std::string reasoning;  // the turn's thought
  DemoAction action = DemoAction::ExecSql;
  std::string sql;
  std::string verdicts;  // verdict() text on the previous observation ("" when none)
  std::string db_id;     // the database, for tool calls that name it
};

struct Protocol {
  virtual ~Protocol() = default;
  virtual const char* name() const = 0;  // its paper's row (rl/agent/paper.h)
  // Turn budget (assistant turns, the answering turn included) and the strings that end a turn.
  virtual int max_turns() const = 0;
  virtual std::vector<std::string> stop_strings() const = 0;
  // system + user messages (schema, evidence, question, dialogue history where the paper has it).
  virtual std::vector<ChatMessage> first_prompt(const sql::Example& example, const sql::DatabaseSchema& schema) const = 0;
  // Reads one assistant turn. Never throws: anything malformed is ActionKind::Invalid with `error`.
  virtual Action parse(std::string_view turn_text) const = 0;
  // Whether the episode ends after this action (answers always; invalid turns per paper).
  virtual bool done(const Action& action, int turn_index) const = 0;
  // Text injected after a turn that did not end the episode: the observation (or the paper's
  // rethink line for an invalid turn), wrapped in the paper's chat markup.
  virtual std::string inject(const Action& action, const StepOutcome& outcome, const sql::Example& example) const = 0;
  // Whether the engine runs action.sql on the database before inject(): ExecSql always; mtsql's
  // memory_retrieve too (its verifier text shows "The execution results of the proposed SQL").
  virtual bool executes(const Action& action) const { return action.kind == ActionKind::ExecSql; }
  // The last turn the budget allows: text written at its head ("" = an ordinary last turn) and
  // the strings that end it.
  virtual std::string final_turn_prefix() const { return {}; }
  virtual std::vector<std::string> final_turn_stops() const { return stop_strings(); }
  // The SQL scored when the episode ended without an Answer; "" = none (unanswered).
  virtual std::string fallback_answer(const Trajectory&) const { return {}; }

  // ---- gold demonstrations (rl/sft/sft_demos.cpp) in the protocol's own format, written beside
  // its parser so that parse(demo_turn(t)) reads back t's action.
  virtual std::string demo_turn(const DemoStep& turn) const = 0;
  // Whether the protocol has a memory tool (MTSQL-R1's memory_retrieve over the dialogue's
  // earlier turns): a demonstration then checks the memory before answering.
  virtual bool has_memory() const { return false; }
  // The verdict a turn writes on the previous observation (MTSQL-R1's <exec_verify> /
  // <memory_verify>, outside <think>); "" for protocols without verdicts.
  virtual std::string verdict(DemoAction on, bool pass) const {
    (void)on, (void)pass;
    return {};
  }
};

// MTSQL-R1's verdicts written in one assistant turn (outside <think>), as written ("pass",
// "no_pass", ...; the last one when repeated), "" when absent: for the E-/M-VERIFY rewards.
struct VerifyVerdicts {
  std::string exec;    // <exec_verify>...</exec_verify>
  std::string memory;  // <memory_verify>...</memory_verify>
};
VerifyVerdicts mtsql_verdicts(std::string_view turn_text);

// The protocol of the paper row `name` (rl/agent/paper.h); anything else is an error listing the
// names.
std::unique_ptr<Protocol> make_protocol(const std::string& name, const ProtocolSettings& settings = {});
std::vector<std::string> protocol_names();

}  // namespace sqlrl::rl
