// The embedded default of `llm_sqlrl train`: no files needed. The built-in synthetic benchmark
// is generated into the run folder's cache, a small BPE tokenizer is trained on its text (with
// Qwen3's 26 added tokens: <|im_start|>, <|im_end|>, <|endoftext|>, <think>, <tool_call>, ...,
// so ChatML prompts and every protocol's markup encode), and a tiny Qwen3 model of that
// vocabulary is initialised from Philox.
#include <filesystem>

#include "rl/agent/paper.h"
#include "rl/agent/rollout.h"
#include "rl/grpo/train.h"
#include "rl/agent/untrusted.h"
#include "runtime/error.h"
#include "sql/exec/schema.h"
#include "sql/data/synth.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/trainer.h"

namespace fs = std::filesystem;

namespace sqlrl::rl {

void ensure_synth_benchmark(const std::string& dir, uint64_t seed) {
  if (fs::exists(fs::path(dir) / "synth_info.json")) return;
  fs::path tmp = dir + ".tmp";
  fs::remove_all(tmp);
  sql::SynthOptions options;
  options.seed = seed;
  sql::write_synth_benchmark(tmp.string(), options);
  fs::remove_all(dir);
  fs::rename(tmp, dir);
}

std::string train_embedded_tokenizer(const std::vector<sql::Example>& examples, sql::Pool& pool, size_t vocab_size,
                                     const std::string& extra_corpus) {
  std::string corpus;
  SchemaCache schemas;
  std::vector<std::string> seen_dbs;
  for (const sql::Example& ex : examples) {
    corpus += ex.question + "\n" + ex.gold_sql + "\n";
    bool new_db = true;
    for (const std::string& db : seen_dbs) new_db = new_db && db != ex.db_path;
    if (!new_db) continue;
    // The papers' first prompts once per database: system text, schema rendering and markup
    // (the rows marked embedded_corpus: rl/agent/paper.h).
    seen_dbs.push_back(ex.db_path);
    const sql::DatabaseSchema& schema = schemas.get(pool, ex.db_path);
    for (const Paper& paper : papers()) {
      if (!paper.embedded_corpus) continue;
      ChatOptions chat;
      chat.add_generation_prompt = true;
      corpus += strip_marks(render_chat(paper.make_protocol({})->first_prompt(ex, schema), chat));
    }
  }
  // The turn markup the models write and the environments inject.
  for (int i = 0; i < 20; ++i)
    corpus += "<think>\n</think>\n<sql>SELECT</sql>\n<observation>\n</observation>\n<solution></solution>\n"
              "<answer></answer>\n<tool_call>\n{\"name\": \"sql-execute_sql_query\", \"arguments\": {\"sql\": \"\"}}\n"
              "</tool_call>\n<tool_response>\n</tool_response>\n<answer_sql></answer_sql>\n<|im_end|>\n";
  corpus += extra_corpus;
  BpeTrainOptions options;
  options.vocab_size = vocab_size;
  return train_bpe(corpus, options).tokenizer_json;
}

QwenModel make_embedded_model(const TrainConfig& c, int64_t vocab) {
  QwenConfig q;
  q.arch = QwenArch::Qwen3;
  q.vocab_size = vocab;
  q.hidden_size = c.tiny_hidden;
  q.intermediate_size = c.tiny_intermediate;
  q.num_hidden_layers = c.tiny_layers;
  q.num_attention_heads = c.tiny_heads;
  q.num_key_value_heads = c.tiny_kv_heads;
  q.head_dim = c.tiny_head_dim;
  q.rope_theta = 1000000.0;  // Qwen3's
  q.max_position_embeddings = 32768;
  q.tie_word_embeddings = true;
  q.torch_dtype = "float32";
  validate_config(q, "embedded tiny model (tiny-* keys)");
  QwenModel model = make_model(q);
  init_random_weights(model, c.seed, static_cast<float>(c.tiny_init_std));
  return model;
}

}  // namespace sqlrl::rl
