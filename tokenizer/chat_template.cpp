#include "tokenizer/chat_template.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/error.h"
#include "runtime/json_depth.h"
#include "runtime/file_io.h"

namespace sqlrl {
namespace {

bool starts_with(const std::string& s, std::string_view p) { return s.size() >= p.size() && s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, std::string_view p) { return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0; }

std::string lstrip_newlines(const std::string& s) {
  size_t b = s.find_first_not_of('\n');
  return b == std::string::npos ? std::string() : s.substr(b);
}
std::string rstrip_newlines(const std::string& s) {
  size_t e = s.find_last_not_of('\n');
  return e == std::string::npos ? std::string() : s.substr(0, e + 1);
}
std::string strip_newlines(const std::string& s) { return lstrip_newlines(rstrip_newlines(s)); }

// Python's str.split(sep)[0] and [-1].
std::string before_first(const std::string& s, const std::string& sep) {
  size_t p = s.find(sep);
  return p == std::string::npos ? s : s.substr(0, p);
}
std::string after_last(const std::string& s, const std::string& sep) {
  size_t p = s.rfind(sep);
  return p == std::string::npos ? s : s.substr(p + sep.size());
}

void dump_string(std::string& out, const std::string& s) {
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

// Python's float repr: the shortest round-tripping digits, positional for exponents -4..15,
// otherwise d.ddde+XX; integral values keep ".0".
void dump_float(std::string& out, double v) {
  if (std::isnan(v)) { out += "NaN"; return; }
  if (std::isinf(v)) { out += v > 0 ? "Infinity" : "-Infinity"; return; }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  int exponent = std::stoi(sci.substr(e + 1));
  bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits.push_back(c);
  if (negative) out.push_back('-');
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out += digits + std::string(static_cast<size_t>(exponent + 1 - static_cast<int>(digits.size())), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exponent + 1)) + "." + digits.substr(static_cast<size_t>(exponent + 1));
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += ebuf;
  }
}

void dump(std::string& out, const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::null: out += "null"; break;
    case nlohmann::ordered_json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case nlohmann::ordered_json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
    case nlohmann::ordered_json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
    case nlohmann::ordered_json::value_t::number_float: dump_float(out, v.get<double>()); break;
    case nlohmann::ordered_json::value_t::string: dump_string(out, v.get_ref<const std::string&>()); break;
    case nlohmann::ordered_json::value_t::array: {
      out.push_back('[');
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ", ";
        first = false;
        dump(out, e);
      }
      out.push_back(']');
      break;
    }
    case nlohmann::ordered_json::value_t::object: {
      out.push_back('{');
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        dump_string(out, it.key());
        out += ": ";
        dump(out, it.value());
      }
      out.push_back('}');
      break;
    }
    default: fail("chat_json_dumps: a binary JSON value cannot be written");
  }
}

bool is_tool_response_wrapper(const std::string& content) {
  return starts_with(content, "<tool_response>") && ends_with(content, "</tool_response>");
}

// The tools block shared by both templates, after the system text.
void append_tools_block(std::string& out, const std::vector<std::string>& tools) {
  out += "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
         "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const std::string& tool : tools) out += "\n" + tool;
  out += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
         "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
         "<args-json-object>}\n</tool_call><|im_end|>\n";
}

// Consecutive tool messages share one user turn of <tool_response> blocks (both templates).
void append_tool_message(std::string& out, const std::vector<ChatMessage>& messages, size_t i) {
  if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
  out += "\n<tool_response>\n" + messages[i].content + "\n</tool_response>";
  if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
}

std::string render_chat_qwen3(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  std::string out;
  const bool first_is_system = messages[0].role == "system";
  if (!options.tools.empty()) {
    out += "<|im_start|>system\n";
    if (first_is_system) out += messages[0].content + "\n\n";
    append_tools_block(out, options.tools);
  } else if (first_is_system) {
    out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
  }
  // The last user turn that is a real query (not a wrapped tool response): thinking is kept
  // only for assistant turns after it.
  size_t last_query = messages.size() - 1;
  for (size_t k = messages.size(); k-- > 0;) {
    if (messages[k].role == "user" && !is_tool_response_wrapper(messages[k].content)) {
      last_query = k;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool last = i + 1 == messages.size();
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string content = m.content, reasoning;
      if (m.reasoning_content) {
        reasoning = *m.reasoning_content;
      } else if (m.content.find("</think>") != std::string::npos) {
        content = lstrip_newlines(after_last(m.content, "</think>"));
        reasoning = lstrip_newlines(after_last(rstrip_newlines(before_first(m.content, "</think>")), "<think>"));
      }
      if (i > last_query && (last || !reasoning.empty())) {
        out += "<|im_start|>" + m.role + "\n<think>\n" + strip_newlines(reasoning) + "\n</think>\n\n" + lstrip_newlines(content);
      } else {
        out += "<|im_start|>" + m.role + "\n" + content;
      }
      for (size_t t = 0; t < m.tool_calls.size(); ++t) {
        if ((t == 0 && !content.empty()) || t > 0) out += "\n";
        out += "<tool_call>\n{\"name\": \"" + m.tool_calls[t].name + "\", \"arguments\": " + m.tool_calls[t].arguments + "}\n</tool_call>";
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      append_tool_message(out, messages, i);
    }
    // The first system message was written above; other roles render nothing, as in the template.
  }
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (options.enable_thinking && !*options.enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

// Qwen2.5-Instruct / Qwen2.5-Coder-Instruct (tests/fixtures/chat_template/qwen2_5_chat_template.jinja).
std::string render_chat_qwen2_5(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  static const std::string kDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
  std::string out;
  const bool first_is_system = messages[0].role == "system";
  const std::string& system = first_is_system ? messages[0].content : kDefaultSystem;
  if (!options.tools.empty()) {
    out += "<|im_start|>system\n" + system + "\n\n";
    append_tools_block(out, options.tools);
  } else {
    out += "<|im_start|>system\n" + system + "<|im_end|>\n";
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || (m.role == "system" && i != 0) || (m.role == "assistant" && m.tool_calls.empty())) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      out += "<|im_start|>" + m.role;
      if (!m.content.empty()) out += "\n" + m.content;
      for (const ChatToolCall& call : m.tool_calls) {
        // `arguments | tojson`: an object was already dumped; a string gets quoted and escaped.
        out += "\n<tool_call>\n{\"name\": \"" + call.name + "\", \"arguments\": ";
        if (call.arguments_is_string) {
          dump_string(out, call.arguments);
        } else {
          out += call.arguments;
        }
        out += "}\n</tool_call>";
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      append_tool_message(out, messages, i);
    }
    // The first system message was written above; other roles render nothing, as in the template.
  }
  if (options.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace

std::string render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  check(!messages.empty(), "chat template: no messages");
  switch (options.chat_template) {
    case ChatTemplate::qwen3: return render_chat_qwen3(messages, options);
    case ChatTemplate::qwen2_5: return render_chat_qwen2_5(messages, options);
  }
  fail("chat template: unknown template id ", static_cast<int>(options.chat_template));
}

ChatTemplate chat_template_from_name(const std::string& name) {
  if (name == "qwen3") return ChatTemplate::qwen3;
  if (name == "qwen2.5") return ChatTemplate::qwen2_5;
  fail("chat template '", name, "' is unknown (known: qwen3, qwen2.5)");
}

const char* chat_template_name(ChatTemplate t) { return t == ChatTemplate::qwen2_5 ? "qwen2.5" : "qwen3"; }

std::optional<ChatTemplate> detect_chat_template(const std::string& jinja) {
  auto has = [&](std::string_view s) { return jinja.find(s) != std::string::npos; };
  if (has("reasoning_content") || has("enable_thinking")) return ChatTemplate::qwen3;
  if (has("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.") && has("<tool_response>"))
    return ChatTemplate::qwen2_5;
  return std::nullopt;
}

std::optional<ChatTemplate> detect_chat_template_for_tokenizer(const std::string& tokenizer_path) {
  namespace fs = std::filesystem;
  fs::path dir = fs::is_directory(tokenizer_path) ? fs::path(tokenizer_path) : fs::path(tokenizer_path).parent_path();
  if (dir.empty()) dir = ".";
  // Newer transformers save the template on its own next to tokenizer_config.json.
  if (fs::is_regular_file(dir / "chat_template.jinja")) return detect_chat_template(read_file_text((dir / "chat_template.jinja").string()));
  fs::path config_path = dir / "tokenizer_config.json";
  if (!fs::is_regular_file(config_path)) return std::nullopt;
  const std::string text = read_file_text(config_path);
  check_json_depth(text, config_path.string());
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(config_path.string(), ": not valid JSON: ", e.what());
  }
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null()) return std::nullopt;
  const auto& t = config["chat_template"];
  if (t.is_string()) return detect_chat_template(t.get<std::string>());
  if (t.is_array()) {
    for (size_t k = 0; k < t.size(); ++k) {
      if (!t[k].is_object() || !t[k].contains("name") || !t[k].contains("template") || !t[k]["template"].is_string())
        fail(config_path.string(), ": chat_template[", k, "] is not {\"name\", \"template\"}");
      if (t[k]["name"] == "default") return detect_chat_template(t[k]["template"].get<std::string>());
    }
    return std::nullopt;
  }
  fail(config_path.string(), ": chat_template is neither a string nor a list of named templates");
}

std::string chat_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  dump(out, value);
  return out;
}

ChatMessage chat_message_from_json(const nlohmann::ordered_json& j, size_t index) {
  if (!j.is_object()) fail("chat messages[", index, "] is not an object");
  ChatMessage m;
  if (!j.contains("role") || !j["role"].is_string()) fail("chat messages[", index, "] has no string 'role'");
  m.role = j["role"].get<std::string>();
  if (j.contains("content") && !j["content"].is_null()) {
    if (!j["content"].is_string()) fail("chat messages[", index, "].content is not a string");
    m.content = j["content"].get<std::string>();
  }
  if (j.contains("reasoning_content") && !j["reasoning_content"].is_null()) {
    if (!j["reasoning_content"].is_string()) fail("chat messages[", index, "].reasoning_content is not a string");
    m.reasoning_content = j["reasoning_content"].get<std::string>();
  }
  if (j.contains("tool_calls") && !j["tool_calls"].is_null()) {
    if (!j["tool_calls"].is_array()) fail("chat messages[", index, "].tool_calls is not an array");
    size_t t = 0;
    for (const auto& call : j["tool_calls"]) {
      const auto& f = call.contains("function") && call["function"].is_object() ? call["function"] : call;
      if (!f.contains("name") || !f["name"].is_string()) fail("chat messages[", index, "].tool_calls[", t, "] has no string 'name'");
      ChatToolCall c;
      c.name = f["name"].get<std::string>();
      if (f.contains("arguments")) {
        const auto& a = f["arguments"];
        c.arguments_is_string = a.is_string();
        c.arguments = a.is_string() ? a.get<std::string>() : chat_json_dumps(a);
      } else {
        fail("chat messages[", index, "].tool_calls[", t, "] has no 'arguments'");
      }
      m.tool_calls.push_back(std::move(c));
      ++t;
    }
  }
  return m;
}

void chat_request_from_json(const nlohmann::ordered_json& request, std::vector<ChatMessage>* messages, ChatOptions* options) {
  if (!request.is_object() || !request.contains("messages") || !request["messages"].is_array())
    fail("chat request: needs a 'messages' array");
  messages->clear();
  // Everything but the template choice comes from the request; the caller picks the template.
  ChatTemplate chat_template = options->chat_template;
  *options = ChatOptions();
  options->chat_template = chat_template;
  size_t i = 0;
  for (const auto& m : request["messages"]) messages->push_back(chat_message_from_json(m, i++));
  if (request.contains("tools") && !request["tools"].is_null()) {
    if (!request["tools"].is_array()) fail("chat request: 'tools' is not an array");
    for (const auto& t : request["tools"]) options->tools.push_back(chat_json_dumps(t));
  }
  // Checked here: get<bool> would throw nlohmann's "type must be boolean" without naming the key.
  auto flag = [&](const char* key) -> std::optional<bool> {
    if (!request.contains(key) || request[key].is_null()) return std::nullopt;
    if (!request[key].is_boolean()) fail("chat request: '", key, "' must be true or false, got ", request[key].dump());
    return request[key].get<bool>();
  };
  if (std::optional<bool> v = flag("add_generation_prompt")) options->add_generation_prompt = *v;
  options->enable_thinking = flag("enable_thinking");
}

}  // namespace sqlrl
