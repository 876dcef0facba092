// One chart as SVG text: title, axes with round ticks, each series raw (faint) and smoothed
// (solid), a legend below. Plain SVG 1.1 that browsers and librsvg draw alike.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "report/report.h"
#include "runtime/error.h"

namespace sqlrl {
namespace {

constexpr double kWidth = 720, kLeft = 70, kRight = 20, kTop = 34, kPlotHeight = 220;
constexpr double kLegendRow = 16, kCharWidth = 6.4;  // 11px sans-serif: about 6.4px a character

// Tableau 10: distinguishable, and readable on white.
const char* color(size_t i) {
  static const char* palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                  "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return palette[i % 10];
}

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", x);
  return buf;
}

// A tick label: 4 significant digits, no trailing noise.
std::string tick_label(double x) {
  if (std::fabs(x) < 1e-12) return "0";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

// Round tick positions (1, 2, 5 x 10^k, at least min_step apart) covering [lo, hi], about
// `count` of them. Steps are whole numbers: the x axis never ticks at 2.5.
std::vector<double> ticks(double lo, double hi, int count, double min_step = 0) {
  const double raw = (hi - lo) / count;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = std::max(min_step, (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag);
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
  return out;
}

std::string polyline(const std::vector<std::pair<double, double>>& pts, const char* stroke, double width, double opacity) {
  std::string s = str_cat("<polyline fill=\"none\" stroke=\"", stroke, "\" stroke-width=\"", num(width), "\"");
  if (opacity < 1) s += str_cat(" stroke-opacity=\"", num(opacity), "\"");
  s += " points=\"";
  for (const auto& [x, y] : pts) s += num(x) + "," + num(y) + " ";
  s.back() = '"';
  return s + "/>\n";
}

}  // namespace

std::string chart_svg(const ReportChart& chart, double smoothing) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const ReportSeries& s : chart.series)
    for (const auto& [x, y] : s.points) x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) {
    const double pad = y0 == 0 ? 1 : std::fabs(y0) * 0.1;
    y0 -= pad, y1 += pad;
  } else {
    const double pad = (y1 - y0) * 0.05;
    y0 -= pad, y1 += pad;
  }
  const double plot_w = kWidth - kLeft - kRight;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * plot_w; };
  auto py = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * kPlotHeight; };

  // Legend rows: entries flow left to right and wrap.
  std::vector<std::pair<double, double>> legend_at;
  double lx = kLeft, ly = kTop + kPlotHeight + 44;
  for (const ReportSeries& s : chart.series) {
    const double w = 22 + kCharWidth * static_cast<double>(s.label.size()) + 16;
    if (lx + w > kWidth - kRight && lx > kLeft) lx = kLeft, ly += kLegendRow;
    legend_at.emplace_back(lx, ly);
    lx += w;
  }
  const double height = ly + 12;

  std::string svg = str_cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", num(kWidth), "\" height=\"", num(height),
                            "\" viewBox=\"0 0 ", num(kWidth), " ", num(height), "\" font-family=\"sans-serif\" font-size=\"11\">\n");
  svg += str_cat("<title>", html_escape(chart.title), "</title>\n");
  svg += str_cat("<rect width=\"", num(kWidth), "\" height=\"", num(height), "\" fill=\"#ffffff\"/>\n");
  svg += str_cat("<text x=\"", num(kLeft), "\" y=\"20\" font-size=\"14\" font-weight=\"bold\" fill=\"#222\">",
                 html_escape(chart.title), "</text>\n");
  // Grid and tick labels.
  for (double t : ticks(y0, y1, 5)) {
    svg += str_cat("<line x1=\"", num(kLeft), "\" x2=\"", num(kWidth - kRight), "\" y1=\"", num(py(t)), "\" y2=\"", num(py(t)),
                   "\" stroke=\"#e4e4e4\"/>\n");
    svg += str_cat("<text x=\"", num(kLeft - 6), "\" y=\"", num(py(t) + 4), "\" text-anchor=\"end\" fill=\"#555\">",
                   tick_label(t), "</text>\n");
  }
  for (double t : ticks(x0, x1, 8, 1)) {
    svg += str_cat("<line x1=\"", num(px(t)), "\" x2=\"", num(px(t)), "\" y1=\"", num(kTop + kPlotHeight), "\" y2=\"",
                   num(kTop + kPlotHeight + 4), "\" stroke=\"#555\"/>\n");
    svg += str_cat("<text x=\"", num(px(t)), "\" y=\"", num(kTop + kPlotHeight + 16), "\" text-anchor=\"middle\" fill=\"#555\">",
                   tick_label(t), "</text>\n");
  }
  svg += str_cat("<rect x=\"", num(kLeft), "\" y=\"", num(kTop), "\" width=\"", num(plot_w), "\" height=\"", num(kPlotHeight),
                 "\" fill=\"none\" stroke=\"#888\"/>\n");
  svg += str_cat("<text x=\"", num(kLeft + plot_w / 2), "\" y=\"", num(kTop + kPlotHeight + 30),
                 "\" text-anchor=\"middle\" fill=\"#333\">step</text>\n");
  // Series: raw faint under the smoothed line; sparse charts raw with markers.
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const ReportSeries& s = chart.series[k];
    std::vector<std::pair<double, double>> raw;
    std::vector<double> ys;
    for (const auto& [x, y] : s.points) raw.emplace_back(px(x), py(y)), ys.push_back(y);
    const bool smooth = chart.smooth && smoothing > 0 && s.points.size() > 2;
    if (smooth) {
      svg += polyline(raw, color(k), 1, 0.3);
      const std::vector<double> sm = ema_smooth(ys, smoothing);
      std::vector<std::pair<double, double>> line;
      for (size_t i = 0; i < sm.size(); ++i) line.emplace_back(raw[i].first, py(sm[i]));
      svg += polyline(line, color(k), 2, 1);
    } else {
      if (raw.size() > 1) svg += polyline(raw, color(k), 2, 1);
      for (const auto& [x, y] : raw)
        svg += str_cat("<circle cx=\"", num(x), "\" cy=\"", num(y), "\" r=\"3\" fill=\"", color(k), "\"/>\n");
    }
  }
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const auto& [x, y] = legend_at[k];
    svg += str_cat("<rect x=\"", num(x), "\" y=\"", num(y - 8), "\" width=\"16\" height=\"4\" fill=\"", color(k), "\"/>\n");
    svg += str_cat("<text x=\"", num(x + 22), "\" y=\"", num(y - 2), "\" fill=\"#333\">", html_escape(chart.series[k].label),
                   "</text>\n");
  }
  return svg + "</svg>\n";
}

}  // namespace sqlrl
