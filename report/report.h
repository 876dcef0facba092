// `llm_sqlrl report RUN [RUN...]`: one self-contained HTML file of one or more run folders
// (rl/run_folder.h), opened in a browser without a network: inline SVG charts, inline CSS, no
// script, no font or image fetched. What it holds:
//   curves    one chart per figure of metrics.jsonl (reward, its terms, train and eval EX, format
//             errors, filter counts, turns, lengths, entropy, clip fraction, KL, gradient norm,
//             learning rate, throughput, time per phase, loss), every run overlaid with a legend;
//             raw values faint, TensorBoard's debiased EMA (ema_smooth) solid
//   evals     the table of every RUN/eval/<name>/summary.json (by difficulty; SParC/CoSQL by turn)
//   browser   trajectories.jsonl per step (<details>): question, every turn (thinking collapsed,
//             SQL, observation), the final SQL with a word diff against the gold, reward per
//             term, EX, and why GRPO's filter would drop it
// Every string from a run (a model's text above all) is HTML-escaped (html_escape).
// `--png DIR` renders each chart's SVG to DIR/<chart id>.png through librsvg + cairo
// (report_png.cpp; a build without librsvg refuses it with one line).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace sqlrl {

// One evaluation of a run: RUN/eval/<name>/summary.json; step from "step-N" names (else -1).
struct ReportEval {
  std::string name;
  int64_t step = -1;
  nlohmann::ordered_json summary;
};

struct ReportRun {
  std::string label;  // the legend's name (the folder's name unless given)
  std::string dir;
  std::vector<nlohmann::ordered_json> metrics;       // metrics.jsonl, one object per line
  std::vector<nlohmann::ordered_json> trajectories;  // trajectories.jsonl
  std::vector<ReportEval> evals;             // step-N in step order, then the others by name
};

// Reads a run folder; metrics.jsonl, trajectories.jsonl and eval/ are each optional, but a folder
// with none of them is an error naming it. A line that is not JSON is an error naming file:line.
ReportRun load_report_run(const std::string& dir, const std::string& label = "");

struct ReportSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (step, value), steps ascending, finite values
};
struct ReportChart {
  std::string id;     // file-name safe: DIR/<id>.png
  std::string title;  // also the SVG's <title>
  bool smooth = true; // sparse figures (evaluations) are drawn raw with markers
  std::vector<ReportSeries> series;
};

// The charts with at least one point in some run, in a fixed order; a series per (run, figure),
// labelled "figure" for one run and "run: figure" for several.
std::vector<ReportChart> report_charts(const std::vector<ReportRun>& runs);

// TensorBoard's scalar smoothing (repository tensorflow/tensorboard, classicSmoothing of the
// webapp's line_chart_v2): last = last * w + (1 - w) * x, shown as last / (1 - w^n) after n values
// (debiased, so the curve starts at the first value rather than at 0).
std::vector<double> ema_smooth(const std::vector<double>& values, double weight);
constexpr double kReportSmoothing = 0.6;  // TensorBoard's default weight

// One chart as a standalone SVG document (xmlns set: the same text is inlined in the HTML and
// rasterised for --png). Title, axes with ticks, raw and smoothed lines, legend.
std::string chart_svg(const ReportChart& chart, double smoothing = kReportSmoothing);

std::string html_escape(const std::string& text);

// Word-level diff of `predicted` against `gold` (longest common subsequence over SQL words and
// punctuation): words only in the gold as <del>, only in the prediction as <ins>, escaped.
std::string sql_diff_html(const std::string& gold, const std::string& predicted);

struct ReportOptions {
  std::string title = "llm_sqlrl report";
  double smoothing = kReportSmoothing;
  // Trajectory steps kept per run (evenly spread, the last always kept), so a long run's report
  // stays small; 0 = every step.
  int64_t trajectory_steps = 50;
};
std::string report_html(const std::vector<ReportRun>& runs, const ReportOptions& options = {});

// Each chart's SVG as DIR/<id>.png (librsvg + cairo, 2x the SVG's size). Returns the paths.
std::vector<std::string> write_chart_pngs(const std::vector<ReportChart>& charts, const std::string& dir,
                                          double smoothing = kReportSmoothing);
bool report_png_supported();  // built with librsvg

}  // namespace sqlrl
