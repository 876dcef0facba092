// The text helpers the protocols share (tag blocks, tool-call JSON,
// ChatML turns). The protocols themselves are in rl/protocol_<name>.cpp.
#include <algorithm>

#include "rl/agent/protocol_impl.h"
#include "runtime/error.h"
#include "runtime/json_depth.h"
#include "tokenizer/chat_template.h"

namespace sqlrl::rl {

std::string detail::demo_reasoning_then_sql(const DemoStep& t, const char* open, const char* close) {
  const bool answer = t.action == DemoAction::Answer;
  return std::string(open) + t.reasoning + close + "\n" + (answer ? "<solution>" + t.sql + "</solution>" : "<sql>" + t.sql + "</sql>");
}

std::string detail::demo_think_head(const DemoStep& t) { return "<think>\n" + t.reasoning + "\n</think>\n" + t.verdicts; }

namespace {

// The content of the last <open>...</close> block, "" when none is closed.
std::string last_block(std::string_view text, std::string_view open, std::string_view close) {
  std::string found;
  size_t from = 0;
  while (true) {
    size_t a = text.find(open, from);
    if (a == std::string_view::npos) break;
    size_t b = text.find(close, a + open.size());
    if (b == std::string_view::npos) break;
    found = detail::trim(text.substr(a + open.size(), b - a - open.size()));
    from = b + close.size();
  }
  return found;
}

}  // namespace

VerifyVerdicts mtsql_verdicts(std::string_view turn_text) {
  std::string text = detail::drop_blocks(turn_text, "<think>", "</think>");
  return {last_block(text, "<exec_verify>", "</exec_verify>"), last_block(text, "<memory_verify>", "</memory_verify>")};
}

namespace detail {

std::string trim(std::string_view text) {
  const char* space = " \t\n\r\f\v";
  size_t a = text.find_first_not_of(space);
  if (a == std::string_view::npos) return {};
  size_t b = text.find_last_not_of(space);
  return std::string(text.substr(a, b - a + 1));
}

std::string drop_blocks(std::string_view text, std::string_view open, std::string_view close) {
  std::string out(text);
  size_t first_close = out.find(close), first_open = out.find(open);
  if (first_close != std::string::npos && (first_open == std::string::npos || first_close < first_open)) {
    out.erase(0, first_close + close.size());
  }
  size_t from = 0;
  while (true) {
    size_t a = out.find(open, from);
    if (a == std::string::npos) break;
    size_t b = out.find(close, a + open.size());
    if (b == std::string::npos) break;
    out.erase(a, b + close.size() - a);
    from = a;
  }
  return out;
}

namespace {
size_t count_of(std::string_view text, std::string_view needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string_view::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}
}  // namespace

Block find_block(std::string_view text, std::string_view open, std::string_view close) {
  Block block;
  const size_t opens = count_of(text, open), closes = count_of(text, close);
  block.present = opens + closes > 0;
  if (!block.present) return block;
  const std::string o(open), c(close);
  if (opens > 1) {
    block.error = std::to_string(opens) + " " + o + " blocks in one turn (one action per turn)";
  } else if (opens == 0) {
    block.error = c + " without " + o;
  } else if (closes == 0) {
    block.error = "unclosed " + o + " (no " + c + ")";
  } else if (closes > 1) {
    block.error = std::to_string(closes) + " " + c + " for one " + o;
  } else {
    size_t a = text.find(open), b = text.find(close);
    if (b < a) {
      block.error = c + " before " + o;
    } else {
      block.ok = true;
      block.inner = std::string(text.substr(a + open.size(), b - a - open.size()));
    }
  }
  return block;
}

Action find_action(std::string_view text, const char* exec_open, const char* exec_close, const char* answer_open,
                   const char* answer_close) {
  Block exec = find_block(text, exec_open, exec_close), answer = find_block(text, answer_open, answer_close);
  if (exec.present && !exec.ok) return invalid(exec.error);
  if (answer.present && !answer.ok) return invalid(answer.error);
  if (exec.ok && answer.ok) {
    return invalid(std::string("two actions in one turn: ") + exec_open + " and " + answer_open);
  }
  if (!exec.ok && !answer.ok) return invalid(std::string("no ") + exec_open + " or " + answer_open + " block");
  Action a;
  a.kind = exec.ok ? ActionKind::ExecSql : ActionKind::Answer;
  a.sql = exec.ok ? exec.inner : answer.inner;  // raw: the caller trims or parses it
  return a;
}

Action parse_sql_or_solution(std::string_view text) {
  Action a = find_action(text, "<sql>", "</sql>", "<solution>", "</solution>");
  if (a.kind == ActionKind::Invalid) return a;
  a.sql = trim(a.sql);
  if (a.sql.empty()) return invalid(a.kind == ActionKind::Answer ? "empty <solution>" : "empty <sql>");
  return a;
}

std::string strip_sql_fence(std::string_view inner) {
  std::string s = trim(inner);
  if (s.rfind("```", 0) == 0) {
    size_t eol = s.find('\n');
    std::string_view lang = std::string_view(s).substr(3, eol == std::string::npos ? std::string::npos : eol - 3);
    // Only a bare fence or a language word: "```SELECT 1```" keeps its text after the backticks.
    if (trim(lang).empty() || trim(lang) == "sql" || trim(lang) == "sqlite" || trim(lang) == "SQL") {
      s = eol == std::string::npos ? std::string() : s.substr(eol + 1);
    } else {
      s = s.substr(3);
    }
    s = trim(s);
  }
  if (s.size() >= 3 && s.compare(s.size() - 3, 3, "```") == 0) s = trim(std::string_view(s).substr(0, s.size() - 3));
  return s;
}

ToolCall parse_tool_call(std::string_view body) {
  ToolCall call;
  // Absurd depth refused before parsing (runtime/json_depth.h). Real calls nest 2-3 levels.
  constexpr int kToolCallDepth = 64;
  if (json_too_deep_at(body, kToolCallDepth) != std::string_view::npos) {
    call.error = "tool call JSON nests deeper than " + std::to_string(kToolCallDepth) + " levels";
    return call;
  }
  nlohmann::json j = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    call.error = "tool call is not valid JSON";
  } else if (!j.is_object()) {
    call.error = "tool call is not a JSON object";
  } else if (!j.contains("name") || !j["name"].is_string()) {
    call.error = "tool call has no \"name\" string";
  } else if (!j.contains("arguments") || !j["arguments"].is_object()) {
    call.name = j["name"].get<std::string>();
    call.error = "tool call '" + call.name + "' has no \"arguments\" object";
  } else {
    call.name = j["name"].get<std::string>();
    call.arguments = j["arguments"];
  }
  return call;
}

bool string_argument(const ToolCall& call, const char* key, std::string* value, std::string* error) {
  auto it = call.arguments.find(key);
  if (it == call.arguments.end() || !it->is_string()) {
    *error = "tool '" + call.name + "': argument \"" + key + "\" missing or not a string";
    return false;
  }
  *value = trim(it->get<std::string>());
  if (value->empty()) {
    *error = "tool '" + call.name + "': argument \"" + key + "\" is empty";
    return false;
  }
  return true;
}

Action invalid(std::string error) {
  Action a;
  a.kind = ActionKind::Invalid;
  a.error = std::move(error);
  return a;
}

std::string user_turn(std::string_view content, const StepOutcome& outcome) {
  std::string out = outcome.turn_ended_with_eos ? "\n" : "<|im_end|>\n";
  out += "<|im_start|>user\n";
  out += content;
  out += "<|im_end|>\n<|im_start|>assistant\n";
  if (outcome.empty_think_block) out += "<think>\n\n</think>\n\n";
  return out;
}

std::string assistant_continuation(std::string_view content, const StepOutcome& outcome) {
  if (!outcome.turn_ended_with_eos) return std::string(content);
  std::string out = "\n<|im_start|>assistant\n";
  if (outcome.empty_think_block) out += "<think>\n\n</think>\n\n";
  return out + std::string(content);
}

std::string tool_response_turn(std::string_view content, const StepOutcome& outcome) {
  return user_turn("<tool_response>\n" + std::string(content) + "\n</tool_response>", outcome);
}

std::string qwen_tools_system(const std::vector<std::string>& tools, std::string_view json_word) {
  std::string out =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const std::string& tool : tools) out += "\n" + tool;
  out += "\n</tools>\n\nFor each function call, return a ";
  out += json_word;
  out += " object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
         "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
  return out;
}

}  // namespace detail
}  // namespace sqlrl::rl
