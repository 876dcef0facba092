// An agent protocol is one paper's way of talking to the database: the first prompt, how an
// assistant turn is read into an Action, what text the environment injects after it, and when
// the episode ends. The rollout engine knows nothing of tags or tools; it asks the protocol.
//
// Turn mechanics, as the rollout engine drives them:
//   1. prompt tokens = encode(render_chat(first_prompt(...), add_generation_prompt)).
//   2. decode until one of stop_strings() appears in the decoded text of this turn (or EOS /
//      <|im_end|>, or the token cap); the stop string's tokens are kept.
//   3. action = parse(turn text). ExecSql runs on the SQLite pool; MemoryRetrieve reads the
//      example's history; Answer and an Invalid turn may end the episode (see done()).
//   4. if not done: inject(...) text is tokenized, appended with policy_mask 0 and prefilled;
//      decoding resumes. The injected text closes the assistant turn and opens the next one
//      where the paper's chat format does so (e.g. "<|im_end|>\n<|im_start|>user\n...").
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rl/trajectory.h"
#include "sql/datasets.h"
#include "sql/result.h"
#include "sql/schema.h"
#include "tokenizer/chat_template.h"

namespace sqlrl::rl {

// What the environment did with an action, for inject().
struct StepOutcome {
  const sql::Result* result = nullptr;  // ExecSql: the pool's result (error/timeout inside); else null
  std::string db_path;
  int turns_left = 0;                   // assistant turns still allowed after this one
};

struct Protocol {
  virtual ~Protocol() = default;
  virtual const char* name() const = 0;
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
};

// "skyrl", "sqltrail", "mtir", "mtsql"; anything else is an error listing the names.
std::unique_ptr<Protocol> make_protocol(const std::string& name);
std::vector<std::string> protocol_names();

}  // namespace sqlrl::rl
