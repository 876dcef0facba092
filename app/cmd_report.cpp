// `llm_sqlrl report RUN [RUN...]`: one self-contained HTML page of run folders (report/report.h):
// curves of metrics.jsonl with the runs overlaid, eval tables, a trajectory browser; `--png DIR`
// writes every chart as a PNG too.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "app/commands.h"
#include "report/report.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace sqlrl {

void add_report_command(CLI::App& app) {
  struct Args {
    std::vector<std::string> runs, labels;
    std::string out, png, title = "llm_sqlrl report";
    double smoothing = kReportSmoothing;
    int64_t trajectory_steps = 50;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "report", "An HTML report of run folders (curves, eval tables, trajectory browser), self-contained: no network");
  cmd->add_option("runs", args->runs, "run folders (metrics.jsonl, trajectories.jsonl, eval/*/summary.json); several are overlaid")
      ->required();
  cmd->add_option("--out", args->out, "the HTML file (default: RUN/report.html for one run, report.html for several)");
  cmd->add_option("--label", args->labels, "a legend name per run, in order (default: each folder's name)");
  cmd->add_option("--png", args->png, "also write each chart as DIR/<chart>.png (librsvg)");
  cmd->add_option("--title", args->title, "the page's title")->capture_default_str();
  cmd->add_option("--smoothing", args->smoothing, "TensorBoard's EMA weight for the solid curves, in [0, 1)")
      ->capture_default_str();
  cmd->add_option("--trajectory-steps", args->trajectory_steps,
                  "steps of trajectories shown per run, evenly spread, the last included (0: all)")
      ->capture_default_str();
  cmd->callback([args] {
    check(args->labels.empty() || args->labels.size() == args->runs.size(), "report --label: ", args->labels.size(),
          " labels for ", args->runs.size(), " runs (one per run, in order)");
    check(args->smoothing >= 0 && args->smoothing < 1, "report --smoothing: ", args->smoothing, " is not in [0, 1)");
    check(args->trajectory_steps >= 0, "report --trajectory-steps: ", args->trajectory_steps, " is negative");
    std::vector<ReportRun> runs;
    for (size_t i = 0; i < args->runs.size(); ++i)
      runs.push_back(load_report_run(args->runs[i], args->labels.empty() ? "" : args->labels[i]));
    std::string out = args->out;
    if (out.empty())
      out = runs.size() == 1 ? (std::filesystem::path(args->runs[0]) / "report.html").string() : "report.html";
    ReportOptions options;
    options.title = args->title;
    options.smoothing = args->smoothing;
    options.trajectory_steps = args->trajectory_steps;
    write_text_atomic(out, report_html(runs, options));
    std::printf("report: %s\n", out.c_str());
    if (!args->png.empty()) {
      const auto paths = write_chart_pngs(report_charts(runs), args->png, args->smoothing);
      std::printf("report: %zu charts as PNG in %s\n", paths.size(), args->png.c_str());
    }
  });
}

}  // namespace sqlrl
