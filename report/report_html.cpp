// The report as one HTML document: inline CSS and SVG, <details> for what a reader opens, no
// script. Every string that comes from a run goes through html_escape.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "report/report.h"
#include "runtime/error.h"

namespace sqlrl {
namespace {

const char* kStyle = R"css(
body{font-family:sans-serif;margin:24px auto;padding:0 16px;max-width:1500px;color:#222;background:#fafafa}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}
h3{font-size:15px}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}th{background:#eee}td.n{text-align:right}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:12px}
figure.chart{margin:0;background:#fff;border:1px solid #ddd}figure.chart svg{width:100%;height:auto;display:block}
pre{white-space:pre-wrap;word-break:break-word;background:#f3f3f3;padding:6px;margin:4px 0;font-size:12px;max-height:320px;overflow:auto}
.traj{background:#fff;border:1px solid #ddd;padding:8px 12px;margin:8px 0}
.turn{border-left:3px solid #4e79a7;padding-left:8px;margin:6px 0}
.ok{color:#2a7d2a;font-weight:bold}.bad{color:#b02a2a;font-weight:bold}.note{color:#666;font-size:13px}
ins{background:#d4f7d4;text-decoration:none}del{background:#f7d4d4}
summary{cursor:pointer}
)css";

std::string fmt(const char* format, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}
std::string pct(double x) { return fmt("%.1f", 100.0 * x); }

double number(const nlohmann::ordered_json& j, const char* key, double otherwise = NAN) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : otherwise;
}
std::string text(const nlohmann::ordered_json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "";
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

std::string runs_table(const std::vector<ReportRun>& runs) {
  std::string h =
      "<table><tr><th>run</th><th>folder</th><th>steps</th><th>last reward mean</th><th>last train EX</th>"
      "<th>last eval EX (%)</th><th>best eval EX (%)</th></tr>\n";
  for (const ReportRun& r : runs) {
    const nlohmann::ordered_json last = r.metrics.empty() ? nlohmann::ordered_json::object() : r.metrics.back();
    std::string last_eval = "-", best_eval = "-";
    double best = -1;
    int64_t best_step = 0;
    for (const nlohmann::ordered_json& line : r.metrics)
      if (line.contains("eval") && line["eval"].contains("ex")) {
        const double ex = number(line["eval"], "ex");
        last_eval = pct(ex);
        if (ex > best) best = ex, best_step = static_cast<int64_t>(number(line, "step", 0));
      }
    if (best >= 0) best_eval = str_cat(pct(best), " (step ", best_step, ")");
    auto cell = [&](const char* key) {
      const double v = number(last, key);
      return std::isfinite(v) ? fmt("%.4f", v) : std::string("-");
    };
    h += str_cat("<tr><td>", html_escape(r.label), "</td><td>", html_escape(r.dir), "</td><td class=\"n\">",
                 r.metrics.empty() ? std::string("-") : text(last, "step"), "</td><td class=\"n\">", cell("reward_mean"),
                 "</td><td class=\"n\">", cell("ex"), "</td><td class=\"n\">", last_eval, "</td><td class=\"n\">",
                 best_eval, "</td></tr>\n");
  }
  return h + "</table>\n";
}

// One row per evaluation: EX overall and by difficulty; dialogue sets add per-turn EX.
std::string eval_tables(const ReportRun& run) {
  std::vector<std::string> levels, turn_buckets;
  bool dialogue = false;
  for (const ReportEval& e : run.evals) {
    if (e.summary.contains("by_difficulty") && e.summary["by_difficulty"].is_object())
      for (const auto& [label, t] : e.summary["by_difficulty"].items())
        if (std::find(levels.begin(), levels.end(), label) == levels.end()) levels.push_back(label);
    if (e.summary.contains("by_turn") && e.summary["by_turn"].is_object()) {
      dialogue = true;
      for (const auto& [label, t] : e.summary["by_turn"].items())
        if (std::find(turn_buckets.begin(), turn_buckets.end(), label) == turn_buckets.end()) turn_buckets.push_back(label);
    }
  }
  std::string h = "<table><tr><th>evaluation</th><th>dataset</th><th>mode</th><th>questions</th><th>EX (%)</th><th>EM (%)</th>";
  for (const std::string& l : levels) h += "<th>" + html_escape(l) + " EX (%) (n)</th>";
  h += "<th>format errors (%)</th><th>avg turns</th><th>SQL calls / question</th></tr>\n";
  for (const ReportEval& e : run.evals) {
    const nlohmann::ordered_json& s = e.summary;
    std::string mode = text(s, "mode");
    if (s.value("single_turn", false)) mode += ", single-turn";
    h += str_cat("<tr><td>", html_escape(e.name), "</td><td>", html_escape(text(s, "dataset") + " " + text(s, "split")),
                 "</td><td>", html_escape(mode), "</td><td class=\"n\">", text(s, "questions"), "</td><td class=\"n\">",
                 pct(number(s, "ex", 0)), "</td><td class=\"n\">", pct(number(s, "em", 0)), "</td>");
    for (const std::string& l : levels) {
      std::string cell = "-";
      if (s.contains("by_difficulty") && s["by_difficulty"].contains(l)) {
        const nlohmann::ordered_json& t = s["by_difficulty"][l];
        cell = str_cat(pct(number(t, "ex", 0)), " (", text(t, "n"), ")");
      }
      h += "<td class=\"n\">" + cell + "</td>";
    }
    h += str_cat("<td class=\"n\">", pct(number(s, "format_error_rate", 0)), "</td><td class=\"n\">",
                 fmt("%.2f", number(s, "avg_turns", 0)), "</td><td class=\"n\">",
                 fmt("%.2f", number(s, "sql_calls_per_question", 0)), "</td></tr>\n");
  }
  h += "</table>\n";
  if (dialogue) {
    h += "<p>By dialogue turn (question match EX, %), and interaction match (every turn of a dialogue right):</p>\n"
         "<table><tr><th>evaluation</th>";
    for (const std::string& b : turn_buckets) h += "<th>turn " + html_escape(b) + " (n)</th>";
    h += "<th>interaction EX (%) (n)</th></tr>\n";
    for (const ReportEval& e : run.evals) {
      if (!e.summary.contains("by_turn")) continue;
      h += "<tr><td>" + html_escape(e.name) + "</td>";
      for (const std::string& b : turn_buckets) {
        std::string cell = "-";
        if (e.summary["by_turn"].contains(b)) {
          const nlohmann::ordered_json& t = e.summary["by_turn"][b];
          cell = str_cat(pct(number(t, "ex", 0)), " (", text(t, "n"), ")");
        }
        h += "<td class=\"n\">" + cell + "</td>";
      }
      const nlohmann::ordered_json im = e.summary.value("interaction_match", nlohmann::ordered_json::object());
      h += str_cat("<td class=\"n\">", pct(number(im, "ex", 0)), " (", text(im, "n"), ")</td></tr>\n");
    }
    h += "</table>\n";
  }
  return h;
}

// Why GRPO's filter (rl/grpo/grpo.h GrpoFilterConfig, each reason on by default) drops this
// trajectory, from what trajectories.jsonl records; the first reason counts, as the filter's
// counts do. Zero-variance groups are a property of the whole group: counted per step only.
std::string filter_reason(const nlohmann::ordered_json& t) {
  if (t.contains("infra_failure")) return "infrastructure failure: " + text(t, "infra_failure");
  if (t.value("truncated", false)) return "truncated (token cap)";
  bool invalid = false, valid = false;
  if (t.contains("turns") && t["turns"].is_array())
    for (const nlohmann::ordered_json& turn : t["turns"]) {
      const std::string a = text(turn, "action");
      invalid |= a == "invalid";
      valid |= a == "exec_sql" || a == "memory_retrieve" || a == "answer";
    }
  if (invalid) return "malformed (an invalid action)";
  if (!valid) return "no valid action";
  return "";
}

std::string trajectory_html(const nlohmann::ordered_json& t) {
  const bool ex = number(t, "ex", 0) > 0;
  const std::string reason = filter_reason(t);
  std::string h = "<div class=\"traj\">\n";
  h += str_cat("<h4>", html_escape(text(t, "example_id")), " (", html_escape(text(t, "db_id")), "), sample ",
               html_escape(text(t, "sample")), ": reward ", fmt("%.4g", number(t, "reward", 0)), ", ",
               ex ? "<span class=\"ok\">EX 1</span>" : "<span class=\"bad\">EX 0</span>", ", ",
               reason.empty() ? std::string("kept by the filter") : "<span class=\"bad\">filtered: " + html_escape(reason) + "</span>",
               "</h4>\n");
  h += "<p><b>Question:</b> " + html_escape(text(t, "question")) + "</p>\n";
  if (t.contains("reward_terms") && t["reward_terms"].is_object() && !t["reward_terms"].empty()) {
    h += "<table><tr>";
    for (const auto& [k, v] : t["reward_terms"].items()) h += "<th>" + html_escape(k) + "</th>";
    h += "</tr><tr>";
    for (const auto& [k, v] : t["reward_terms"].items())
      h += "<td class=\"n\">" + (v.is_number() ? fmt("%.4g", v.get<double>()) : html_escape(v.dump())) + "</td>";
    h += "</tr></table>\n";
  }
  if (t.contains("turns") && t["turns"].is_array()) {
    int64_t i = 0;
    for (const nlohmann::ordered_json& turn : t["turns"]) {
      ++i;
      std::string what = text(turn, "action");
      if (turn.contains("rows")) what += turn.value("sql_error", false) ? ", SQL error" : str_cat(", ", text(turn, "rows"), " rows");
      if (turn.contains("error")) what += ", " + text(turn, "error");
      h += str_cat("<div class=\"turn\"><details><summary>turn ", i, ": ", html_escape(what),
                   " (thinking and full text)</summary><pre>", html_escape(text(turn, "text")), "</pre></details>\n");
      if (turn.contains("sql")) h += "<pre>" + html_escape(text(turn, "sql")) + "</pre>\n";
      if (!text(turn, "observation").empty())
        h += "<details open><summary>observation</summary><pre>" + html_escape(text(turn, "observation")) + "</pre></details>\n";
      h += "</div>\n";
    }
  }
  const std::string final_sql = text(t, "final_sql"), gold = text(t, "gold_sql");
  h += "<p><b>Final SQL:</b></p><pre>" + html_escape(final_sql.empty() ? "(no answer)" : final_sql) + "</pre>\n";
  h += "<p><b>Gold:</b></p><pre>" + html_escape(gold) + "</pre>\n";
  h += "<p><b>Diff, final against gold</b> (<del>gold only</del> <ins>final only</ins>):</p><pre>" +
       sql_diff_html(gold, final_sql) + "</pre>\n";
  return h + "</div>\n";
}

std::string trajectory_browser(const ReportRun& run, int64_t keep_steps) {
  std::map<int64_t, std::vector<const nlohmann::ordered_json*>> by_step;
  for (const nlohmann::ordered_json& t : run.trajectories) by_step[static_cast<int64_t>(number(t, "step", 0))].push_back(&t);
  std::vector<int64_t> steps;
  for (const auto& [s, v] : by_step) steps.push_back(s);
  std::vector<int64_t> kept = steps;
  if (keep_steps > 0 && static_cast<int64_t>(steps.size()) > keep_steps) {
    kept.clear();
    const int64_t n = static_cast<int64_t>(steps.size());
    // First and last always; keep_steps 1: the last.
    for (int64_t k = 0; k < keep_steps; ++k)
      kept.push_back(steps[static_cast<size_t>(keep_steps == 1 ? n - 1 : k * (n - 1) / (keep_steps - 1))]);
    kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
  }
  std::string h;
  if (kept.size() < steps.size())
    h += str_cat("<p class=\"note\">", kept.size(), " of ", steps.size(),
                 " steps shown, evenly spread (report --trajectory-steps).</p>\n");
  for (int64_t step : kept) {
    const auto& ts = by_step[step];
    double reward = 0, ex = 0;
    for (const nlohmann::ordered_json* t : ts) reward += number(*t, "reward", 0), ex += number(*t, "ex", 0);
    h += str_cat("<details><summary>step ", step, ": ", ts.size(), " trajectories, mean reward ",
                 fmt("%.3f", reward / static_cast<double>(ts.size())), ", EX ", static_cast<int64_t>(ex), "/", ts.size(),
                 "</summary>\n");
    for (const nlohmann::ordered_json* t : ts) h += trajectory_html(*t);
    h += "</details>\n";
  }
  return h;
}

}  // namespace

std::string report_html(const std::vector<ReportRun>& runs, const ReportOptions& options) {
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
                  html_escape(options.title) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  h += "<h1>" + html_escape(options.title) + "</h1>\n";
  h += runs_table(runs);
  const std::vector<ReportChart> charts = report_charts(runs);
  h += str_cat("<h2>Curves</h2>\n<p class=\"note\">x: optimizer step. Faint: the logged value; solid: TensorBoard's "
               "debiased exponential moving average, weight ",
               fmt("%.2f", options.smoothing), " (evaluations are drawn unsmoothed). From metrics.jsonl.</p>\n");
  h += "<div class=\"charts\">\n";
  for (const ReportChart& c : charts)
    h += "<figure class=\"chart\" id=\"chart-" + c.id + "\">\n" + chart_svg(c, options.smoothing) + "</figure>\n";
  h += "</div>\n";
  bool any_eval = false, any_traj = false;
  for (const ReportRun& r : runs) any_eval |= !r.evals.empty(), any_traj |= !r.trajectories.empty();
  if (any_eval) {
    h += "<h2>Evaluations</h2>\n";
    for (const ReportRun& r : runs)
      if (!r.evals.empty()) h += "<h3>" + html_escape(r.label) + " (eval/*/summary.json)</h3>\n" + eval_tables(r);
  }
  if (any_traj) {
    h += "<h2>Trajectories</h2>\n<p class=\"note\">The sampled trajectories of each step (trajectories.jsonl); open a "
         "step, then a turn's full text. \"filtered\" names the first reason GRPO's filter drops a trajectory for; "
         "zero-variance groups are counted per step only (chart above).</p>\n";
    for (const ReportRun& r : runs)
      if (!r.trajectories.empty()) h += "<h3>" + html_escape(r.label) + "</h3>\n" + trajectory_browser(r, options.trajectory_steps);
  }
  return h + "</body>\n</html>\n";
}

}  // namespace sqlrl
