// The evaluation's three outputs: summary.json (numbers), summary.md (the paper-style tables)
// and examples.jsonl (one line per question for error analysis). Everything except the fields
// named "seconds" / the "time" object repeats bit for bit with the same seed and build.
#include <cstdio>
#include <filesystem>

#include "rl/eval/eval.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace fs = std::filesystem;

namespace sqlrl::rl {

namespace {

nlohmann::ordered_json tally_json(const Tally& t) {
  return {{"n", t.n},          {"ex", t.ex()},   {"correct", t.correct},
          {"em", t.em_rate()}, {"em_n", t.em_n}, {"em_correct", t.em}};
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", 100.0 * x);
  return buf;
}

std::string fixed(double x, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

// "82.4" or "-" where no question has a parsable gold.
std::string em_cell(const Tally& t) { return t.em_n ? pct(t.em_rate()) : "-"; }

}  // namespace

void add_answer_turn_json(nlohmann::ordered_json& j, const EvalSummary& s) {
  j["copy_checked"] = s.copy_checked;
  j["copy_errors"] = s.copy_errors;
  j["copy_error_rate"] = s.copy_error_rate();
  j["trajectories_with_sql"] = s.with_sql;
  j["first_right_final_wrong"] = s.first_right_final_wrong;
  j["first_right_final_wrong_rate"] = s.rate_of_with_sql(s.first_right_final_wrong);
  j["first_wrong_final_right"] = s.first_wrong_final_right;
  j["first_wrong_final_right_rate"] = s.rate_of_with_sql(s.first_wrong_final_right);
  j["last_right_final_wrong"] = s.last_right_final_wrong;
  j["last_right_final_wrong_rate"] = s.rate_of_with_sql(s.last_right_final_wrong);
}

nlohmann::ordered_json summary_json(const EvalRun& run, const EvalOptions& options, const EvalInfo& info) {
  const EvalSummary& s = run.summary;
  nlohmann::ordered_json j;
  j["dataset"] = info.dataset;
  j["split"] = info.split;
  j["weights"] = info.weights;
  if (!info.adapter.empty()) j["adapter"] = info.adapter;  // summaries without one keep their bytes
  j["protocol"] = info.protocol;
  j["compare"] = info.compare;
  j["mode"] = eval_mode_name(options.mode);
  j["single_turn"] = options.single_turn;
  j["samples"] = options.samples;
  j["temperature"] = options.mode == EvalMode::Greedy ? 0.0 : options.rollout.sampling.temperature;
  j["top_p"] = options.rollout.sampling.top_p;
  j["seed"] = info.seed;
  j["device"] = info.device;
  j["questions"] = s.total.n;
  j["ex"] = s.total.ex();
  j["correct"] = s.total.correct;
  j["em"] = s.total.em_rate();
  j["em_n"] = s.total.em_n;
  nlohmann::ordered_json pass = nlohmann::ordered_json::object();
  for (const auto& [k, v] : s.pass_at) pass[std::to_string(k)] = v;
  j["pass_at"] = pass;
  if (s.samples > 1) j["vote_ex"] = s.vote_ex;
  j["answered_rate"] = s.answered_rate;
  j["executable_rate"] = s.executable_rate;
  j["format_error_rate"] = s.format_error_rate;
  j["avg_turns"] = s.avg_turns;
  j["sql_calls_per_question"] = s.sql_calls_per_question;
  j["sql_calls_per_trajectory"] = s.sql_calls_per_trajectory;
  j["gold_errors"] = s.gold_errors;
  j["infra_failures"] = s.infra_failures;
  add_answer_turn_json(j, s);
  nlohmann::ordered_json diff = nlohmann::ordered_json::object();
  for (const auto& [label, t] : s.by_difficulty) diff[label] = tally_json(t);
  j["by_difficulty"] = diff;
  if (!s.by_category.empty()) {
    nlohmann::ordered_json cat = nlohmann::ordered_json::object();
    for (const auto& [label, t] : s.by_category) cat[label] = tally_json(t);
    j["by_category"] = cat;
  }
  if (s.dialogue) {
    nlohmann::ordered_json turns = nlohmann::ordered_json::object();
    for (const auto& [bucket, t] : s.by_turn) turns[bucket] = tally_json(t);
    j["by_turn"] = turns;
    j["question_match"] = {{"ex", s.total.ex()}, {"em", s.total.em_rate()}, {"n", s.total.n}};
    j["interaction_match"] = {{"ex", s.interactions.ex()}, {"em", s.interactions.em_rate()}, {"n", s.interactions.n}};
  }
  j["tokens"] = {{"prompt", run.stats.prompt_tokens},
                 {"sampled", run.stats.sampled_tokens},
                 {"injected", run.stats.injected_tokens}};
  j["time"] = {{"seconds", run.seconds},
               {"seconds_per_question", s.total.n ? run.seconds / static_cast<double>(s.total.n) : 0.0},
               {"mean_question_latency", s.mean_question_seconds},
               {"decode_seconds", run.stats.decode_seconds},
               {"prefill_seconds", run.stats.prefill_seconds},
               // How much prompt the prefills ran (prompts admitted together share stretches):
               // like the seconds, it depends on how questions were batched (and split over ranks).
               {"prefilled_tokens", run.stats.prefill_tokens},
               {"sql_seconds", run.stats.sql_seconds}};
  return j;
}

std::string summary_markdown(const EvalRun& run, const EvalOptions& options, const EvalInfo& info) {
  const EvalSummary& s = run.summary;
  std::string mode = eval_mode_name(options.mode);
  if (options.samples > 1) mode += "@" + std::to_string(options.samples);
  std::string md = "# eval: " + info.dataset + " (" + info.split + "), protocol " + info.protocol + ", " +
                   (options.single_turn ? "single-turn" : "multi-turn") + ", " + mode + ", EX " + info.compare + "\n\n";
  md += "| questions | EX | EM | pass@1";
  if (s.samples > 1) md += " | pass@" + std::to_string(s.samples) + " | vote EX";
  md += " | avg turns | format errors | SQL calls / question | executable |\n|---:|---:|---:|---:";
  if (s.samples > 1) md += "|---:|---:";
  md += "|---:|---:|---:|---:|\n";
  md += "| " + std::to_string(s.total.n) + " | " + pct(s.total.ex()) + " | " + em_cell(s.total) + " | " +
        pct(s.pass_at.front().second);
  if (s.samples > 1) md += " | " + pct(s.pass_at.back().second) + " | " + pct(s.vote_ex);
  md += " | " + fixed(s.avg_turns, 2) + " | " + pct(s.format_error_rate) + " | " + fixed(s.sql_calls_per_question, 2) +
        " | " + pct(s.executable_rate) + " |\n";
  md += "\nEX, EM, pass@k, vote EX: % of questions; format errors, executable: % of samples; avg turns: per sample.\n";

  auto breakdown = [&](const char* title, const std::vector<std::pair<std::string, Tally>>& rows) {
    md += "\n| " + std::string(title) + " | n | EX | EM |\n|---|---:|---:|---:|\n";
    for (const auto& [label, t] : rows)
      md += "| " + label + " | " + std::to_string(t.n) + " | " + pct(t.ex()) + " | " + em_cell(t) + " |\n";
    md += "| all | " + std::to_string(s.total.n) + " | " + pct(s.total.ex()) + " | " + em_cell(s.total) + " |\n";
  };
  breakdown("difficulty", s.by_difficulty);
  if (!s.by_category.empty()) breakdown("category", s.by_category);  // its rows need not cover every question
  if (s.with_sql)
    md += "\nanswer turn (% of samples that executed SQL, " + std::to_string(s.with_sql) + "): first right -> final wrong " +
          pct(s.rate_of_with_sql(s.first_right_final_wrong)) + ", first wrong -> final right " +
          pct(s.rate_of_with_sql(s.first_wrong_final_right)) + ", last right -> final wrong " +
          pct(s.rate_of_with_sql(s.last_right_final_wrong)) + "; copy errors (answer != last executed SQL) " +
          pct(s.copy_error_rate()) + "% of " + std::to_string(s.copy_checked) + " answers; SQL calls / sample " +
          fixed(s.sql_calls_per_trajectory, 2) + "\n";
  if (s.dialogue) {
    breakdown("turn", s.by_turn);
    md += "\nquestion match: EX " + pct(s.total.ex()) + ", EM " + em_cell(s.total) + " (" + std::to_string(s.total.n) +
          " questions); interaction match: EX " + pct(s.interactions.ex()) + ", EM " + pct(s.interactions.em_rate()) +
          " (" + std::to_string(s.interactions.n) + " dialogues)\n";
  }
  if (s.gold_errors) md += "\n" + std::to_string(s.gold_errors) + " gold queries failed to run (counted wrong)\n";
  if (s.infra_failures)
    md += "\n" + std::to_string(s.infra_failures) +
          " trajectories hit an infrastructure failure (a database could not be read, or the wall clock fired "
          "under a step budget); scored as they came out\n";
  return md;
}

std::string examples_jsonl(const std::vector<sql::Example>& examples, const EvalRun& run) {
  std::string out;
  for (const ExampleResult& r : run.results) {
    const sql::Example& ex = examples[r.example_index];
    const SampleOutcome& c = r.samples[static_cast<size_t>(r.chosen)];
    nlohmann::ordered_json j;
    j["id"] = ex.id;
    j["db_id"] = ex.db_id;
    j["question"] = ex.question;
    j["gold"] = ex.gold_sql;
    j["prediction"] = r.prediction;
    j["correct"] = r.correct;
    j["em"] = r.gold_parsed ? nlohmann::ordered_json(r.em) : nlohmann::ordered_json(nullptr);
    j["turns"] = c.turns;
    j["sql_calls"] = c.sql_calls;
    j["format_ok"] = c.format_ok;
    j["seconds"] = r.seconds;
    j["difficulty"] = ex.difficulty;
    if (!ex.category.empty()) j["category"] = ex.category;
    j["turn"] = ex.turn_index + 1;
    j["executable"] = c.executable;
    j["samples"] = static_cast<int64_t>(r.samples.size());
    j["samples_correct"] = r.num_correct;
    j["chosen"] = r.chosen;
    j["votes"] = r.votes;
    if (r.gold_error) j["gold_error"] = true;
    if (c.infra_failure) j["infra_failure"] = true;
    if (c.copy_checked) j["copy_error"] = c.copy_error;
    if (c.executed_sql) j["first_sql_correct"] = c.first_ex;
    nlohmann::ordered_json actions = nlohmann::ordered_json::array();
    for (const TurnRecord& t : r.turns) {
      nlohmann::ordered_json a = {{"action", action_kind_name(t.action.kind)}};
      if (!t.action.sql.empty()) a["sql"] = t.action.sql;
      if (!t.action.error.empty()) a["error"] = t.action.error;
      if (t.executed) {
        a["sql_error"] = t.sql_error;
        a["rows"] = t.rows;
      }
      actions.push_back(std::move(a));
    }
    j["actions"] = std::move(actions);
    // Invalid UTF-8 in a model's text is replaced, not an exception.
    out += j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  }
  return out;
}

void write_eval_outputs(const std::string& dir, const std::vector<sql::Example>& examples, const EvalRun& run,
                        const EvalOptions& options, const EvalInfo& info) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec && fs::is_directory(dir), "eval: cannot create output folder ", dir, ec ? ": " + ec.message() : "");
  write_text_atomic((fs::path(dir) / "examples.jsonl").string(), examples_jsonl(examples, run));
  write_text_atomic((fs::path(dir) / "summary.md").string(), summary_markdown(run, options, info));
  write_text_atomic(
      (fs::path(dir) / "summary.json").string(),
      summary_json(run, options, info).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
}

}  // namespace sqlrl::rl
