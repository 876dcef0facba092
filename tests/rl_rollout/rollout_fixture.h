// A tiny world for rollout tests: a BPE tokenizer trained here (Qwen3 added tokens), a random
// Qwen3 model of that vocabulary whose sampling rate of a few "action" tokens is set by hand, a
// tag protocol of our own (not one of the papers') and a three-row SQLite database.
//
// How the rates are set: hidden dimension 0 of the residual stream is a constant c (every
// embedding row has c there and no layer writes to it), so after the final RMSNorm it is large
// and nearly constant (the layers' norms drop it, so they still see only the context); lm_head
// column 0 then adds boost * that value to a chosen token's logit at every position, whatever
// the random rest of the model does.
#pragma once
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/model.h"
#include "rl/agent/protocol.h"
#include "rl/agent/rollout.h"
#include "sql/exec/schema.h"
#include "tests/sql/pool_test_db.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/trainer.h"

namespace sqlrl::rl::testing {

// Turn ends: "</tool_call>" (or "</sql>", several tokens) runs SQL, "<|box_end|>" answers,
// "<|quad_end|>" retrieves the dialogue memory (runs its SQL and the history's gold SQL).
constexpr const char* kExecStop = "</tool_call>";
constexpr const char* kAnswerStop = "<|box_end|>";
constexpr const char* kMemoryStop = "<|quad_end|>";

inline const Tokenizer& tiny_tokenizer() {
  static std::unique_ptr<Tokenizer> tok = [] {
    std::string corpus;
    for (int i = 0; i < 20; ++i)
      corpus +=
          "SELECT name, population FROM city WHERE population > 1000 ORDER BY id;\n"
          "You answer questions with SQL. Question: how many cities are there?\n"
          "city(id INTEGER PK, name TEXT, population INTEGER)\n"
          "<|im_start|>user\nRethink: no action<|im_end|>\n<tool_response>\nerror: no such column\n";
    BpeTrainOptions options;
    options.vocab_size = 400;
    return load_tokenizer_from_string(train_bpe(corpus, options).tokenizer_json, "tiny-bpe");
  }();
  return *tok;
}

struct Boosts {
  float exec = 0, answer = 0, eos = 0, memory = 0;
};

// vocab_size 0 = the tokenizer's size (larger pads the vocabulary as the Qwen checkpoints do).
// head_dim 64 makes a model the CUDA attention takes (tests/rl_cuda); the boosts work alike.
inline QwenModel tiny_model(const Tokenizer& tok, Boosts boosts, int64_t vocab_size = 0, uint32_t seed = 11,
                            int64_t head_dim = 8) {
  QwenConfig c;
  c.arch = QwenArch::Qwen3;
  c.vocab_size = vocab_size > 0 ? vocab_size : static_cast<int64_t>(tok.size());
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = head_dim;
  c.tie_word_embeddings = false;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 4096;
  QwenModel model = make_model(c);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (const ParamView& v : model.table)
    for (int64_t i = 0; i < v.spec.numel(); ++i)
      model.params[v.offset + i] = (v.spec.name.find("norm") != std::string::npos ? 1.0f : 0.0f) + normal(rng);
  ModelWeights w = model.weights();
  const int64_t C = c.hidden_size;
  for (int64_t t = 0; t < c.vocab_size; ++t) w.embed[t * C] = 20.0f;
  for (const LayerWeights& lw : w.layers) {
    lw.attn_norm[0] = lw.mlp_norm[0] = 0.0f;                      // the layers do not read it...
    std::fill(lw.wo, lw.wo + c.q_dim(), 0.0f);                    // ...nor write it: row 0 of o_proj [C, q_dim]
    std::fill(lw.w_down, lw.w_down + c.intermediate_size, 0.0f);  // and of down_proj [C, I]
  }
  for (int64_t t = 0; t < c.vocab_size; ++t) w.lm_head[t * C] = 0.0f;
  auto boost = [&](const char* text, float b) {
    int32_t id = tok.token_id(text);
    check(id >= 0, "tiny tokenizer has no token ", text);
    w.lm_head[static_cast<int64_t>(id) * C] = b;
  };
  boost(kExecStop, boosts.exec);
  boost(kAnswerStop, boosts.answer);
  boost("<|im_end|>", boosts.eos);
  boost(kMemoryStop, boosts.memory);
  return model;
}

inline std::string city_db() {
  static std::string path = sql::testing::make_db("rollout_city.sqlite", R"sql(
    CREATE TABLE city(id INTEGER PRIMARY KEY, name TEXT NOT NULL, population INTEGER);
    INSERT INTO city VALUES (1,'Oslo',700),(2,'Lima',9000),(3,'Pune',3000);
  )sql");
  return path;
}

// Our own tag protocol: what the SQL of a turn is depends only on the turn's text, so the same
// tokens always make the same calls.
struct TagProtocol : Protocol {
  int turns = 4;
  bool invalid_ends = false;
  const char* name() const override { return "test-tags"; }
  int max_turns() const override { return turns; }
  std::vector<std::string> stop_strings() const override { return {kExecStop, kAnswerStop, kMemoryStop, "</sql>"}; }
  std::vector<ChatMessage> first_prompt(const sql::Example& example, const sql::DatabaseSchema& schema) const override {
    return {{"system", "You answer questions with SQL.", {}, {}},
            {"user", sql::schema_compact(schema) + "\nQuestion: " + example.question, {}, {}}};
  }
  // The turn's tag decides its action (parse), whatever the text before it.
  std::string demo_turn(const DemoStep& turn) const override {
    return turn.reasoning + (turn.action == DemoAction::Answer   ? kAnswerStop
                             : turn.action == DemoAction::Memory ? kMemoryStop
                                                                 : kExecStop);
  }
  Action parse(std::string_view text) const override {
    static const char* queries[] = {"SELECT name, population FROM city ORDER BY id", "SELECT nope FROM city",
                                    "SELECT count(*) FROM city WHERE population > 1000"};
    Action a;
    auto ends_with = [&](std::string_view s) {
      return text.size() >= s.size() && text.substr(text.size() - s.size()) == s;
    };
    if (ends_with(kAnswerStop)) {
      a.kind = ActionKind::Answer;
      a.sql = "SELECT count(*) FROM city";
    } else if (ends_with(kExecStop) || ends_with("</sql>") || ends_with(kMemoryStop)) {
      a.kind = ends_with(kMemoryStop) ? ActionKind::MemoryRetrieve : ActionKind::ExecSql;
      a.sql = queries[text.size() % 3];
    } else {
      a.error = "no action";
    }
    return a;
  }
  bool done(const Action& action, int) const override {
    return action.kind == ActionKind::Answer || (invalid_ends && action.kind == ActionKind::Invalid);
  }
  bool executes(const Action& action) const override {
    return action.kind == ActionKind::ExecSql || action.kind == ActionKind::MemoryRetrieve;
  }
  // Written like the papers' chat markup: no second <|im_end|> after a turn the model closed.
  std::string inject(const Action& action, const StepOutcome& outcome, const sql::Example&) const override {
    std::string body;
    if (action.kind == ActionKind::MemoryRetrieve) {
      body = "memory:";
      if (outcome.history_results)
        for (const sql::Result& r : *outcome.history_results) body += " " + std::to_string(r.rows.size()) + " rows;";
      body += "\n";
    }
    if (outcome.result) {
      body += "<tool_response>\n";
      if (!outcome.result->ok()) body += "error: " + outcome.result->error + "\n";
      for (const sql::Row& row : outcome.result->rows) {
        for (const sql::Cell& cell : row)
          body += (cell.type == sql::CellType::Text ? cell.text : std::to_string(cell.integer)) + " | ";
        body += "\n";
      }
      body += "</tool_response>";
    } else if (action.kind == ActionKind::Invalid) {
      body = "Rethink: " + action.error;
    }
    return std::string(outcome.turn_ended_with_eos ? "\n" : "<|im_end|>\n") + "<|im_start|>user\n" + body +
           "\nturns left: " + std::to_string(outcome.turns_left) + "<|im_end|>\n<|im_start|>assistant\n" +
           (outcome.empty_think_block ? "<think>\n\n</think>\n\n" : "");
  }
};

inline std::vector<sql::Example> city_examples() {
  std::vector<sql::Example> examples(3);
  const char* questions[] = {"How many cities are there?", "Which city is largest?", "Name every city."};
  for (size_t i = 0; i < examples.size(); ++i) {
    examples[i].id = "test_" + std::to_string(i);
    examples[i].db_id = "city";
    examples[i].db_path = city_db();
    examples[i].question = questions[i];
  }
  return examples;
}

inline std::vector<RolloutRequest> make_requests(const Protocol& protocol, const Tokenizer& tok, sql::Pool& pool,
                                                 const std::vector<sql::Example>& examples,
                                                 const RolloutOptions& options) {
  SchemaCache schemas;
  std::vector<RolloutRequest> requests;
  for (const sql::Example& ex : examples)
    requests.push_back({&ex, build_prompt_tokens(protocol, tok, ex, schemas.get(pool, ex.db_path), options)});
  return requests;
}

// Boosts giving a mix of SQL turns, answers and <|im_end|> turns within a few dozen tokens.
constexpr Boosts kMixed{0.3f, 0.2f, 0.15f};

struct World {
  const Tokenizer& tok = tiny_tokenizer();
  QwenModel model;
  TagProtocol protocol;
  sql::Pool pool;
  std::vector<sql::Example> examples = city_examples();
  explicit World(Boosts b, int64_t vocab_size = 0) : model(tiny_model(tok, b, vocab_size)) {}
  std::vector<RolloutRequest> requests(const RolloutOptions& o) {
    return make_requests(protocol, tok, pool, examples, o);
  }
};

inline RolloutOptions base_options() {
  RolloutOptions o;
  o.group_size = 4;
  // No top-p: the nucleus cut makes a log-prob jump when rounding moves a token across it, which
  // would blur the batched-vs-alone comparison (the cut itself is covered by kernels tests).
  o.sampling = {0.9f, 0, 1.0f, 2024};  // the tests' path-coverage counts hold for seeds 1-40 too
  o.first_sample_id = 100;
  o.max_turn_tokens = 40;
  o.max_total_tokens = 1024;
  return o;
}

// The sampled tokens of each turn (the runs of policy_mask == 1).
inline std::vector<std::vector<int32_t>> sampled_runs(const Trajectory& t) {
  std::vector<std::vector<int32_t>> runs;
  for (size_t i = static_cast<size_t>(t.prompt_length); i < t.tokens.size(); ++i) {
    if (!t.policy_mask[i]) continue;
    if (i == static_cast<size_t>(t.prompt_length) || !t.policy_mask[i - 1]) runs.emplace_back();
    runs.back().push_back(t.tokens[i]);
  }
  return runs;
}

inline std::string decode_masked(const Tokenizer& tok, const Trajectory& t, uint8_t mask) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < t.tokens.size(); ++i)
    if (t.policy_mask[i] == mask) ids.push_back(t.tokens[i]);
  return decode(tok, ids);
}

}  // namespace sqlrl::rl::testing
