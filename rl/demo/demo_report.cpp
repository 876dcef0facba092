// The demo's report.json and its printed tables (rl/demo/demo.h).
#include <algorithm>
#include <cstdio>
#include <type_traits>

#include "rl/demo/demo.h"
#include "rl/demo/demo_format.h"
#include "rl/policy.h"
#include "runtime/error.h"

namespace sqlrl::rl {
namespace {

const char* stage_label(const std::string& name) {
  if (name == "base") return "base (random init)";
  if (name == "sft") return "SFT (gold demos)";
  if (name == "rl") return "SFT + multi-turn GRPO";
  if (name == "rl-single") return "SFT + single-turn GRPO";
  return name.c_str();
}

// The stage's label, with its question count when it saw fewer than the others (the base stage:
// DemoSizes::base_dev_limit).
std::string row_label(const DemoReport& r, const DemoStage& st) {
  if (st.multi.total.n == r.dev_questions) return stage_label(st.name);
  return str_cat(stage_label(st.name), ", ", st.multi.total.n, " questions");
}

const DemoStage* find_stage(const DemoReport& r, const std::string& name) {
  for (const DemoStage& s : r.stages)
    if (s.name == name) return &s;
  return nullptr;
}

const DemoStage& stage(const DemoReport& r, const std::string& name) {
  const DemoStage* s = find_stage(r, name);
  check(s != nullptr, "demo report: no stage '", name, "'");
  return *s;
}

nlohmann::ordered_json breakdown_json(const std::vector<std::pair<std::string, Tally>>& rows) {
  nlohmann::ordered_json d = nlohmann::ordered_json::object();
  for (const auto& [label, t] : rows) d[label] = {{"ex", t.ex()}, {"n", t.n}};
  return d;
}

nlohmann::ordered_json summary_brief(const EvalSummary& s) {
  nlohmann::ordered_json j;
  j["ex"] = s.total.ex();
  j["correct"] = s.total.correct;
  j["n"] = s.total.n;
  j["by_difficulty"] = breakdown_json(s.by_difficulty);
  j["by_category"] = breakdown_json(s.by_category);
  j["avg_turns"] = s.avg_turns;
  j["format_error_rate"] = s.format_error_rate;
  j["executable_rate"] = s.executable_rate;
  j["sql_calls_per_trajectory"] = s.sql_calls_per_trajectory;
  // The answer turn (rl/eval/eval.h EvalSummary): copy errors of the answers that followed an
  // executed query; first/last executed query vs the final answer of the trajectories with SQL.
  add_answer_turn_json(j, s);
  return j;
}

// The grid's trained rows: "multi" is the demo's GRPO stage, "single" the single-turn run's.
constexpr std::pair<const char*, const char*> kTrainedStages[] = {{"single", "rl-single"}, {"multi", "rl"}};

// Row labels of a breakdown over every stage and both evaluations, in the evaluator's order (the
// stages evaluate the same questions, so their orders agree; a label one stage lacks goes after).
std::vector<std::string> labels_of(const DemoReport& r,
                                   const std::vector<std::pair<std::string, Tally>> EvalSummary::*rows) {
  std::vector<std::string> labels;
  for (const DemoStage& st : r.stages)
    for (const EvalSummary* s : {&st.multi, &st.single})
      for (const auto& [label, t] : s->*rows)
        if (std::find(labels.begin(), labels.end(), label) == labels.end()) labels.push_back(label);
  return labels;
}

// One row per stage and evaluation (multi-turn first), a column per label: "EX (n)".
std::string breakdown_table(const DemoReport& r, const char* title,
                            const std::vector<std::pair<std::string, Tally>> EvalSummary::*rows) {
  const std::vector<std::string> labels = labels_of(r, rows);
  if (labels.empty()) return "";
  std::string s = str_cat("\n", title, "\n\n| Model | evaluated |");
  for (const std::string& l : labels) s += " " + l + " |";
  s += " all |\n|---|---|";
  for (size_t i = 0; i <= labels.size(); ++i) s += "---:|";
  s += "\n";
  for (const DemoStage& st : r.stages)
    for (const auto& [mode, sum] : {std::pair<const char*, const EvalSummary*>{"multi-turn", &st.multi}, {"single-turn", &st.single}}) {
      s += str_cat("| ", stage_label(st.name), " | ", mode, " |");
      for (const std::string& l : labels) {
        std::string cell = " - |";
        for (const auto& [label, t] : sum->*rows)
          if (label == l) cell = str_cat(" ", pct(t.ex()), " (", t.n, ") |");
        s += cell;
      }
      s += str_cat(" ", pct(sum->total.ex()), " (", sum->total.n, ") |\n");
    }
  return s;
}

}  // namespace

nlohmann::ordered_json demo_report_json(const DemoReport& r) {
  nlohmann::ordered_json j;
  j["dev_ex"] = {{"base", stage(r, "base").multi.total.ex()},
                 {"sft", stage(r, "sft").multi.total.ex()},
                 {"rl", stage(r, "rl").multi.total.ex()}};
  j["single_turn_ex"] = stage(r, "rl").single.total.ex();
  j["multi_turn_ex"] = stage(r, "rl").multi.total.ex();
  j["rl_minus_sft"] = stage(r, "rl").multi.total.ex() - stage(r, "sft").multi.total.ex();
  // SkyRL-SQL's 2x2: grid[trained][evaluated], EX; grid_details the same cells' figures.
  nlohmann::ordered_json grid = nlohmann::ordered_json::object(), details = nlohmann::ordered_json::object();
  for (const auto& [trained, name] : kTrainedStages)
    if (const DemoStage* st = find_stage(r, name)) {
      grid[trained] = {{"single", st->single.total.ex()}, {"multi", st->multi.total.ex()}};
      details[trained] = {{"single", summary_brief(st->single)}, {"multi", summary_brief(st->multi)}};
    }
  j["grid"] = grid;
  j["grid_details"] = details;
  j["seconds"] = r.seconds;
  j["cpu_seconds"] = r.cpu_seconds;
  j["time"] = {{"sft_seconds", r.sft_seconds},
               {"rl_seconds", r.rl_seconds},
               {"rl_single_seconds", r.rl_single_seconds},
               {"eval_seconds", r.eval_seconds}};
  nlohmann::ordered_json phases = nlohmann::ordered_json::array();
  for (const DemoPhase& p : r.phases)
    phases.push_back({{"phase", p.name}, {"seconds", p.seconds}, {"cpu_seconds", p.cpu_seconds}});
  j["phases"] = phases;
  const nlohmann::ordered_json settings = demo_settings_json(r.config);
  for (const auto& [key, value] : settings.items()) j[key] = value;
  j["train_questions"] = r.train_questions;
  j["dev_questions"] = r.dev_questions;
  j["demos"] = r.demos;
  j["params"] = r.params;
  j["sft_loss"] = {{"first", r.sft_first_loss}, {"last", r.sft_last_loss}, {"dev", r.sft_dev_loss}};
  j["rl_reward_means"] = r.rl_reward_means;
  if (!r.rl_single_reward_means.empty()) j["rl_single_reward_means"] = r.rl_single_reward_means;
  if (!r.rl_eval.empty()) {
    nlohmann::ordered_json curve = nlohmann::ordered_json::array();
    for (const auto& [step, ex] : r.rl_eval) curve.push_back({{"step", step}, {"ex", ex}});
    j["rl_eval"] = curve;
    j["rl_best_step"] = r.rl_best_step;
  }
  nlohmann::ordered_json stages = nlohmann::ordered_json::object();
  for (const DemoStage& s : r.stages) stages[s.name] = {{"multi_turn", summary_brief(s.multi)}, {"single_turn", summary_brief(s.single)}};
  j["stages"] = stages;
  return j;
}

nlohmann::ordered_json demo_settings_json(const DemoConfig& c) {
  nlohmann::ordered_json j;
  j["seed"] = c.seed;
  j["synth_seed"] = c.synth_seed;
  j["protocol"] = c.protocol;
  j["device"] = c.device;
  j["train_sets"] = c.train_sets;
  if (!c.sft_from.empty()) j["sft_from"] = c.sft_from;  // SFT losses 0: not trained here
  DemoSizes z = c.sizes;
  nlohmann::ordered_json sizes = nlohmann::ordered_json::object();
  for (const Option& o : demo_size_options(z))
    std::visit(
        [&](auto* p) {
          if constexpr (std::is_arithmetic_v<std::remove_pointer_t<decltype(p)>>) sizes[o.key] = *p;
        },
        o.value);
  j["sizes"] = sizes;
  return j;
}

std::string demo_table(const DemoReport& r) {
  std::string s = str_cat("EX (%) on the held-out synthetic dev split: ", r.dev_questions,
                          " questions on databases unseen in training, greedy pass@1, protocol ", r.config.protocol,
                          ", seed ", r.config.seed, parse_device_type(r.config.device) == DeviceType::CPU ? "" : ", device " + r.config.device,
                          "\n\nTrained x evaluated (SkyRL-SQL's 2x2; single-turn: no execution, the first SQL "
                          "written is the answer)\n\n| Model | evaluated single-turn | evaluated multi-turn | multi - single |"
                          "\n|---|---:|---:|---:|\n");
  for (const DemoStage& st : r.stages)
    s += str_cat("| ", row_label(r, st), " | ", pct(st.single.total.ex()), " | ", pct(st.multi.total.ex()), " | ",
                 pct(st.multi.total.ex() - st.single.total.ex()), " |\n");
  s += breakdown_table(r, "EX (%) by difficulty (questions)", &EvalSummary::by_difficulty);
  s += breakdown_table(r, "EX (%) by trap category (questions)", &EvalSummary::by_category);
  s += "\nThe answer turn: format errors and copy errors (answer != the last executed SQL, % of answers after an "
       "execution); first / last executed query right and the answer wrong, or the reverse (% of samples that "
       "executed SQL)\n\n| Model | evaluated | format errors | avg turns | SQL calls / trajectory | copy errors | "
       "first right -> final wrong | first wrong -> final right | last right -> final wrong |\n"
       "|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  auto share = [](int64_t count, int64_t of, double rate) { return of ? str_cat(pct(rate), " (", count, ")") : std::string("-"); };
  for (const DemoStage& st : r.stages)
    for (const auto& [mode, sum] : {std::pair<const char*, const EvalSummary*>{"multi-turn", &st.multi}, {"single-turn", &st.single}})
      s += str_cat("| ", row_label(r, st), " | ", mode, " | ", pct(sum->format_error_rate), " | ", fixed(sum->avg_turns, 2),
                   " | ", fixed(sum->sql_calls_per_trajectory, 2), " | ",
                   share(sum->copy_errors, sum->copy_checked, sum->copy_error_rate()), " | ",
                   share(sum->first_right_final_wrong, sum->with_sql, sum->rate_of_with_sql(sum->first_right_final_wrong)), " | ",
                   share(sum->first_wrong_final_right, sum->with_sql, sum->rate_of_with_sql(sum->first_wrong_final_right)), " | ",
                   share(sum->last_right_final_wrong, sum->with_sql, sum->rate_of_with_sql(sum->last_right_final_wrong)), " |\n");
  if (!r.rl_eval.empty()) {
    s += "\nDev EX (%) during GRPO (greedy, multi-turn; rl/eval/step-N):";
    for (const auto& [step, ex] : r.rl_eval) s += str_cat(" step ", step, " ", pct(ex), step == r.rl_best_step ? " (best)" : "", ";");
    s.back() = '\n';
  }
  const double margin = stage(r, "rl").multi.total.ex() - stage(r, "sft").multi.total.ex();
  s += str_cat("\nGRPO vs its SFT start (multi-turn dev EX): ", signed_pct(margin), " points");
  if (const DemoStage* single = find_stage(r, "rl-single"))
    s += str_cat("; single-turn GRPO vs SFT (single-turn dev EX): ",
                 signed_pct(single->single.total.ex() - stage(r, "sft").single.total.ex()), " points");
  s += str_cat(". ", r.demos, " demonstrations, ", r.params, " parameters; ", static_cast<int64_t>(r.seconds), " s wall, ",
               static_cast<int64_t>(r.cpu_seconds), " s CPU.\n");
  return s;
}

}  // namespace sqlrl::rl
