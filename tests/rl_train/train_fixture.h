// A toy environment for the training loop: one database, a single-turn protocol whose answer is
// the turn's text, and a reward that pays for writing a fixed short SQL. A tiny random Qwen3 and
// a BPE tokenizer trained here; everything else is the real loop (rollout, GRPO, run folder).
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "rl/grpo/train.h"
#include "runtime/random.h"
#include "runtime/tensor.h"
#include "sql/exec/schema.h"
#include "tests/sql/pool_test_db.h"
#include "tests/test_util.h"
#include "tokenizer/trainer.h"
#include "weights/safetensors.h"

namespace sqlrl::rl::testing {

constexpr const char* kTarget = "SELECT name FROM city";

inline const std::string& toy_tokenizer_json() {
  static std::string json = [] {
    std::string corpus;
    for (int i = 0; i < 20; ++i)
      corpus += std::string(kTarget) + ";\nQuestion: how many cities are there? Answer with SQL.\n"
                "city(id INTEGER, name TEXT, population INTEGER)\nWHERE name = 'Oslo' ORDER BY population\n";
    BpeTrainOptions options;
    options.vocab_size = 360;
    return train_bpe(corpus, options).tokenizer_json;
  }();
  return json;
}

// toy_tokenizer_json() as a file (checkpoints copy the tokenizer from a path), one per process.
inline const std::string& toy_tokenizer_path() {
  static std::string path = [] {
    std::filesystem::path dir = sqlrl::testing::process_temp_path("sqlrl-toy-tokenizer");
    std::filesystem::create_directories(dir);
    std::string file = (dir / "tokenizer.json").string();
    std::ofstream(file, std::ios::binary) << toy_tokenizer_json();
    return file;
  }();
  return path;
}

// Reward: the share of kTarget's tokens (5 with this tokenizer) that the answer's first sampled
// tokens reproduce, position by position: 1 exactly when the answer starts with the fixed SQL.
// Each position is its own signal (about 1 in 350 draws at random), so a random model finds some.
inline double toy_reward(const Tokenizer& tok, const Trajectory& t) {
  static const std::vector<int32_t> target = encode(tok, kTarget);
  size_t hits = 0;
  for (size_t k = 0; k < target.size(); ++k) {
    size_t p = static_cast<size_t>(t.prompt_length) + k;
    hits += p < t.tokens.size() && t.policy_mask[p] && t.tokens[p] == target[k];
  }
  return static_cast<double>(hits) / static_cast<double>(target.size());
}

// One assistant turn; its text (end-of-turn token removed) is the answer.
struct ToyProtocol : Protocol {
  const char* name() const override { return "toy"; }
  int max_turns() const override { return 1; }
  std::vector<std::string> stop_strings() const override { return {}; }
  std::vector<ChatMessage> first_prompt(const sql::Example& example, const sql::DatabaseSchema&) const override {
    return {{"user", "Question: " + example.question + " Answer with SQL.", {}, {}}};
  }
  Action parse(std::string_view text) const override {
    Action a;
    a.kind = ActionKind::Answer;
    std::string s(text);
    for (const char* end : {"<|im_end|>", "<|endoftext|>"})
      if (size_t p = s.find(end); p != std::string::npos) s.resize(p);
    a.sql = s;
    return a;
  }
  bool done(const Action&, int) const override { return true; }
  std::string inject(const Action&, const StepOutcome&, const sql::Example&) const override { return ""; }
  std::string demo_turn(const DemoStep& turn) const override { return turn.sql; }  // what parse reads back
};

inline std::string toy_db() {
  static std::string path = sql::testing::make_db("train_city.sqlite", R"sql(
    CREATE TABLE city(id INTEGER PRIMARY KEY, name TEXT, population INTEGER);
    INSERT INTO city VALUES (1,'Oslo',700),(2,'Lima',9000),(3,'Pune',3000);
  )sql");
  return path;
}

inline std::vector<sql::Example> toy_examples() {
  const char* questions[] = {"How many cities are there?", "Count the cities.", "What is the number of cities?",
                             "How many rows does city have?", "Give the city count.", "Number of cities?"};
  std::vector<sql::Example> out;
  for (size_t i = 0; i < 6; ++i) {
    sql::Example e;
    e.id = "toy_" + std::to_string(i);
    e.db_id = "city";
    e.db_path = toy_db();
    e.question = questions[i];
    e.gold_sql = kTarget;
    out.push_back(e);
  }
  return out;
}

inline TrainConfig toy_config(const std::string& out) {
  TrainConfig c;
  c.out = out;
  c.seed = 7;
  c.batch_size = 4;
  c.group_size = 8;
  c.max_turn_tokens = 6;
  c.max_total_tokens = 64;
  c.temperature = 1.0;
  c.lr = 1e-2;
  c.save_every = 0;
  c.log_trajectories = 1;
  c.filter_truncated = c.filter_malformed = c.filter_no_valid_action = false;
  c.micro_batch_tokens = 256;
  return c;
}

// A fresh environment: same config, same random model (Philox, seed 3), same data.
inline TrainEnv toy_env(const TrainConfig& config) {
  TrainEnv env;
  env.config = config;
  env.tokenizer_path = toy_tokenizer_path();
  env.tokenizer = load_tokenizer_from_string(toy_tokenizer_json(), "toy-bpe");
  TrainConfig m = config;
  m.seed = 3;
  m.tiny_hidden = 32, m.tiny_layers = 2, m.tiny_heads = 4, m.tiny_kv_heads = 2, m.tiny_head_dim = 8;
  m.tiny_intermediate = 64, m.tiny_init_std = 0.02;
  env.model = make_embedded_model(m, static_cast<int64_t>(env.tokenizer->size()));
  env.protocol = std::make_unique<ToyProtocol>();
  env.examples = toy_examples();
  env.pool = std::make_unique<sql::Pool>();
  env.panel = RewardPanel{"toy", {{"match", 1.0}}};
  const Tokenizer* tok = env.tokenizer.get();
  env.score = [tok](const std::vector<sql::Example>&, std::vector<Trajectory>& trajs, std::vector<uint8_t>* ex) {
    if (ex) ex->assign(trajs.size(), 0);
    for (size_t i = 0; i < trajs.size(); ++i) {
      double r = toy_reward(*tok, trajs[i]);
      trajs[i].reward = r;
      trajs[i].reward_terms = {{"match", r}};
      if (ex) (*ex)[i] = r == 1.0;
    }
  };
  return env;
}

// toy_env with a model the CUDA attention takes (head_dim 64 or 128): the CUDA tests' environment,
// and their CPU halves' (the same model on the CPU).
inline TrainEnv toy_cuda_env(const TrainConfig& config) {
  TrainEnv env = toy_env(config);
  TrainConfig m = config;
  m.seed = 3;
  m.tiny_hidden = 128, m.tiny_layers = 2, m.tiny_heads = 2, m.tiny_kv_heads = 1, m.tiny_head_dim = 64;
  m.tiny_intermediate = 128, m.tiny_init_std = 0.02;
  env.model = make_embedded_model(m, static_cast<int64_t>(env.tokenizer->size()));
  return env;
}

// Questions toy_1, toy_3, toy_5 give every sample a different reward; toy_0, toy_2, toy_4 give
// all samples 0.5 (a zero-variance group). `seen` collects the scored questions.
inline void half_flat_scorer(TrainEnv& env, std::vector<std::string>* seen) {
  env.score = [seen](const std::vector<sql::Example>& examples, std::vector<Trajectory>& trajs,
                     std::vector<uint8_t>* ex) {
    if (ex) ex->assign(trajs.size(), 0);
    for (size_t i = 0; i < trajs.size(); ++i) {
      const sql::Example& e = examples[static_cast<size_t>(trajs[i].example_index)];
      const bool flat = (e.id.back() - '0') % 2 == 0;
      const double r = flat ? 0.5 : static_cast<double>(trajs[i].sample_index) / 8.0;
      trajs[i].reward = r;
      trajs[i].reward_terms = {{"match", r}};
      if (seen && trajs[i].sample_index == 0) seen->push_back(e.id);
    }
  };
}

// A command run through the shell, its stdout and stderr captured (files named after `name`).
struct CliRun {
  int rc = -1;
  std::string out, err;
};
inline CliRun run_command(const std::string& command, const std::string& name) {
  std::string base = sql::testing::temp_dir() + "/" + name;
  int status = std::system((command + " > " + base + ".out 2> " + base + ".err").c_str());
  CliRun r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = sql::testing::file_bytes(base + ".out");
  r.err = sql::testing::file_bytes(base + ".err");
  return r;
}

// The moments a checkpoint folder's optimizer state holds (one file, or rank 0's shard's total).
inline int64_t optimizer_total(const std::string& checkpoint) {
  namespace fs = std::filesystem;
  if (fs::exists(checkpoint + "/optimizer.safetensors"))
    return open_safetensors(checkpoint + "/optimizer.safetensors").find("m")->shape[0];
  for (const auto& e : fs::directory_iterator(checkpoint))
    if (e.path().filename().string().rfind("optimizer-00000-of-", 0) == 0)
      return std::stoll(open_safetensors(e.path().string()).metadata.at("total"));
  ADD_FAILURE() << checkpoint << " holds no optimizer state";
  return 0;
}

// The optimizer state of two checkpoint folders: the same file bytes, or (one of them written as
// ZeRO shards, one per rank, by `sharded_world` ranks; `b` in either form) the same moments and counters.
inline void expect_same_optimizer(const std::string& a, const std::string& b, int sharded_world, const std::string& what) {
  if (sharded_world <= 1) {
    EXPECT_TRUE(sql::testing::file_bytes(a + "/optimizer.safetensors") == sql::testing::file_bytes(b + "/optimizer.safetensors")) << what;
    return;
  }
  EXPECT_FALSE(std::filesystem::exists(a + "/optimizer.safetensors")) << what << ": a gathered file, not shards";
  for (int r = 0; r < sharded_world; ++r)
    EXPECT_TRUE(std::filesystem::exists(a + "/" + optimizer_shard_name(r, sharded_world))) << what << ", rank " << r;
  const int64_t n = optimizer_total(b);
  const OptimizerState x = load_optimizer_range(a, n, 0, n), y = load_optimizer_range(b, n, 0, n);
  EXPECT_TRUE(x.m == y.m && x.v == y.v) << what;
  EXPECT_EQ(x.adam_step, y.adam_step) << what;
  EXPECT_EQ(x.train_step, y.train_step) << what;
}

inline std::string fresh_dir(const std::string& name) {
  std::string dir = sql::testing::temp_dir() + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace sqlrl::rl::testing
