// Evaluation during training (`train --eval-every N`, rl/grpo/train.h): from the briefly
// SFT-trained tiny checkpoint (tests/fixtures/sft_tiny) on the embedded benchmark's dev split.
// The in-run evaluation is `llm_sqlrl eval` of that step's checkpoint (same EX, same answers),
// runs on the right steps only, names the best step, survives resume, and changes nothing the
// training computes.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "rl/grpo/train.h"
#include "rl/grpo/train_log.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

namespace fs = std::filesystem;

// 2 prompts x 4 samples a step; 6 dev questions per evaluation; turns long enough for the
// fixture's answers (the eval and train caps below are the same numbers).
const std::string kCaps = " --max-turn-tokens 64 --max-total-tokens 2048";
std::string fixture_args(int steps) {
  return str_cat(SQLRL_BINARY, " train --config tiny --weights ", SQLRL_FIXTURES_DIR, "/sft_tiny --max-steps ", steps,
                 " --batch-size 2 --group-size 4 --save-every 0", kCaps, " ");
}
constexpr int kLimit = 6;

std::string bytes(const std::string& path) { return sql::testing::file_bytes(path); }

std::vector<nlohmann::json> metric_lines(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// examples.jsonl without the wall-clock fields: what was asked and answered, in order.
std::vector<nlohmann::json> answers(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    j.erase("seconds");
    out.push_back(j);
  }
  return out;
}

nlohmann::json summary(const std::string& dir) {
  nlohmann::json j = nlohmann::json::parse(bytes(dir + "/summary.json"));
  j.erase("time");
  return j;
}

TEST(TrainEval, EvalEveryIsTheRealEvalOnItsStepsAndRecordsTheBest) {
  const std::string dir = fresh_dir("train_eval_every"), plain = fresh_dir("train_eval_off");
  CliRun r = run_command(fixture_args(3) + str_cat("--eval-every 2 --eval-limit ", kLimit, " --out ", dir), "eval_every");
  ASSERT_EQ(r.rc, 0) << r.err;
  // Steps 2 (2 % 2 == 0) and 3 (the last) are evaluated; step 1 is not.
  EXPECT_FALSE(fs::exists(dir + "/eval/step-1"));
  const std::vector<nlohmann::json> m = metric_lines(dir);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_FALSE(m[0].contains("eval")) << m[0].dump();
  int64_t best_step = 0;
  double best_ex = -1;
  for (int step : {2, 3}) {
    const nlohmann::json& line = m[static_cast<size_t>(step - 1)];
    ASSERT_TRUE(line.contains("eval")) << step;
    const nlohmann::json s = summary(dir + "/eval/step-" + std::to_string(step));
    EXPECT_EQ(s["questions"], kLimit);
    EXPECT_EQ(s["mode"], "greedy");
    EXPECT_EQ(line["eval"]["n"], s["questions"]) << step;
    EXPECT_EQ(line["eval"]["ex"], s["ex"]) << step;
    EXPECT_EQ(line["eval"]["format_error_rate"], s["format_error_rate"]) << step;
    EXPECT_EQ(line["eval"]["avg_turns"], s["avg_turns"]) << step;
    for (const auto& [label, t] : s["by_difficulty"].items()) EXPECT_EQ(line["eval"]["by_difficulty"][label]["ex"], t["ex"]);
    EXPECT_TRUE(line["time"].contains("eval_s"));
    if (s["ex"].get<double>() > best_ex) best_ex = s["ex"].get<double>(), best_step = step;
  }
  EXPECT_NE(r.out.find("| eval "), std::string::npos) << "the progress line shows the last eval EX: " << r.out;
  // best.json: the highest EX (the earliest of equals), and a checkpoint of that step exists.
  const nlohmann::json best = nlohmann::json::parse(bytes(dir + "/best.json"));
  EXPECT_EQ(best["step"], best_step);
  EXPECT_EQ(best["eval_ex"], best_ex);
  EXPECT_TRUE(fs::exists(dir + "/" + best["checkpoint"].get<std::string>() + "/model.safetensors")) << best.dump();

  // `llm_sqlrl eval` of the last step's checkpoint, with the run's caps and limit: the same EX
  // and the same answers to every question.
  const std::string eval_out = fresh_dir("train_eval_cmd");
  CliRun e = run_command(str_cat(SQLRL_BINARY, " eval --quiet --weights ", checkpoint_dir(dir, 3), " --dataset spider:",
                                 dir, "/cache/synth --split dev --limit ", kLimit, kCaps, " --out ", eval_out),
                         "eval_cmd");
  ASSERT_EQ(e.rc, 0) << e.err;
  const nlohmann::json in_run = summary(dir + "/eval/step-3"), alone = summary(eval_out);
  for (const char* key : {"questions", "ex", "correct", "em", "by_difficulty", "format_error_rate", "avg_turns",
                          "sql_calls_per_question", "tokens", "compare"})
    EXPECT_EQ(in_run[key], alone[key]) << key;
  EXPECT_EQ(answers(dir + "/eval/step-3/examples.jsonl"), answers(eval_out + "/examples.jsonl"));

  // The same run without evaluation trains the same bits and logs the same lines (but "eval").
  CliRun p = run_command(fixture_args(3) + "--out " + plain, "eval_off");
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_TRUE(bytes(checkpoint_dir(dir, 3) + "/model.safetensors") == bytes(checkpoint_dir(plain, 3) + "/model.safetensors"))
      << "evaluating changed the training";
  std::vector<nlohmann::json> q = metric_lines(plain);
  ASSERT_EQ(q.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    nlohmann::json a = m[i], b = q[i];
    a.erase("eval"), a.erase("time"), b.erase("time"), a.erase("rollout"), b.erase("rollout");
    EXPECT_EQ(a, b) << i;
  }
  EXPECT_FALSE(fs::exists(plain + "/best.json"));
  EXPECT_FALSE(fs::exists(plain + "/eval"));
}

// Stopped after step 2 and resumed to 4: the same evaluations, metrics "eval" fields and
// best.json as the run that was never stopped.
TEST(TrainEval, ResumeKeepsTheEvaluationsAndTheBest) {
  const std::string whole = fresh_dir("train_eval_whole"), parts = fresh_dir("train_eval_parts");
  const std::string eval = str_cat("--eval-every 1 --eval-limit ", kLimit, " ");
  CliRun a = run_command(fixture_args(4) + eval + "--out " + whole, "eval_whole");
  ASSERT_EQ(a.rc, 0) << a.err;
  CliRun b = run_command(fixture_args(2) + eval + "--out " + parts, "eval_parts");
  ASSERT_EQ(b.rc, 0) << b.err;
  CliRun c = run_command(str_cat(SQLRL_BINARY, " train --resume ", parts, " --max-steps 4"), "eval_resumed");
  ASSERT_EQ(c.rc, 0) << c.err;
  const std::vector<nlohmann::json> m = metric_lines(whole), n = metric_lines(parts);
  ASSERT_EQ(m.size(), 4u);
  ASSERT_EQ(n.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(m[i].contains("eval")) << i;
    EXPECT_EQ(m[i]["eval"], n[i]["eval"]) << i;
  }
  EXPECT_EQ(bytes(whole + "/best.json"), bytes(parts + "/best.json"));
  for (int step = 1; step <= 4; ++step)
    EXPECT_EQ(answers(whole + "/eval/step-" + std::to_string(step) + "/examples.jsonl"),
              answers(parts + "/eval/step-" + std::to_string(step) + "/examples.jsonl"))
        << step;
}

// best_eval_in: the highest eval EX of a metrics file, the earliest step among equals; lines
// without "eval" do not count. Catches ">=" for ">", and a best taken from a line without one.
TEST(TrainEval, BestIsTheHighestEvalExFirstOfEquals) {
  const std::string path = sql::testing::temp_dir() + "/best_metrics.jsonl";
  std::ofstream(path) << R"({"step":1,"ex":0.9}
{"step":2,"eval":{"ex":0.25}}
{"step":3,"ex":1.0}
{"step":4,"eval":{"ex":0.5}}
{"step":5,"eval":{"ex":0.5}}
{"step":6,"eval":{"ex":0.125}}
)";
  BestEval best = best_eval_in(path);
  EXPECT_EQ(best.step, 4);
  EXPECT_EQ(best.ex, 0.5);
  std::ofstream(path) << "{\"step\":1,\"ex\":0.9}\n";
  EXPECT_EQ(best_eval_in(path).step, 0);
}

// Bad eval keys fail with one line naming the key, before the run folder is made.
TEST(TrainEval, BadEvalSettingsFailCleanly) {
  const std::string out = fresh_dir("train_eval_bad");
  struct Bad {
    std::string flags, message;
  };
  for (const Bad& bad : std::vector<Bad>{{"--eval-every -1", "eval-every must be >= 0"},
                                         {"--eval-every 1 --eval-limit -2", "eval-limit must be >= 0"},
                                         {"--eval-every 1 --eval-dataset spider", "eval-dataset 'spider': expected FORMAT:PATH"},
                                         {"--eval-every 1 --eval-dataset spider:/no/such/data", "/no/such/data"},
                                         {"--eval-every 1 --eval-split nosuchsplit", "nosuchsplit"}}) {
    CliRun r = run_command(str_cat(SQLRL_BINARY, " train --max-steps 1 ", bad.flags, " --out ", out), "eval_bad");
    EXPECT_NE(r.rc, 0) << bad.flags;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(bad.message), std::string::npos) << bad.flags << ": " << r.err;
  }
}

}  // namespace
}  // namespace sqlrl::rl::testing
