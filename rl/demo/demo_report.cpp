// The demo's report.json and its printed tables (rl/demo/demo.h).
#include <cstdio>
#include <type_traits>

#include "rl/demo/demo.h"
#include "runtime/error.h"

namespace sqlrl::rl {
namespace {

const char* stage_label(const std::string& name) {
  if (name == "base") return "base (random init)";
  if (name == "sft") return "SFT (gold demos)";
  if (name == "rl") return "SFT + multi-turn GRPO";
  return name.c_str();
}

std::string fixed(double x, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

std::string pct(double x) { return fixed(100.0 * x, 1); }

const DemoStage& stage(const DemoReport& r, const std::string& name) {
  for (const DemoStage& s : r.stages)
    if (s.name == name) return s;
  fail("demo report: no stage '", name, "'");
}

nlohmann::ordered_json summary_brief(const EvalSummary& s) {
  nlohmann::ordered_json j;
  j["ex"] = s.total.ex();
  j["correct"] = s.total.correct;
  j["n"] = s.total.n;
  nlohmann::ordered_json d = nlohmann::ordered_json::object();
  for (const auto& [label, t] : s.by_difficulty) d[label] = {{"ex", t.ex()}, {"n", t.n}};
  j["by_difficulty"] = d;
  j["avg_turns"] = s.avg_turns;
  j["format_error_rate"] = s.format_error_rate;
  j["executable_rate"] = s.executable_rate;
  return j;
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
  j["seconds"] = r.seconds;
  j["cpu_seconds"] = r.cpu_seconds;
  j["time"] = {{"sft_seconds", r.sft_seconds}, {"rl_seconds", r.rl_seconds}, {"eval_seconds", r.eval_seconds}};
  j["seed"] = r.config.seed;
  j["synth_seed"] = r.config.synth_seed;
  j["protocol"] = r.config.protocol;
  j["device"] = r.config.device;
  j["train_questions"] = r.train_questions;
  j["dev_questions"] = r.dev_questions;
  j["demos"] = r.demos;
  j["params"] = r.params;
  j["sft_loss"] = {{"first", r.sft_first_loss}, {"last", r.sft_last_loss}, {"dev", r.sft_dev_loss}};
  if (!r.config.sft_from.empty()) j["sft_from"] = r.config.sft_from;  // losses 0: not trained here
  j["rl_reward_means"] = r.rl_reward_means;
  if (!r.rl_eval.empty()) {
    nlohmann::ordered_json curve = nlohmann::ordered_json::array();
    for (const auto& [step, ex] : r.rl_eval) curve.push_back({{"step", step}, {"ex", ex}});
    j["rl_eval"] = curve;
    j["rl_best_step"] = r.rl_best_step;
  }
  nlohmann::ordered_json stages = nlohmann::ordered_json::object();
  for (const DemoStage& s : r.stages) stages[s.name] = {{"multi_turn", summary_brief(s.multi)}, {"single_turn", summary_brief(s.single)}};
  j["stages"] = stages;
  DemoSizes z = r.config.sizes;
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
  // Difficulty columns in the evaluator's order (the base stage sees every dev question).
  std::vector<std::string> levels;
  for (const auto& [label, t] : r.stages.front().multi.by_difficulty) levels.push_back(label);
  std::string s = str_cat("EX (%) on the held-out synthetic dev split: ", r.dev_questions,
                          " questions on databases unseen in training, greedy pass@1, multi-turn, protocol ",
                          r.config.protocol, ", seed ", r.config.seed,
                          r.config.device == "cpu" ? "" : ", device " + r.config.device, "\n\n| Model |");
  for (const std::string& l : levels) s += " " + l + " |";
  s += " all | avg turns | format errors |\n|---|";
  for (size_t i = 0; i < levels.size(); ++i) s += "---:|";
  s += "---:|---:|---:|\n";
  for (const DemoStage& st : r.stages) {
    s += str_cat("| ", stage_label(st.name), " |");
    for (const std::string& l : levels) {
      std::string cell = " - |";
      for (const auto& [label, t] : st.multi.by_difficulty)
        if (label == l) cell = str_cat(" ", pct(t.ex()), " (", t.n, ") |");
      s += cell;
    }
    s += str_cat(" ", pct(st.multi.total.ex()), " | ", fixed(st.multi.avg_turns, 2), " | ", pct(st.multi.format_error_rate), "% |\n");
  }
  s += "\nSingle-turn (no execution: the first SQL written is the answer) vs multi-turn, EX (%)\n\n"
       "| Model | single-turn | multi-turn | multi - single |\n|---|---:|---:|---:|\n";
  for (const DemoStage& st : r.stages)
    s += str_cat("| ", stage_label(st.name), " | ", pct(st.single.total.ex()), " | ", pct(st.multi.total.ex()), " | ",
                 pct(st.multi.total.ex() - st.single.total.ex()), " |\n");
  if (!r.rl_eval.empty()) {
    s += "\nDev EX (%) during GRPO (greedy, multi-turn; rl/eval/step-N):";
    for (const auto& [step, ex] : r.rl_eval) s += str_cat(" step ", step, " ", pct(ex), step == r.rl_best_step ? " (best)" : "", ";");
    s.back() = '\n';
  }
  const double margin = stage(r, "rl").multi.total.ex() - stage(r, "sft").multi.total.ex();
  s += str_cat("\nGRPO vs its SFT start (multi-turn dev EX): ", margin >= 0 ? "+" : "", pct(margin), " points. ",
               r.demos, " demonstrations, ", r.params, " parameters; ", static_cast<int64_t>(r.seconds), " s wall, ",
               static_cast<int64_t>(r.cpu_seconds), " s CPU.\n");
  return s;
}

}  // namespace sqlrl::rl
