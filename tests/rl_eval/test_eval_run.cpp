// End to end: run_eval on tiny random models (the rollout tests' tag-protocol world, and the
// embedded tokenizer + tiny Qwen3 on a small synthetic benchmark with a real protocol), the
// three outputs, bit-identical reruns, and the `llm_sqlrl eval` command (with --adapter too).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "model/lora.h"
#include "rl/eval/eval.h"
#include "rl/grpo/train.h"
#include "sql/data/synth.h"
#include "tests/rl_rollout/rollout_fixture.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace sqlrl::rl {
namespace {

std::string temp_dir() {
  static std::string dir = [] {
    fs::path d = fs::temp_directory_path() / ("sqlrl_eval_test_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d.string();
  }();
  return dir;
}

// Removes the binary's temporary folder after the last test.
struct RemoveTempDir : ::testing::Environment {
  void TearDown() override { fs::remove_all(temp_dir()); }
};
[[maybe_unused]] ::testing::Environment* const remove_temp_dir = ::testing::AddGlobalTestEnvironment(new RemoveTempDir);

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The outputs with the wall-clock fields removed (they are the only ones allowed to differ).
std::string deterministic_part(const std::string& dir) {
  nlohmann::ordered_json summary = nlohmann::ordered_json::parse(read_file(fs::path(dir) / "summary.json"));
  summary.erase("time");
  std::string out = summary.dump() + "\n" + read_file(fs::path(dir) / "summary.md");
  std::istringstream lines(read_file(fs::path(dir) / "examples.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);
    j.erase("seconds");
    out += j.dump() + "\n";
  }
  return out;
}

// A config.toml with its `out = "..."` line pointing at `out`.
std::string config_with_out(const std::string& config, const std::string& out) {
  const size_t a = config.find("\nout = "), b = config.find('\n', a + 1);
  return config.substr(0, a) + "\nout = \"" + out + "\"" + config.substr(b);
}

std::vector<sql::Example> city_examples_with_gold() {
  std::vector<sql::Example> examples = testing::city_examples();
  // The tag protocol always answers "SELECT count(*) FROM city": right for the first only.
  examples[0].gold_sql = "SELECT count(*) FROM city";
  examples[1].gold_sql = "SELECT name FROM city ORDER BY population DESC LIMIT 1";
  examples[2].gold_sql = "SELECT name FROM city";
  examples[0].difficulty = "easy";
  examples[1].difficulty = "medium";
  return examples;
}

EvalOptions tag_options(EvalMode mode, int64_t samples) {
  EvalOptions o;
  o.mode = mode;
  o.samples = samples;
  o.rollout = testing::base_options();
  return o;
}

TEST(EvalRun, TagWorldVoteMatchesDirectRolloutAndScoring) {
  testing::World w(testing::kMixed);
  std::vector<sql::Example> examples = city_examples_with_gold();
  EvalOptions o = tag_options(EvalMode::Vote, 4);
  RewardContext ctx(w.pool);
  EvalRun run = run_eval(w.model, w.tok, w.protocol, w.pool, examples, o, ctx);
  ASSERT_EQ(run.results.size(), 3u);

  // The same rollout by hand, scored directly, gives the same verdicts.
  RolloutOptions ro = o.rollout;
  ro.group_size = 4;
  std::vector<Trajectory> trajs =
      rollout(w.model, w.tok, w.protocol, w.pool, testing::make_requests(w.protocol, w.tok, w.pool, examples, ro), ro);
  std::vector<ExampleResult> direct = score_examples(examples, trajs, 4, EvalMode::Vote, ctx);
  int64_t answered = 0;
  for (size_t e = 0; e < 3; ++e) {
    EXPECT_EQ(run.results[e].chosen, direct[e].chosen) << e;
    EXPECT_EQ(run.results[e].correct, direct[e].correct) << e;
    EXPECT_EQ(run.results[e].num_correct, direct[e].num_correct) << e;
    EXPECT_EQ(run.results[e].prediction, direct[e].prediction) << e;
    for (size_t s = 0; s < 4; ++s) {
      const Trajectory& t = trajs[e * 4 + s];
      const SampleOutcome& so = run.results[e].samples[s];
      EXPECT_EQ(so.answered, t.answered);
      EXPECT_EQ(so.turns, static_cast<int64_t>(t.turns.size()));
      answered += t.answered;
      // Every answer is count(*): right exactly on the first question.
      if (t.answered) {
        EXPECT_EQ(so.ex, e == 0) << e << "/" << s;
      }
    }
  }
  EXPECT_GT(answered, 0) << "the boosted model should answer sometimes";
  EXPECT_EQ(run.results[0].num_correct, [&] {
    int64_t n = 0;
    for (size_t s = 0; s < 4; ++s) n += trajs[s].answered;
    return n;
  }());
  EXPECT_EQ(run.summary.total.n, 3);
  EXPECT_GT(run.stats.sampled_tokens, 0);
}

TEST(EvalRun, SingleTurnRunsNothingOnTheDatabase) {
  testing::World w(testing::kMixed);
  std::vector<sql::Example> examples = city_examples_with_gold();
  EvalOptions o = tag_options(EvalMode::PassK, 4);
  o.single_turn = true;
  RewardContext ctx(w.pool);
  EvalRun run = run_eval(w.model, w.tok, w.protocol, w.pool, examples, o, ctx);
  EXPECT_EQ(run.stats.sql_calls, 0);
  EXPECT_EQ(run.summary.sql_calls_per_question, 0.0);
  int64_t answered = 0;
  for (const ExampleResult& r : run.results)
    for (const SampleOutcome& s : r.samples) {
      EXPECT_LE(s.turns, 1);
      EXPECT_EQ(s.sql_calls, 0);
      answered += s.answered;
    }
  EXPECT_GT(answered, 0);
  ASSERT_EQ(run.summary.pass_at.size(), 3u);  // pass@1, @2, @4
  EXPECT_EQ(run.summary.pass_at.back().first, 4);
}

TEST(EvalRun, OutputsAreWrittenAndRepeatBitForBit) {
  testing::World w(testing::kMixed);
  std::vector<sql::Example> examples = city_examples_with_gold();
  EvalOptions o = tag_options(EvalMode::Vote, 3);
  o.batch_questions = 2;
  EvalInfo info{"test:city", "dev", "test-tags", "tiny", "spider", 2024};
  std::string dirs[2] = {temp_dir() + "/tag_a", temp_dir() + "/tag_b"};
  for (const std::string& dir : dirs) {
    RewardContext ctx(w.pool);  // fresh caches each time, as a new process would have
    EvalRun run = run_eval(w.model, w.tok, w.protocol, w.pool, examples, o, ctx);
    write_eval_outputs(dir, examples, run, o, info);
  }
  for (const char* name : {"summary.json", "summary.md", "examples.jsonl"}) {
    EXPECT_TRUE(fs::is_regular_file(fs::path(dirs[0]) / name)) << name;
    EXPECT_FALSE(fs::exists(fs::path(dirs[0]) / (std::string(name) + ".tmp"))) << name;
  }
  EXPECT_EQ(deterministic_part(dirs[0]), deterministic_part(dirs[1]));
  EXPECT_EQ(read_file(fs::path(dirs[0]) / "summary.md"), read_file(fs::path(dirs[1]) / "summary.md"));

  nlohmann::json summary = nlohmann::json::parse(read_file(fs::path(dirs[0]) / "summary.json"));
  EXPECT_EQ(summary["questions"], 3);
  EXPECT_EQ(summary["mode"], "vote");
  EXPECT_EQ(summary["samples"], 3);
  EXPECT_TRUE(summary["time"].contains("seconds"));
  int64_t by_difficulty = 0;
  for (const auto& [label, t] : summary["by_difficulty"].items()) by_difficulty += t["n"].get<int64_t>();
  EXPECT_EQ(by_difficulty, 3);
  std::istringstream lines(read_file(fs::path(dirs[0]) / "examples.jsonl"));
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    nlohmann::json j = nlohmann::json::parse(line);
    for (const char* key : {"id", "db_id", "question", "gold", "prediction", "correct", "em", "turns", "sql_calls",
                            "format_ok", "seconds"})
      EXPECT_TRUE(j.contains(key)) << key << " in " << line;
    EXPECT_EQ(j["id"], examples[static_cast<size_t>(n)].id);
  }
  EXPECT_EQ(n, 3);
}

// A small synthetic benchmark, the embedded BPE tokenizer trained on it and a tiny Qwen3 of
// that vocabulary (rl/grpo/train.h's embedded default), saved as a checkpoint for the CLI.
struct SynthWorld {
  std::string bench, weights;
  std::vector<sql::Example> dev, dialogue_dev;
  std::unique_ptr<Tokenizer> tok;
  QwenModel model;
};

const SynthWorld& synth_world() {
  static SynthWorld w = [] {
    SynthWorld s;
    s.bench = temp_dir() + "/bench";
    sql::SynthOptions so;
    so.seed = 3;
    so.train_databases = 1;
    so.dev_databases = 1;
    so.questions_per_database = 12;
    so.dialogues_per_database = 2;
    sql::write_synth_benchmark(s.bench, so);
    sql::LoadOptions lo;
    lo.dir = s.bench;
    s.dev = sql::load_dataset(lo).examples;
    s.dev.resize(2);
    lo.format = sql::DatasetFormat::Sparc;
    lo.dir = s.bench + "/sparc";
    s.dialogue_dev = sql::load_dataset(lo).examples;
    s.dialogue_dev.resize(std::min<size_t>(s.dialogue_dev.size(), 5));
    sql::Pool pool;
    std::string json = train_embedded_tokenizer(s.dev, pool, 512);
    s.tok = load_tokenizer_from_string(json, "embedded");
    TrainConfig c;
    c.seed = 9;
    c.tiny_hidden = 32;
    c.tiny_intermediate = 64;
    c.tiny_head_dim = 8;
    s.model = make_embedded_model(c, static_cast<int64_t>(s.tok->size()));
    s.weights = temp_dir() + "/tiny_model";
    save_model(s.model, s.weights);
    std::ofstream(fs::path(s.weights) / "tokenizer.json", std::ios::binary) << json;
    return s;
  }();
  return w;
}

EvalOptions synth_options(EvalMode mode, int64_t samples) {
  EvalOptions o;
  o.mode = mode;
  o.samples = samples;
  o.rollout.sampling = {mode == EvalMode::Greedy ? 0.0f : 1.0f, 0, 1.0f, 5};
  o.rollout.max_turn_tokens = 12;
  o.rollout.max_turns = 2;  // the random model never answers: keep its trajectories short
  o.rollout.max_total_tokens = 4096;
  return o;
}

TEST(EvalRun, SyntheticBenchmarkWithARealProtocol) {
  const SynthWorld& w = synth_world();
  std::unique_ptr<Protocol> protocol = make_protocol("skyrl");
  for (EvalMode mode : {EvalMode::Greedy, EvalMode::Vote}) {
    EvalOptions o = synth_options(mode, mode == EvalMode::Greedy ? 1 : 2);
    std::string out[2];
    for (int rep = 0; rep < 2; ++rep) {
      sql::Pool pool;
      RewardContext ctx(pool);
      EvalRun run = run_eval(w.model, *w.tok, *protocol, pool, w.dev, o, ctx);
      ASSERT_EQ(run.results.size(), w.dev.size());
      EXPECT_EQ(run.summary.trajectories, static_cast<int64_t>(w.dev.size()) * o.samples);
      std::string dir = temp_dir() + "/synth_" + eval_mode_name(mode) + std::to_string(rep);
      write_eval_outputs(dir, w.dev, run, o, {"spider:synth", "dev", "skyrl", "tiny", "spider", 5});
      out[rep] = deterministic_part(dir);
    }
    EXPECT_EQ(out[0], out[1]) << eval_mode_name(mode);
  }
}

TEST(EvalRun, DialogueTurnsAndInteractions) {
  const SynthWorld& w = synth_world();
  ASSERT_GE(w.dialogue_dev.size(), 3u);
  std::unique_ptr<Protocol> protocol = make_protocol("mtsql");
  EvalOptions o = synth_options(EvalMode::Greedy, 1);
  o.dialogue = true;
  sql::Pool pool;
  RewardContext ctx(pool);
  EvalRun run = run_eval(w.model, *w.tok, *protocol, pool, w.dialogue_dev, o, ctx);
  const EvalSummary& s = run.summary;
  EXPECT_TRUE(s.dialogue);
  int64_t n = 0, correct = 0;
  for (const auto& [bucket, t] : s.by_turn) {
    n += t.n;
    correct += t.correct;
  }
  EXPECT_EQ(n, s.total.n);
  EXPECT_EQ(correct, s.total.correct);
  std::set<size_t> records;
  for (const sql::Example& ex : w.dialogue_dev) records.insert(ex.record_index);
  EXPECT_EQ(s.interactions.n, static_cast<int64_t>(records.size()));
  std::string md = summary_markdown(run, o, {"sparc:synth", "dev", "mtsql", "tiny", "spider", 0});
  EXPECT_NE(md.find("interaction match"), std::string::npos) << md;
  EXPECT_NE(md.find("| turn |"), std::string::npos) << md;
}

TEST(EvalCli, RunsTwiceBitIdenticalAndRejectsBadInput) {
  if (!fs::exists(SQLRL_BINARY)) GTEST_SKIP() << SQLRL_BINARY << " is not built";
  const SynthWorld& w = synth_world();
  const std::string base = std::string(SQLRL_BINARY) + " eval --quiet --weights " + w.weights +
                           " --dataset spider:" + w.bench + " --limit 2 --max-turns 2 --max-turn-tokens 12 --seed 4";
  std::string dirs[2] = {temp_dir() + "/cli_a", temp_dir() + "/cli_b"};
  for (const std::string& dir : dirs) {
    sqlrl::testing::CommandResult r =
        sqlrl::testing::run_command(base + " --mode vote --samples 2 --protocol sqltrail --out " + dir);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("| questions | EX |"), std::string::npos) << r.output;
  }
  EXPECT_EQ(deterministic_part(dirs[0]), deterministic_part(dirs[1]));
  nlohmann::json summary = nlohmann::json::parse(read_file(fs::path(dirs[0]) / "summary.json"));
  EXPECT_EQ(summary["questions"], 2);
  EXPECT_EQ(summary["protocol"], "sqltrail");
  EXPECT_EQ(summary["compare"], "spider");
  EXPECT_EQ(summary["device"], "cpu");

  struct Bad {
    std::string flags, message;
  };
  const Bad bad[] = {
      {" --mode best", "eval mode 'best' does not exist"},
      {" --mode greedy --samples 4", "--mode greedy takes one sample"},
      {" --mode greedy --temperature 0.7", "--mode greedy decodes at temperature 0"},
      {" --mode vote --temperature 0", "identical samples"},
      {" --protocol nope", "nope"},
      {" --compare exact", "--compare 'exact'"},
      {" --device tpu", "device 'tpu' is not cpu or cuda"},
      {" --no-thinking", "--no-thinking is now spelled --enable-thinking=false"},
      {" --mode passk --samples 1000000000", "--samples 1000000000 is above 4096 per question"},  // was std::bad_alloc
  };
  for (const Bad& b : bad) {
    sqlrl::testing::CommandResult r = sqlrl::testing::run_command(base + b.flags + " --out " + temp_dir() + "/cli_bad");
    const std::string& out = r.output;
    EXPECT_NE(r.exit_code, 0) << b.flags;
    EXPECT_NE(out.find(b.message), std::string::npos) << b.flags << ": " << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << b.flags << ": " << out;
  }
  sqlrl::testing::CommandResult r =
      sqlrl::testing::run_command(std::string(SQLRL_BINARY) + " eval --quiet --weights " + w.weights + " --dataset " +
                                  w.bench + " --out " + temp_dir() + "/cli_bad");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("expected FORMAT:PATH"), std::string::npos) << r.output;
  r = sqlrl::testing::run_command(std::string(SQLRL_BINARY) + " eval --quiet --weights " + temp_dir() +
                                  "/none --dataset spider:" + w.bench);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no such file or folder"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(temp_dir() + "/cli_bad"));
}

// The resolved config.toml an evaluation writes reads back with --config: the same evaluation,
// byte for byte; a flag given beside it wins over the file's key.
TEST(EvalCli, ItsConfigTomlReproducesTheRun) {
  if (!fs::exists(SQLRL_BINARY)) GTEST_SKIP() << SQLRL_BINARY << " is not built";
  const SynthWorld& w = synth_world();
  const std::string bin = std::string(SQLRL_BINARY) + " eval --quiet";
  const std::string first = temp_dir() + "/cfg_a", again = temp_dir() + "/cfg_b", other = temp_dir() + "/cfg_c";
  sqlrl::testing::CommandResult r = sqlrl::testing::run_command(
      bin + " --weights " + w.weights + " --dataset spider:" + w.bench +
      " --limit 2 --max-turns 2 --max-turn-tokens 12 --seed 4 --mode vote --samples 2 --protocol sqltrail "
      "--enable-thinking=false --out " + first);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string config = read_file(fs::path(first) / "config.toml");
  EXPECT_NE(config.find("enable-thinking = false"), std::string::npos) << config;
  EXPECT_NE(config.find("temperature = 1.0"), std::string::npos) << "the mode's default, resolved: " << config;
  r = sqlrl::testing::run_command(bin + " --config " + first + "/config.toml --out " + again);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(deterministic_part(first), deterministic_part(again));
  EXPECT_EQ(read_file(fs::path(again) / "config.toml"), config_with_out(config, again));
  r = sqlrl::testing::run_command(bin + " --config " + first + "/config.toml --seed 5 --out " + other);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(read_file(fs::path(other) / "config.toml").find("seed = 5"), std::string::npos);
}

// What a rollout's tokens decide: the examples.jsonl lines without their wall-clock field, and the
// tokens sampled (a random model's turns are all invalid; where they stop is what differs).
std::string examples_part(const std::string& dir) {
  std::string out = nlohmann::json::parse(read_file(fs::path(dir) / "summary.json"))["tokens"].dump() + "\n";
  std::istringstream lines(read_file(fs::path(dir) / "examples.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);
    j.erase("seconds");
    out += j.dump() + "\n";
  }
  return out;
}

// eval --adapter rolls out base + adapter unmerged (rl/policy.h Policy::lora): every trajectory
// is the one the merged checkpoint (llm_sqlrl merge, f32) rolls out, and not the base's.
TEST(EvalCli, AdapterRollsOutAsTheMergedCheckpoint) {
  if (!fs::exists(SQLRL_BINARY)) GTEST_SKIP() << SQLRL_BINARY << " is not built";
  const SynthWorld& w = synth_world();
  LoraConfig lc;
  lc.rank = 4;
  lc.alpha = 8;
  lc.target_pattern = "all-linear";
  LoraAdapter adapter = init_adapter(lc, w.model.config, 3);
  // PEFT's init leaves B zero (no change); a B of the size of A's entries moves the logits.
  for (const LoraView& v : adapter.table)
    if (v.is_b)
      for (int64_t i = 0; i < v.numel(); ++i) adapter.params[v.offset + i] = 0.5f * std::sin(0.7f * (v.offset + i));
  const std::string dir = temp_dir() + "/adapter", merged = temp_dir() + "/merged";
  save_adapter(adapter, dir);
  const std::string bin = std::string(SQLRL_BINARY);
  sqlrl::testing::CommandResult r = sqlrl::testing::run_command(bin + " merge --weights " + w.weights + " --adapter " +
                                                                dir + " --dtype f32 --out " + merged);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(fs::path(merged) / "tokenizer.json")) << "merge copies the base's tokenizer files";
  const std::string eval = bin + " eval --quiet --dataset spider:" + w.bench +
                           " --limit 2 --max-turns 2 --max-turn-tokens 48 --mode vote --samples 2 --seed 4 --weights ";
  const std::string with = temp_dir() + "/ad_with", folded = temp_dir() + "/ad_merged", alone = temp_dir() + "/ad_base";
  for (const std::string& cmd : {eval + w.weights + " --adapter " + dir + " --out " + with,
                                 eval + merged + " --out " + folded, eval + w.weights + " --out " + alone}) {
    r = sqlrl::testing::run_command(cmd);
    ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  }
  std::printf("tokens with the adapter %s, merged %s, base alone %s\n",
              nlohmann::json::parse(read_file(fs::path(with) / "summary.json"))["tokens"].dump().c_str(),
              nlohmann::json::parse(read_file(fs::path(folded) / "summary.json"))["tokens"].dump().c_str(),
              nlohmann::json::parse(read_file(fs::path(alone) / "summary.json"))["tokens"].dump().c_str());
  EXPECT_EQ(examples_part(with), examples_part(folded));
  EXPECT_NE(examples_part(with), examples_part(alone)) << "eval --adapter rolled out the base's trajectories";
  nlohmann::json summary = nlohmann::json::parse(read_file(fs::path(with) / "summary.json"));
  EXPECT_EQ(summary["adapter"], dir);
  EXPECT_FALSE(nlohmann::json::parse(read_file(fs::path(alone) / "summary.json")).contains("adapter"));
  EXPECT_NE(read_file(fs::path(with) / "config.toml").find("adapter = \"" + dir + "\""), std::string::npos);
}

// Without a GPU, --device cuda stops before anything is read, saying why. With one, this tiny
// model (head_dim 8) is refused by name: the CUDA attention takes head_dim 64 and 128.
TEST(EvalCli, DeviceCudaFailsInOneLineNamingWhy) {
  if (!fs::exists(SQLRL_BINARY)) GTEST_SKIP() << SQLRL_BINARY << " is not built";
  const SynthWorld& w = synth_world();
  sqlrl::testing::CommandResult r = sqlrl::testing::run_command(
      std::string(SQLRL_BINARY) + " eval --quiet --device cuda --weights " + w.weights + " --dataset spider:" +
      w.bench + " --limit 1 --out " + temp_dir() + "/cli_cuda");
  EXPECT_NE(r.exit_code, 0);
  const std::string expected = cuda_device_count() == 0 ? "eval: --device cuda: " : "head_dim is 8";
  EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_FALSE(fs::exists(temp_dir() + "/cli_cuda"));
}

}  // namespace
}  // namespace sqlrl::rl
