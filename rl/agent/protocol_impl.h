// Private to rl/agent/protocol*.cpp: the text helpers every protocol's parser and formatter shares.
// None of them throws on any input bytes (invalid UTF-8 included).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "rl/agent/protocol.h"
#include "rl/agent/untrusted.h"
#include "sql/eval/parse.h"

namespace sqlrl::rl::detail {

std::unique_ptr<Protocol> make_skyrl();
std::unique_ptr<Protocol> make_sqltrail(const ProtocolSettings& settings);
std::unique_ptr<Protocol> make_mtir(const ProtocolSettings& settings);
std::unique_ptr<Protocol> make_mtsql(const ProtocolSettings& settings);
std::unique_ptr<Protocol> make_arctic(const ProtocolSettings& settings);

std::string trim(std::string_view text);  // ASCII whitespace at both ends

// The turn with its reasoning blocks removed, so that a tag the model merely mentions while
// thinking is not read as an action: every closed <open>...</close> block is dropped, and text up
// to a leading </close> with no opener (a template that put the opener in the prompt). An
// unclosed opener is left as is (its text then counts).
std::string drop_blocks(std::string_view text, std::string_view open, std::string_view close);

// Looks for exactly one <open>inner</close> in `text`.
struct Block {
  bool present = false;  // some opener or closer occurs
  bool ok = false;       // exactly one well-formed block; `inner` is its content
  std::string inner;
  std::string error;     // when present && !ok: what is wrong, naming the tag and the counts
};
Block find_block(std::string_view text, std::string_view open, std::string_view close);

// One action block of either kind, exactly one in the turn: ExecSql (exec block) or Answer,
// with `sql` the block's raw content; Invalid naming the fault (malformed block, both kinds,
// neither).
Action find_action(std::string_view text, const char* exec_open, const char* exec_close, const char* answer_open,
                   const char* answer_close);

// SkyRL-SQL's and SQL-Trail's turn, reasoning blocks already dropped: <sql> (ExecSql) or
// <solution> (Answer) with trimmed, non-empty SQL.
Action parse_sql_or_solution(std::string_view text);

// `inner` with a Markdown ```sql ... ``` fence (closing fence optional) removed, then trimmed.
std::string strip_sql_fence(std::string_view inner);

// A Qwen/Hermes tool call body {"name": ..., "arguments": {...}}; error set when it is not one.
struct ToolCall {
  std::string name;
  nlohmann::json arguments;  // an object when error is empty
  std::string error;
};
ToolCall parse_tool_call(std::string_view body);
// arguments[key] as a non-empty (after trimming) string; error naming the key otherwise.
bool string_argument(const ToolCall& call, const char* key, std::string* value, std::string* error);

Action invalid(std::string error);
// Demonstration turns (Protocol::demo_turn). SkyRL-SQL's and SQL-Trail's: <open>reasoning<close>
// then <sql>…</sql>, or <solution>…</solution> for the answer.
std::string demo_reasoning_then_sql(const DemoStep& turn, const char* open, const char* close);
// MTIR-SQL's and MTSQL-R1's head of a turn: "<think>\n" reasoning "\n</think>\n" and the verdicts.
std::string demo_think_head(const DemoStep& turn);

// ChatML: close the assistant turn (unless it already ended on <|im_end|>), one user turn with
// `content`, then open the next assistant turn (with the empty think block when asked).
std::string user_turn(std::string_view content, const StepOutcome& outcome);
// Text the environment writes into the model's own stream (MTIR-SQL's rethink line): after a
// turn that ended on <|im_end|> / EOS the next assistant message opens first, so the text is
// the head of the model's message; otherwise it follows the sampled text directly.
std::string assistant_continuation(std::string_view content, const StepOutcome& outcome);
// Qwen's tool message as its templates render it: a user turn holding <tool_response>.
std::string tool_response_turn(std::string_view content, const StepOutcome& outcome);

// The "# Tools" system text Qwen2.5/Qwen3 templates write for `tools` (each tool as JSON text),
// without the <|im_start|>system / <|im_end|> markers. `json_word` is "json" in the templates.
std::string qwen_tools_system(const std::vector<std::string>& tools, std::string_view json_word = "json");

// MTSQL-R1's "Parsed Elements for each term" of one gold query (appendix D.1): Spider's
// get_sql dict as Python prints it, 'select' as the list of selected column ids; "{}" when
// Spider's parser rejects the query (rl/agent/protocol_mtsql_memory.cpp).
std::string mtsql_parsed_elements(const sql::Schema& schema, std::string_view query);

}  // namespace sqlrl::rl::detail
