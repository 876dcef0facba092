// `llm_sqlrl report` (rl/report/report.h) on the committed run folder tests/fixtures/report_run
// (`train --max-steps 6 --eval-every 3` of the embedded default, trajectories trimmed).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "report/report.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "tests/test_util.h"

#ifdef SQLRL_HAVE_GUMBO
#include <gumbo.h>
#endif

namespace sqlrl {
namespace {
namespace fs = std::filesystem;

std::string fixture_run() { return testing::fixture_path("report_run"); }

fs::path scratch(const std::string& name) {
  fs::path p = sqlrl::testing::process_temp_path("sqlrl_report_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string fmt(const char* format, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

// The last metrics line of the fixture, read here with the JSON library only.
nlohmann::json last_metrics_line() {
  std::ifstream in(fixture_run() + "/metrics.jsonl");
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return nlohmann::json::parse(last);
}

TEST(Report, EmaSmoothingIsTensorBoardsDebiasedEma) {
  // By hand from last = w*last + (1-w)*x, shown / (1 - w^n):
  // w 0.5, [1, 0]: 0.5/0.5 = 1; 0.25/0.75 = 1/3.
  std::vector<double> a = ema_smooth({1, 0}, 0.5);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_DOUBLE_EQ(a[0], 1.0);
  EXPECT_NEAR(a[1], 1.0 / 3.0, 1e-15);  // a few float64 roundings of numbers near 1
  // w 0.6, [2, 4, 8]: 0.8/0.4 = 2; 2.08/0.64 = 3.25; 4.448/0.784.
  std::vector<double> b = ema_smooth({2, 4, 8}, 0.6);
  EXPECT_NEAR(b[0], 2.0, 1e-14);
  EXPECT_NEAR(b[1], 3.25, 1e-14);
  EXPECT_NEAR(b[2], 4.448 / 0.784, 1e-13);
  // w 0 is no smoothing; a NaN passes through and does not poison what follows.
  EXPECT_EQ(ema_smooth({3, 5}, 0.0), (std::vector<double>{3, 5}));
  std::vector<double> c = ema_smooth({1, NAN, 1}, 0.6);
  EXPECT_TRUE(std::isnan(c[1]));
  EXPECT_NEAR(c[2], 1.0, 1e-14);
}

TEST(Report, SqlDiffMarksOnlyTheChangedWords) {
  const std::string d = sql_diff_html("SELECT name FROM singer WHERE age > 30", "select name FROM singer WHERE age > 40");
  EXPECT_NE(d.find("<del>30</del>"), std::string::npos) << d;
  EXPECT_NE(d.find("<ins>40</ins>"), std::string::npos) << d;
  // Keywords compare case-insensitively; '>' is escaped, not a tag.
  EXPECT_EQ(d.find("<del>SELECT"), std::string::npos) << d;
  EXPECT_NE(d.find("age &gt; "), std::string::npos) << d;
  // String literals compare exactly.
  const std::string s = sql_diff_html("SELECT a FROM t WHERE b = 'Ab'", "SELECT a FROM t WHERE b = 'ab'");
  EXPECT_NE(s.find("<del>&#39;Ab&#39;</del>"), std::string::npos) << s;
  EXPECT_NE(s.find("<ins>&#39;ab&#39;</ins>"), std::string::npos) << s;
}

TEST(Report, ChartsOfTheFixtureHoldItsNumbers) {
  const ReportRun run = load_report_run(fixture_run());
  const std::vector<ReportChart> charts = report_charts({run});
  auto find = [&](const std::string& id) -> const ReportChart* {
    for (const ReportChart& c : charts)
      if (c.id == id) return &c;
    return nullptr;
  };
  for (const char* id : {"reward", "reward_terms", "train_ex", "eval_ex", "format_errors", "filtered", "turns",
                         "tokens_per_turn", "response_length", "entropy", "clip_fraction", "kl", "grad_norm", "lr",
                         "throughput", "time"})
    EXPECT_NE(find(id), nullptr) << id;
  const nlohmann::json last = last_metrics_line();
  const ReportChart* reward = find("reward");
  ASSERT_NE(reward, nullptr);
  ASSERT_EQ(reward->series[0].label, "reward mean");
  EXPECT_EQ(reward->series[0].points.size(), run.metrics.size());
  EXPECT_EQ(reward->series[0].points.back().first, last["step"].get<double>());
  EXPECT_EQ(reward->series[0].points.back().second, last["reward_mean"].get<double>());
  // Eval EX: one point per evaluated step, at the step.
  const ReportChart* eval = find("eval_ex");
  ASSERT_NE(eval, nullptr);
  EXPECT_EQ(eval->series[0].points.back().second, last["eval"]["ex"].get<double>());
  EXPECT_EQ(eval->series[0].points.size(), run.evals.size());
  // Tokens per turn is the ratio of two logged means.
  const ReportChart* tpt = find("tokens_per_turn");
  ASSERT_NE(tpt, nullptr);
  EXPECT_DOUBLE_EQ(tpt->series[0].points.back().second,
                   last["generated_tokens_mean"].get<double>() / last["turns_mean"].get<double>());
  // Two runs: a series per run, named "run: figure".
  const ReportRun other = load_report_run(fixture_run(), "seed 2");
  const std::vector<ReportChart> both = report_charts({run, other});
  EXPECT_EQ(both[0].series.size(), 2 * charts[0].series.size());
  EXPECT_EQ(both[0].series[0].label, "report_run: reward mean");
}

#ifdef SQLRL_HAVE_GUMBO
void walk(const GumboNode* node, const std::function<void(const GumboNode*)>& visit) {
  visit(node);
  if (node->type != GUMBO_NODE_ELEMENT && node->type != GUMBO_NODE_DOCUMENT) return;
  const GumboVector& children =
      node->type == GUMBO_NODE_ELEMENT ? node->v.element.children : node->v.document.children;
  for (unsigned i = 0; i < children.length; ++i) walk(static_cast<const GumboNode*>(children.data[i]), visit);
}

struct Parsed {
  int svg = 0, figures = 0, script = 0, errors = 0;
  std::vector<std::string> external;  // src / href attributes (there should be none)
  std::string text;                   // every text node, joined by spaces
  std::vector<std::string> element_names;
};

Parsed parse_html(const std::string& html) {
  Parsed p;
  GumboOutput* out = gumbo_parse_with_options(&kGumboDefaultOptions, html.data(), html.size());
  p.errors = static_cast<int>(out->errors.length);
  walk(out->document, [&](const GumboNode* n) {
    if (n->type == GUMBO_NODE_TEXT) p.text += std::string(n->v.text.text) + " ";
    if (n->type != GUMBO_NODE_ELEMENT) return;
    const GumboElement& e = n->v.element;
    const std::string name = e.tag == GUMBO_TAG_UNKNOWN ? "?" : gumbo_normalized_tagname(e.tag);
    p.element_names.push_back(name);
    if (e.tag == GUMBO_TAG_SVG && e.tag_namespace == GUMBO_NAMESPACE_SVG) ++p.svg;
    if (e.tag == GUMBO_TAG_SCRIPT) ++p.script;
    if (e.tag == GUMBO_TAG_FIGURE) ++p.figures;
    for (const char* attr : {"src", "href", "xlink:href"})
      if (const GumboAttribute* a = gumbo_get_attribute(&e.attributes, attr)) p.external.push_back(a->value);
  });
  gumbo_destroy_output(&kGumboDefaultOptions, out);
  return p;
}
#endif

// An --async run's staleness gets its chart, unsmoothed (0, then 1); a synchronous run (the
// fixture's) logs none and gets none.
TEST(Report, AnAsyncRunChartsItsStaleness) {
  ReportRun run = load_report_run(fixture_run());
  auto staleness = [](const std::vector<ReportChart>& charts) -> const ReportChart* {
    for (const ReportChart& c : charts)
      if (c.id == "staleness") return &c;
    return nullptr;
  };
  EXPECT_EQ(staleness(report_charts({run})), nullptr);
  ASSERT_GE(run.metrics.size(), 2u);
  for (size_t i = 0; i < run.metrics.size(); ++i) run.metrics[i]["staleness"] = i == 0 ? 0 : 1;
  const std::vector<ReportChart> charts = report_charts({run});
  const ReportChart* c = staleness(charts);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->series.size(), 1u);
  ASSERT_EQ(c->series[0].points.size(), run.metrics.size());
  EXPECT_EQ(c->series[0].points[0].second, 0.0);
  EXPECT_EQ(c->series[0].points.back().second, 1.0);
  // --partial-rollout: the mean over the sampled tokens beside it.
  for (size_t i = 0; i < run.metrics.size(); ++i) run.metrics[i]["staleness_mean"] = i == 0 ? 0.0 : 0.75;
  const std::vector<ReportChart> partial = report_charts({run});
  ASSERT_NE(staleness(partial), nullptr);
  ASSERT_EQ(staleness(partial)->series.size(), 2u);
  EXPECT_EQ(staleness(partial)->series[1].points.back().second, 0.75);
}

// A --rollout-ranks run charts each side's idle fraction; the fixture's run (no rollout ranks)
// gets no such chart.
TEST(Report, ARunWithRolloutRanksChartsItsIdleFractions) {
  ReportRun run = load_report_run(fixture_run());
  auto idle = [](const std::vector<ReportChart>& charts) -> const ReportChart* {
    for (const ReportChart& c : charts)
      if (c.id == "idle") return &c;
    return nullptr;
  };
  EXPECT_EQ(idle(report_charts({run})), nullptr);
  for (size_t i = 0; i < run.metrics.size(); ++i) {
    run.metrics[i]["time"]["trainer_idle_fraction"] = 0.25;
    run.metrics[i]["time"]["rollout_idle_fraction"] = 0.5;
  }
  const std::vector<ReportChart> charts = report_charts({run});
  const ReportChart* c = idle(charts);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->series.size(), 2u);
  EXPECT_EQ(c->series[0].points.back().second, 0.25);
  EXPECT_EQ(c->series[1].points.back().second, 0.5);
}

TEST(Report, HtmlParsesWithOneSvgPerChartAndTheFixturesNumbers) {
#ifndef SQLRL_HAVE_GUMBO
  GTEST_SKIP() << "built without gumbo (Debian libgumbo-dev): the HTML parser test needs it";
#else
  const ReportRun run = load_report_run(fixture_run());
  const std::string html = report_html({run});
  const Parsed p = parse_html(html);
  EXPECT_EQ(p.errors, 0) << "the HTML5 parser reported errors";
  const size_t charts = report_charts({run}).size();
  EXPECT_GE(charts, 16u);
  EXPECT_EQ(static_cast<size_t>(p.svg), charts);
  EXPECT_EQ(static_cast<size_t>(p.figures), charts);
  EXPECT_EQ(p.script, 0);
  EXPECT_TRUE(p.external.empty()) << p.external.front();
  // The fixture's numbers, formatted here from its files.
  const nlohmann::json last = last_metrics_line();
  EXPECT_NE(p.text.find(fmt("%.4f", last["reward_mean"].get<double>())), std::string::npos);
  EXPECT_NE(p.text.find(fmt("%.4f", last["ex"].get<double>())), std::string::npos);
  const nlohmann::json summary = nlohmann::json::parse(read_file_text(fixture_run() + "/eval/step-3/summary.json"));
  const std::string ex = fmt("%.1f", 100 * summary["ex"].get<double>());
  EXPECT_NE(p.text.find("step-3"), std::string::npos);
  EXPECT_NE(p.text.find(ex), std::string::npos) << ex;
  for (const auto& [label, t] : summary["by_difficulty"].items())
    EXPECT_NE(p.text.find(fmt("%.1f", 100 * t["ex"].get<double>()) + " (" + std::to_string(t["n"].get<int64_t>()) + ")"),
              std::string::npos)
        << label;
  // The trajectory browser holds every trajectory's question.
  for (const auto& t : run.trajectories)
    EXPECT_NE(p.text.find(t["question"].get<std::string>()), std::string::npos);
#endif
}

TEST(Report, RunTextIsEscaped) {
  ReportRun run;
  run.label = "<i>run</i>";
  run.dir = "x";
  // An untrained model's text holds control bytes and broken UTF-8, which HTML5 calls parse errors.
  EXPECT_EQ(html_escape("a\x01" "b\xff" "c\xc3\xa9\t\n"), "a\u2401" "b\ufffd" "c\u00e9\t\n");
  const std::string evil = "</script><b>bold</b><img src=http://x/y.png>\x13\xc3";
  run.metrics.push_back({{"step", 1}, {"reward_mean", 0.5}, {"reward_terms", {{evil, 0.25}}}});
  run.trajectories.push_back({{"step", 1},
                              {"example_id", evil},
                              {"question", evil},
                              {"gold_sql", "SELECT 1"},
                              {"final_sql", evil},
                              {"turns", {{{"text", evil}, {"action", "answer"}, {"sql", evil}, {"observation", evil}}}},
                              {"reward", 1},
                              {"ex", 1},
                              {"reward_terms", {{evil, 1.0}}}});
  run.evals.push_back({evil, -1, {{"dataset", evil}, {"by_difficulty", {{evil, {{"n", 1}, {"ex", 1.0}}}}}}});
  const std::string html = report_html({run});
  EXPECT_EQ(html.find("</script><b>"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<i>run"), std::string::npos);
  EXPECT_NE(html.find("&lt;/script&gt;&lt;b&gt;"), std::string::npos);
#ifdef SQLRL_HAVE_GUMBO
  const Parsed p = parse_html(html);
  EXPECT_EQ(p.errors, 0);
  EXPECT_TRUE(p.external.empty());
  for (const std::string& name : p.element_names) EXPECT_TRUE(name != "img" && name != "i" && name != "script") << name;
#endif
}

// PNG: 8-byte signature, then the IHDR chunk's big-endian width and height.
uint32_t be32(const std::string& b, size_t at) {
  return (uint32_t(uint8_t(b[at])) << 24) | (uint32_t(uint8_t(b[at + 1])) << 16) | (uint32_t(uint8_t(b[at + 2])) << 8) |
         uint32_t(uint8_t(b[at + 3]));
}

// The number in `attr="N"` of the SVG's root element.
double svg_attr(const std::string& svg, const std::string& attr) {
  const size_t at = svg.find(" " + attr + "=\"");
  return std::stod(svg.substr(at + attr.size() + 3));
}

TEST(Report, PngPerChartThroughLibrsvg) {
  if (!report_png_supported()) GTEST_SKIP() << "built without librsvg (Debian librsvg2-dev): report --png is off";
  const ReportRun run = load_report_run(fixture_run());
  const std::vector<ReportChart> charts = report_charts({run});
  const fs::path dir = scratch("png");
  const std::vector<std::string> paths = write_chart_pngs(charts, dir.string());
  ASSERT_EQ(paths.size(), charts.size());
  for (size_t i = 0; i < charts.size(); ++i) {
    const std::string bytes = read_file_text(paths[i]);
    ASSERT_GT(bytes.size(), 33u) << paths[i];
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << paths[i];
    EXPECT_EQ(bytes.substr(12, 4), "IHDR");
    const std::string svg = chart_svg(charts[i]);
    // Twice the SVG's size, rounded (report_png.cpp kScale).
    EXPECT_EQ(be32(bytes, 16), static_cast<uint32_t>(std::lround(2 * svg_attr(svg, "width")))) << paths[i];
    EXPECT_EQ(be32(bytes, 20), static_cast<uint32_t>(std::lround(2 * svg_attr(svg, "height")))) << paths[i];
    // Not a blank image: a drawn chart compresses to more than a flat white one would.
    EXPECT_GT(bytes.size(), 4000u) << paths[i];
  }
  fs::remove_all(dir);
}

TEST(Report, CliWritesTheReportAndRefusesBadArguments) {
  const fs::path dir = scratch("cli");
  const std::string out = (dir / "r.html").string();
  testing::CommandResult r = testing::run_command(str_cat(SQLRL_BINARY, " report ", fixture_run(), " ", fixture_run(),
                                                          " --label a --label b --out ", out));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string html = read_file_text(out);
  EXPECT_NE(html.find("a: reward mean"), std::string::npos);
  EXPECT_NE(html.find("b: reward mean"), std::string::npos);
  r = testing::run_command(str_cat(SQLRL_BINARY, " report ", fixture_run(), " --label a --label b --out ", out));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("2 labels for 1 runs"), std::string::npos) << r.output;
  r = testing::run_command(str_cat(SQLRL_BINARY, " report ", dir.string(), " --out ", out));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("not a run folder"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sqlrl
