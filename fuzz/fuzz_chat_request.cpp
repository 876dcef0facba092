// A chat request as `tokenize --chat` and `generate --chat` read it (tokenizer/chat_template.h
// chat_request_from_json: messages, tool calls, tools, flags), rendered with both chat
// templates, with and without the generation prompt and the thinking switch.
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sqlrl;
  // The commands parse the JSON text themselves and name the line when it is not JSON.
  auto request = nlohmann::ordered_json::parse(fuzz::as_text(data, size), nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) return 0;
  for (ChatTemplate chat_template : {ChatTemplate::qwen3, ChatTemplate::qwen2_5}) {
    fuzz::expect_ok_or_error([&] {
      std::vector<ChatMessage> messages;
      ChatOptions options;
      options.chat_template = chat_template;
      chat_request_from_json(request, &messages, &options);
      (void)render_chat(messages, options);
      options.add_generation_prompt = !options.add_generation_prompt;
      options.enable_thinking = !options.enable_thinking.value_or(true);
      (void)render_chat(messages, options);
    });
  }
  return 0;
}
