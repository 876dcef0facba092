// The Qwen3 ChatML chat template (tokenizer_config.json's Jinja template) written out in C++:
// system / user / assistant / tool turns, <think> splitting and reasoning_content, the
// last-query rule that keeps thinking only after the last real user turn, tool calls, the tools
// block, add_generation_prompt and enable_thinking=false. Qwen2.5's template is the same
// ChatML without the thinking rules; for messages without reasoning the two render alike.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace sqlrl {

struct ChatToolCall {
  std::string name;
  // Inserted verbatim after "arguments": — the template writes a string argument as is and an
  // object through tojson; chat_json_dumps gives the latter.
  std::string arguments;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  std::optional<std::string> reasoning_content;  // assistant only; overrides <think> splitting
  std::vector<ChatToolCall> tool_calls;          // assistant only
};

struct ChatOptions {
  std::vector<std::string> tools;  // each tool schema already as JSON text (chat_json_dumps)
  bool add_generation_prompt = false;
  std::optional<bool> enable_thinking;  // nullopt = not passed to the template
};

std::string render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options);

// Python's json.dumps(value, ensure_ascii=False) with its default separators (", ", ": "),
// keys in their stored order: what Hugging Face's `tojson` produces.
std::string chat_json_dumps(const nlohmann::ordered_json& value);

// Reads the Hugging Face shape: {"role", "content", "reasoning_content"?, "tool_calls"?: [
// {"type": "function", "function": {"name", "arguments"}} or {"name", "arguments"}]}.
ChatMessage chat_message_from_json(const nlohmann::ordered_json& message, size_t index);
// Reads {"messages", "tools"?, "add_generation_prompt"?, "enable_thinking"?} (the golden shape).
void chat_request_from_json(const nlohmann::ordered_json& request, std::vector<ChatMessage>* messages, ChatOptions* options);

}  // namespace sqlrl
