// The Qwen ChatML chat templates (tokenizer_config.json's Jinja templates) written out in C++.
// Qwen3: system / user / assistant / tool turns, <think> splitting and reasoning_content, the
// last-query rule that keeps thinking only after the last real user turn, tool calls, the tools
// block, add_generation_prompt and enable_thinking=false.
// Qwen2.5 (and Qwen2.5-Coder, same template): no thinking rules (assistant content is written
// as is), a default system prompt when the first message is not a system message, tool-call
// arguments always passed through tojson (a JSON-string argument is written quoted).
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
  // The arguments were a JSON string (then `arguments` holds that string, unquoted), not an
  // object: Qwen3 writes it verbatim, Qwen2.5 writes it through tojson as a quoted string.
  bool arguments_is_string = false;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  std::optional<std::string> reasoning_content;  // assistant only; overrides <think> splitting
  std::vector<ChatToolCall> tool_calls;          // assistant only
};

enum class ChatTemplate { qwen3, qwen2_5 };

struct ChatOptions {
  ChatTemplate chat_template = ChatTemplate::qwen3;
  std::vector<std::string> tools;  // each tool schema already as JSON text (chat_json_dumps)
  bool add_generation_prompt = false;
  std::optional<bool> enable_thinking;  // nullopt = not passed to the template
};

std::string render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options);

// "qwen3" / "qwen2.5" -> the template; anything else is an error listing the names.
ChatTemplate chat_template_from_name(const std::string& name);
const char* chat_template_name(ChatTemplate t);
// Recognises the Jinja text of a tokenizer_config.json's chat_template: Qwen3 (thinking rules:
// reasoning_content / enable_thinking) or Qwen2.5 (the default "You are Qwen, created by Alibaba
// Cloud" system prompt with <tool_response> grouping). nullopt for anything else.
std::optional<ChatTemplate> detect_chat_template(const std::string& jinja_text);
// Detection for a tokenizer given as a folder or as its tokenizer.json: reads the folder's
// chat_template.jinja if present, else tokenizer_config.json's "chat_template" (a string, or a
// list of {"name", "template"} whose "default" entry is used). nullopt when neither file holds
// a template or the template is not one of ours; a malformed tokenizer_config.json is an error.
std::optional<ChatTemplate> detect_chat_template_for_tokenizer(const std::string& tokenizer_path);

// Python's json.dumps(value, ensure_ascii=False) with its default separators (", ", ": "),
// keys in their stored order: what Hugging Face's `tojson` produces.
std::string chat_json_dumps(const nlohmann::ordered_json& value);

// Reads the Hugging Face shape: {"role", "content", "reasoning_content"?, "tool_calls"?: [
// {"type": "function", "function": {"name", "arguments"}} or {"name", "arguments"}]}.
ChatMessage chat_message_from_json(const nlohmann::ordered_json& message, size_t index);
// Reads {"messages", "tools"?, "add_generation_prompt"?, "enable_thinking"?} (the golden shape);
// options->chat_template is kept as the caller set it.
void chat_request_from_json(const nlohmann::ordered_json& request, std::vector<ChatMessage>* messages, ChatOptions* options);

}  // namespace sqlrl
