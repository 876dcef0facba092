#include "rl/agent/rollout.h"
#include "rl/agent/untrusted.h"
#include "tokenizer/tokenizer.h"

namespace sqlrl::rl {

const sql::DatabaseSchema& SchemaCache::get(sql::Pool& pool, const std::string& db_path) {
  for (const auto& [path, schema] : entries)
    if (path == db_path) return schema;
  entries.emplace_back(db_path, sql::read_schema(pool, db_path));
  return entries.back().second;
}

std::vector<int32_t> build_prompt_tokens(const Protocol& protocol, const Tokenizer& tokenizer,
                                         const sql::Example& example, const sql::DatabaseSchema& schema,
                                         const RolloutOptions& options) {
  ChatOptions chat;
  chat.chat_template = options.chat_template;
  chat.add_generation_prompt = true;
  // Only the Qwen3 template reads the flag; Qwen2.5 has no thinking rules.
  if (options.chat_template == ChatTemplate::qwen3) chat.enable_thinking = options.enable_thinking;
  // The template's markup and the protocol's text are parsed for added tokens; the schema, sample
  // values, evidence and question are not (see rl/agent/untrusted.h).
  return encode_marked(tokenizer, render_chat(protocol.first_prompt(example, schema), chat));
}

}  // namespace sqlrl::rl
