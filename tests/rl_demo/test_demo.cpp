// The embedded end-to-end run at its "mini" size (seconds): every stage runs, the run folder
// holds what rl/demo/demo.h lists, and report.json carries the keys rl/demo/demo.h documents, with EX values in [0, 1].
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "rl/demo/demo.h"
#include "rl/run_folder.h"
#include "runtime/device.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace sqlrl::rl {
namespace {

TEST(Demo, MiniRunWritesReport) {
  DemoConfig c;
  c.out = (sqlrl::testing::process_temp_path("sqlrl_test_demo_mini")).string();
  fs::remove_all(c.out);
  c.sizes = demo_sizes("mini");
  DemoReport r = run_demo(c);

  // The demo's own list (what tests/rl_cuda's DemoCuda holds the device run to), and the places
  // of the stages the grid below reads.
  auto names = [](const DemoReport& rep) {
    std::vector<std::string> out;
    for (const DemoStage& s : rep.stages) out.push_back(s.name);
    return out;
  };
  EXPECT_EQ(names(r), demo_stage_names(c.sizes));
  ASSERT_EQ(r.stages.size(), 4u);
  EXPECT_EQ(r.stages[0].name, "base");
  EXPECT_EQ(r.stages[2].name, "rl");
  EXPECT_EQ(r.stages[3].name, "rl-single");
  EXPECT_EQ(static_cast<int64_t>(r.rl_single_reward_means.size()), c.sizes.rl_steps);
  EXPECT_EQ(r.dev_questions, c.sizes.dev_limit);
  EXPECT_GT(r.demos, 0);
  EXPECT_EQ(static_cast<int64_t>(r.rl_reward_means.size()), c.sizes.rl_steps);
  for (const DemoStage& s : r.stages) {
    EXPECT_EQ(s.multi.total.n, r.dev_questions) << s.name;
    EXPECT_EQ(s.single.total.n, r.dev_questions) << s.name;
    int64_t by_level = 0;
    for (const auto& [label, t] : s.multi.by_difficulty) by_level += t.n;
    EXPECT_EQ(by_level, r.dev_questions) << s.name;  // the difficulty rows cover every question
  }

  std::ifstream in(fs::path(c.out) / "report.json");
  ASSERT_TRUE(in.good());
  nlohmann::json j = nlohmann::json::parse(in);
  for (const char* stage : {"base", "sft", "rl"}) {
    ASSERT_TRUE(j["dev_ex"].contains(stage)) << stage;
    double x = j["dev_ex"][stage].get<double>();
    EXPECT_GE(x, 0.0);
    EXPECT_LE(x, 1.0);
  }
  for (const char* key : {"single_turn_ex", "multi_turn_ex"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_GE(j[key].get<double>(), 0.0);
    EXPECT_LE(j[key].get<double>(), 1.0);
  }
  EXPECT_EQ(j["multi_turn_ex"].get<double>(), j["dev_ex"]["rl"].get<double>());
  // SkyRL-SQL's 2x2, grid[trained][evaluated]: multi-trained is the rl stage, single-trained the
  // single-turn GRPO run's; each cell's details beside it.
  for (const char* trained : {"single", "multi"})
    for (const char* evaluated : {"single", "multi"}) {
      ASSERT_TRUE(j["grid"].contains(trained) && j["grid"][trained].contains(evaluated)) << trained << evaluated;
      const DemoStage& st = r.stages[std::string(trained) == "multi" ? 2 : 3];
      const EvalSummary& sum = std::string(evaluated) == "multi" ? st.multi : st.single;
      EXPECT_EQ(j["grid"][trained][evaluated].get<double>(), sum.total.ex()) << trained << evaluated;
      const nlohmann::json& d = j["grid_details"][trained][evaluated];
      EXPECT_EQ(d["n"], r.dev_questions);
      for (const char* key : {"by_difficulty", "by_category", "copy_error_rate", "first_right_final_wrong",
                              "first_wrong_final_right", "sql_calls_per_trajectory", "format_error_rate"})
        EXPECT_TRUE(d.contains(key)) << trained << evaluated << key;
    }
  EXPECT_EQ(j["grid"]["multi"]["multi"], j["dev_ex"]["rl"]);
  EXPECT_EQ(j["grid"]["multi"]["single"], j["single_turn_ex"]);
  ASSERT_TRUE(j["phases"].is_array());
  EXPECT_EQ(j["phases"].front()["phase"], "setup");
  EXPECT_EQ(j["phases"].back()["phase"], "eval rl-single single-turn");
  EXPECT_GT(j["seconds"].get<double>(), 0.0);
  EXPECT_GE(j["cpu_seconds"].get<double>(), 0.0);
  for (const char* f : {"report.md", "report.html", "demos.jsonl", "sft/metrics.jsonl", "rl/metrics.jsonl", "rl/config.toml",
                        "eval/base-multi/summary.json", "eval/sft-single/examples.jsonl", "eval/rl-multi/summary.md",
                        "rl-single/metrics.jsonl", "eval/rl-single-multi/summary.json", "eval/rl-single-single/summary.json"})
    EXPECT_TRUE(fs::exists(fs::path(c.out) / f)) << f;
  // One TensorBoard folder, a run per phase, none inside the run folders.
  for (const char* phase : {"sft", "rl", "rl-single"}) {
    const fs::path tb = fs::path(c.out) / "tb" / phase;
    ASSERT_TRUE(fs::is_directory(tb)) << tb;
    EXPECT_NE(fs::directory_iterator(tb), fs::directory_iterator()) << tb << " is empty";
    EXPECT_FALSE(fs::exists(fs::path(c.out) / phase / "tb")) << phase;
  }
  // The second GRPO run trains single-turn; the first multi-turn.
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  EXPECT_NE(slurp(fs::path(c.out) / "rl-single" / "config.toml").find("single-turn = true"), std::string::npos);
  EXPECT_NE(slurp(fs::path(c.out) / "rl" / "config.toml").find("single-turn = false"), std::string::npos);
  EXPECT_NE(slurp(fs::path(c.out) / "report.html").find("GRPO single-turn"), std::string::npos);
  // The table names every stage and both comparisons.
  std::string table = demo_table(r);
  for (const char* s : {"base (random init)", "SFT (gold demos)", "SFT + multi-turn GRPO", "SFT + single-turn GRPO",
                        "single-turn", "multi-turn", "by difficulty", "copy errors", "first right -> final wrong"})
    EXPECT_NE(table.find(s), std::string::npos) << s;

  // A second demo in the same folder keeps the first one's outputs in previous/, not deletes them.
  // This one skips the single-turn run (rl_single_turn 0): no rl-single/, the grid's multi row only.
  std::ifstream first_report(fs::path(c.out) / "report.md");
  std::string first((std::istreambuf_iterator<char>(first_report)), std::istreambuf_iterator<char>());
  c.seed = 2;
  c.sizes.rl_single_turn = 0;
  c.sizes.base_dev_limit = 2;  // the base stage on 2 of the 4 dev questions, the others on all
  DemoReport second = run_demo(c);
  EXPECT_EQ(names(second), demo_stage_names(c.sizes));
  ASSERT_EQ(second.stages.size(), 3u);
  EXPECT_EQ(second.stages[0].multi.total.n, 2);
  EXPECT_EQ(second.stages[0].single.total.n, 2);
  EXPECT_EQ(second.stages[1].multi.total.n, 4);
  EXPECT_NE(demo_table(second).find("| base (random init), 2 questions |"), std::string::npos) << demo_table(second);
  EXPECT_TRUE(fs::exists(fs::path(c.out) / "previous" / "rl-single" / "metrics.jsonl"));
  EXPECT_FALSE(fs::exists(fs::path(c.out) / "rl-single"));
  std::ifstream second_json(fs::path(c.out) / "report.json");
  nlohmann::json j2 = nlohmann::json::parse(second_json);
  EXPECT_TRUE(j2["grid"].contains("multi"));
  EXPECT_FALSE(j2["grid"].contains("single"));
  std::ifstream kept(fs::path(c.out) / "previous" / "report.md");
  std::string previous((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
  EXPECT_EQ(previous, first);
  EXPECT_TRUE(fs::exists(fs::path(c.out) / "previous" / "rl" / "metrics.jsonl"));
  EXPECT_TRUE(fs::exists(fs::path(c.out) / "rl" / "metrics.jsonl"));
  fs::remove_all(c.out);
}

// --train-set reaches the GRPO phase's trainer config (its metrics show the knob at work), and a
// key that `llm_sqlrl train` does not have is refused before anything runs.
TEST(Demo, TrainSetReachesTheGrpoPhase) {
  DemoConfig c;
  c.out = (sqlrl::testing::process_temp_path("sqlrl_test_demo_train_set")).string();
  fs::remove_all(c.out);
  c.sizes = demo_sizes("mini");
  c.train_sets = {"dynamic-sampling=true", "dynamic-sampling-max-tries=2"};
  run_demo(c);
  std::ifstream in(fs::path(c.out) / "rl" / "metrics.jsonl");
  int64_t lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    const nlohmann::json j = nlohmann::json::parse(line);
    ASSERT_TRUE(j.contains("dynamic_sampling")) << line;
    EXPECT_LE(j["dynamic_sampling"]["tries"].get<int64_t>(), 2);
  }
  EXPECT_EQ(lines, c.sizes.rl_steps);
  fs::remove_all(c.out);
  c.train_sets = {"dynamic-sampling-tries=2"};
  try {
    run_demo(c);
    FAIL() << "an unknown train key was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'dynamic-sampling-tries' is not a key of llm_sqlrl train"), std::string::npos)
        << e.what();
  }
  fs::remove_all(c.out);
}

// sft_databases = 1 splits the train databases: every demonstration comes from the first one, every
// GRPO prompt from the other (catches GRPO still drawing from the SFT databases, or demos from
// all), and a split that leaves GRPO no database is refused.
TEST(Demo, SftDatabasesKeepGrpoOnDatabasesSftNeverSaw) {
  DemoConfig c;
  c.out = (sqlrl::testing::process_temp_path("sqlrl_test_demo_sft_dbs")).string();
  fs::remove_all(c.out);
  c.sizes = demo_sizes("mini");
  c.sizes.train_limit = 0;  // both databases' questions
  c.sizes.sft_databases = 1;
  c.sizes.rl_single_turn = 0;
  c.train_sets = {"log-trajectories=4"};
  run_demo(c);
  std::set<std::string> sft_dbs, rl_dbs;
  std::ifstream demos(fs::path(c.out) / "demos.jsonl");
  for (std::string line; std::getline(demos, line);) sft_dbs.insert(nlohmann::json::parse(line)["db_id"].get<std::string>());
  std::ifstream trajs(fs::path(c.out) / "rl" / "trajectories.jsonl");
  for (std::string line; std::getline(trajs, line);) rl_dbs.insert(nlohmann::json::parse(line)["db_id"].get<std::string>());
  ASSERT_EQ(sft_dbs.size(), 1u);
  ASSERT_EQ(rl_dbs.size(), 1u);
  EXPECT_NE(*sft_dbs.begin(), *rl_dbs.begin());
  fs::remove_all(c.out);
  c.sizes.sft_databases = c.sizes.train_databases;
  try {
    run_demo(c);
    FAIL() << "sft_databases = every train database was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("leaves GRPO no database"), std::string::npos) << e.what();
  }
  fs::remove_all(c.out);
}

// --sft-from starts GRPO from an earlier demo's SFT checkpoint: the same seed gives the GRPO phase
// and evaluations of the run that trained SFT itself; another seed's SFT settings are refused.
TEST(Demo, SftFromAnEarlierRunGivesItsGrpoPhase) {
  DemoConfig a;
  a.out = sqlrl::testing::process_temp_path("sqlrl_test_demo_sft_a").string();
  fs::remove_all(a.out);
  a.sizes = demo_sizes("mini");
  DemoReport ra = run_demo(a);
  DemoConfig b = a;
  b.out = sqlrl::testing::process_temp_path("sqlrl_test_demo_sft_b").string();
  fs::remove_all(b.out);
  b.sft_from = a.out;
  DemoReport rb = run_demo(b);
  EXPECT_FALSE(fs::exists(fs::path(b.out) / "sft"));  // nothing trained
  auto lines = [](const std::string& dir) {
    std::ifstream in(fs::path(dir) / "rl" / "metrics.jsonl");
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      j.erase("time"), j.erase("rollout");
      out.push_back(j.dump());
    }
    return out;
  };
  EXPECT_EQ(lines(a.out), lines(b.out));
  EXPECT_FALSE(lines(a.out).empty());
  // The mini run's rewards may all be equal (nothing trained), so the weights say more: B's GRPO
  // ends on A's bytes.
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string wa = bytes(fs::path(latest_checkpoint(a.out + "/rl")) / "model.safetensors");
  EXPECT_FALSE(wa.empty());
  EXPECT_TRUE(wa == bytes(fs::path(latest_checkpoint(b.out + "/rl")) / "model.safetensors")) << "GRPO ended elsewhere";
  ASSERT_EQ(ra.stages.size(), rb.stages.size());
  for (size_t i = 0; i < ra.stages.size(); ++i) {
    EXPECT_EQ(ra.stages[i].multi.total.correct, rb.stages[i].multi.total.correct) << ra.stages[i].name;
    EXPECT_EQ(ra.stages[i].single.total.correct, rb.stages[i].single.total.correct) << ra.stages[i].name;
  }
  DemoConfig c = b;
  c.out = sqlrl::testing::process_temp_path("sqlrl_test_demo_sft_c").string();
  fs::remove_all(c.out);
  c.seed = 2;
  try {
    run_demo(c);
    FAIL() << "took another seed's SFT";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trained with SFT settings"), std::string::npos) << e.what();
  }
  for (const std::string& d : {a.out, b.out, c.out}) fs::remove_all(d);
}

// rl_eval_every (`demo --eval-every`): GRPO evaluates the dev questions after every step; each
// evaluation is in rl/eval/step-N and report.json's rl_eval curve, with the best step marked.
TEST(Demo, MiniRunEvaluatesDuringGrpo) {
  DemoConfig c;
  c.out = (sqlrl::testing::process_temp_path("sqlrl_test_demo_eval")).string();
  fs::remove_all(c.out);
  c.sizes = demo_sizes("mini");
  c.sizes.rl_eval_every = 1;
  DemoReport r = run_demo(c);
  ASSERT_EQ(static_cast<int64_t>(r.rl_eval.size()), c.sizes.rl_steps);
  std::ifstream in(fs::path(c.out) / "report.json");
  nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["rl_eval"].size(), r.rl_eval.size());
  for (size_t i = 0; i < r.rl_eval.size(); ++i) {
    const int64_t step = static_cast<int64_t>(i) + 1;
    EXPECT_EQ(r.rl_eval[i].first, step);
    std::ifstream f(fs::path(c.out) / "rl" / "eval" / ("step-" + std::to_string(step)) / "summary.json");
    ASSERT_TRUE(f.good()) << step;
    nlohmann::json summary = nlohmann::json::parse(f);
    EXPECT_EQ(summary["questions"], r.dev_questions) << "the dev questions the stages are evaluated on";
    EXPECT_EQ(summary["compare"], "bird");
    EXPECT_EQ(j["rl_eval"][i]["ex"], summary["ex"]) << step;
  }
  std::ifstream b(fs::path(c.out) / "rl" / "best.json");
  ASSERT_TRUE(b.good());
  EXPECT_EQ(nlohmann::json::parse(b)["step"], j["rl_best_step"]);
  EXPECT_NE(demo_table(r).find("Dev EX (%) during GRPO"), std::string::npos) << demo_table(r);
  // report.html holds the GRPO run's curves and the stage evaluations' tables (report/report.h).
  std::ifstream h(fs::path(c.out) / "report.html");
  const std::string html((std::istreambuf_iterator<char>(h)), std::istreambuf_iterator<char>());
  for (const char* s : {"<svg", "Eval EX (greedy, held-out split)", "GRPO: reward mean", "rl-multi", "sft-single", "step-1"})
    EXPECT_NE(html.find(s), std::string::npos) << s;
  fs::remove_all(c.out);
}

// The demo never writes over another command's run (it used to delete DIR/{sft,rl,eval}).
TEST(Demo, RefusesAFolderHoldingATrainRun) {
  DemoConfig c;
  c.out = (sqlrl::testing::process_temp_path("sqlrl_test_demo_trainrun")).string();
  fs::remove_all(c.out);
  fs::create_directories(fs::path(c.out) / "checkpoints" / "step-1");
  std::ofstream(fs::path(c.out) / "metrics.jsonl") << "{\"step\":1}\n";
  c.sizes = demo_sizes("mini");
  try {
    run_demo(c);
    ADD_FAILURE() << "the demo ran in a train run's folder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds a train or sft run"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(fs::path(c.out) / "checkpoints" / "step-1"));
  EXPECT_FALSE(fs::exists(fs::path(c.out) / "cache"));
  fs::remove_all(c.out);
}

TEST(Demo, UnknownSizeIsAnError) { EXPECT_ANY_THROW(demo_sizes("huge")); }

// `demo --set KEY=VALUE` reaches every knob by name, whole and real ones, and report.json's
// "sizes" lists each knob with its value.
TEST(Demo, SetReachesEveryKnobAndTheReportListsThem) {
  DemoSizes z = demo_sizes("mini");
  set_demo_size(z, "rl_steps=7");
  set_demo_size(z, "rl_lr=0.00025");
  set_demo_size(z, "head_dim=64");
  EXPECT_EQ(z.rl_steps, 7);
  EXPECT_EQ(z.rl_lr, 0.00025);
  EXPECT_EQ(z.head_dim, 64);
  auto error_of = [&](const std::string& kv) {
    try {
      set_demo_size(z, kv);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("rl_stepz=3").find("unknown key 'rl_stepz' (known: train_databases, "), std::string::npos);
  EXPECT_NE(error_of("rl_steps=-1").find("is not a number >= 0"), std::string::npos);
  EXPECT_NE(error_of("rl_steps=1.5").find("not a number"), std::string::npos);
  EXPECT_NE(error_of("rl_steps").find("is not KEY=VALUE"), std::string::npos);
  DemoReport r;
  r.config.sizes = z;
  for (const char* name : {"base", "sft", "rl"}) {
    DemoStage stage;
    stage.name = name;
    r.stages.push_back(stage);
  }
  nlohmann::ordered_json sizes = demo_report_json(r)["sizes"];
  EXPECT_EQ(sizes.size(), demo_size_options(z).size());
  EXPECT_EQ(sizes["rl_steps"], 7);
  EXPECT_EQ(sizes["rl_lr"], 0.00025);
  EXPECT_EQ(sizes["max_total_tokens"], z.max_total_tokens);
}

// A CUDA run that cannot run fails before the benchmark, the tokenizer or any folder is made:
// without a GPU naming why, with one naming the head_dim (mini's 16; the kernels take 64, 128).
TEST(Demo, CudaRunThatCannotRunFailsBeforeWritingAnything) {
  DemoConfig c;
  c.out = (sqlrl::testing::process_temp_path("sqlrl_test_demo_cuda_refused")).string();
  fs::remove_all(c.out);
  c.sizes = demo_sizes("mini");
  c.device = "cuda";
  std::string message;
  try {
    run_demo(c);
  } catch (const std::exception& e) {
    message = e.what();
  }
  const std::string expected = cuda_device_count() == 0 ? "demo: --device cuda: " : "head_dim is 16";
  EXPECT_NE(message.find(expected), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(c.out));
  c.device = "tpu";
  EXPECT_THROW(run_demo(c), std::exception);
  EXPECT_FALSE(fs::exists(c.out));
}

}  // namespace
}  // namespace sqlrl::rl
