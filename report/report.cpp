// The report's data: run folders read, charts chosen, smoothing, escaping, the SQL diff.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "report/report.h"
#include "runtime/error.h"
#include "runtime/json_depth.h"
#include "runtime/file_io.h"
#include "tokenizer/unicode.h"

namespace sqlrl {
namespace fs = std::filesystem;
namespace {

std::vector<nlohmann::ordered_json> read_jsonl(const fs::path& path) {
  std::vector<nlohmann::ordered_json> out;
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path.string(), ": cannot open");
  int64_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty()) continue;
    check_json_depth(line, str_cat(path.string(), ":", number));
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(line, nullptr, false);
    check(!j.is_discarded() && j.is_object(), path.string(), ":", number, ": not a JSON object: ", line.substr(0, 80));
    out.push_back(std::move(j));
  }
  return out;
}

// "step-12" -> 12, anything else -> -1.
int64_t step_of(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5) return -1;
  int64_t step = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

// The number at a '/'-separated path of a metrics line, NaN when absent or not a number.
double at_path(const nlohmann::ordered_json& line, const std::string& path) {
  const nlohmann::ordered_json* j = &line;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = std::min(path.find('/', start), path.size());
    const std::string key = path.substr(start, slash - start);
    if (!j->is_object() || !j->contains(key)) return NAN;
    j = &(*j)[key];
    start = slash + 1;
  }
  return j->is_number() ? j->get<double>() : (j->is_boolean() ? (j->get<bool>() ? 1.0 : 0.0) : NAN);
}

// The keys of the object at `path` in any line of any run, in first-seen order.
std::vector<std::string> keys_at(const std::vector<ReportRun>& runs, const std::string& path) {
  std::vector<std::string> keys;
  for (const ReportRun& run : runs)
    for (const nlohmann::ordered_json& line : run.metrics) {
      const nlohmann::ordered_json* j = &line;
      size_t start = 0;
      bool found = true;
      while (start <= path.size()) {
        const size_t slash = std::min(path.find('/', start), path.size());
        const std::string key = path.substr(start, slash - start);
        if (!j->is_object() || !j->contains(key)) { found = false; break; }
        j = &(*j)[key];
        start = slash + 1;
      }
      if (!found || !j->is_object()) continue;
      for (const auto& [k, v] : j->items())
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
  return keys;
}

// One line of a chart: the value at `path` (complement: 1 - it; over: divided by the value at
// that path), per step.
struct Figure {
  std::string label, path;
  bool complement = false;
  std::string over;
};

struct ChartSpec {
  std::string id, title;
  std::vector<Figure> figures;  // a path ending in "/*" stands for every key of that object
  std::string suffix = "";      // appended to an expanded key's label ("/ex" of eval difficulties)
  bool smooth = true;
};

Figure fig(const std::string& label, const std::string& path, bool complement = false, const std::string& over = "") {
  return Figure{label, path, complement, over};
}
ChartSpec spec(const std::string& id, const std::string& title, std::vector<Figure> figures, const std::string& suffix = "",
               bool smooth = true) {
  return ChartSpec{id, title, std::move(figures), suffix, smooth};
}

const std::vector<ChartSpec>& chart_specs() {
  // The figures metrics.jsonl holds (rl/grpo/train_log.cpp metrics_json; SFT: rl/sft/sft.cpp):
  // GRPO lines and SFT lines share "loss", "lr", "grad_norm"; the rest are GRPO's.
  static const std::vector<ChartSpec> specs = {
      spec("reward", "Reward (mean over the step's trajectories)", {fig("reward mean", "reward_mean"), fig("reward std", "reward_std")}),
      spec("reward_terms", "Reward terms (mean)", {fig("", "reward_terms/*")}),
      spec("train_ex", "Train EX (rollouts)", {fig("EX", "ex")}),
      spec("eval_ex", "Eval EX (greedy, held-out split)", {fig("all", "eval/ex"), fig("", "eval/by_difficulty/*")}, "/ex", false),
      spec("format_errors", "Format-error rate",
       {fig("train (1 - format_rate)", "format_rate", true), fig("eval", "eval/format_error_rate")}),
      spec("filtered", "GRPO filter: trajectories dropped by reason, and kept", {fig("", "filtered/*")}),
      spec("turns", "Turns per trajectory", {fig("train", "turns_mean"), fig("eval", "eval/avg_turns")}),
      spec("tokens_per_turn", "Generated tokens per turn", {fig("tokens / turn", "generated_tokens_mean", false, "turns_mean")}),
      spec("response_length", "Response length (generated tokens per trajectory)", {fig("generated", "generated_tokens_mean")}),
      spec("entropy", "Entropy (nats per token)", {fig("entropy", "entropy")}),
      spec("clip_fraction", "Ratio-clip fraction", {fig("clip fraction", "clip_fraction")}),
      spec("kl", "KL",
       {fig("approx KL (old vs new)", "approx_kl"), fig("KL to reference", "ref_kl"), fig("KL penalty in reward", "kl_penalty"),
        fig("sampler vs trainer (k1)", "mismatch/kl")}),
      // --async runs only (rl/grpo/async.h): trainer steps between the sampling weights and the trained ones.
      spec("staleness", "Staleness (updates between the weights that sampled a batch and those it trains)",
           {fig("staleness (oldest token)", "staleness"), fig("mean over tokens", "staleness_mean"),
            fig("newest token (--partial-rollout)", "staleness_min")},
           "", false),
      // --rollout-ranks runs only (rl/grpo/rollout_ranks.h): how much of its time each side waited for the other.
      spec("idle", "Rollout ranks: idle fraction (trainers waiting for batches, rollout ranks for the trainers)",
           {fig("trainers", "time/trainer_idle_fraction"), fig("rollout ranks", "time/rollout_idle_fraction")}),
      spec("grad_norm", "Gradient norm (before clipping)", {fig("grad norm", "grad_norm")}),
      spec("lr", "Learning rate", {fig("lr", "lr")}),
      spec("loss", "Loss", {fig("loss", "loss")}),
      spec("throughput", "Tokens per second",
       {fig("rollout", "time/rollout_tokens_per_s"), fig("train", "time/train_tokens_per_s"), fig("SFT", "tokens_per_s")}),
      spec("time", "Time per phase (s per step)",
       {fig("step", "time/step_s"), fig("rollout decode", "time/decode_s"), fig("rollout prefill", "time/prefill_s"),
        fig("SQL", "time/sql_s"), fig("reward", "time/score_s"),
        fig("reward of the batch ahead, while training (--overlap-scoring)", "time/overlap_s"),
        fig("train fwd/bwd + optimizer", "time/train_s"),
        fig("of which optimizer", "time/optimizer_s"), fig("collectives", "time/comm_s"),
        fig("weights to the rollout ranks", "time/weight_sync_s"), fig("eval", "time/eval_s"),
        fig("checkpoint", "time/checkpoint_s"), fig("SFT step", "seconds")}),
  };
  return specs;
}

ReportSeries series_of(const ReportRun& run, const Figure& f, const std::string& label) {
  ReportSeries s{label, {}};
  for (const nlohmann::ordered_json& line : run.metrics) {
    const double step = at_path(line, "step");
    double v = at_path(line, f.path);
    if (f.complement) v = 1.0 - v;
    if (!f.over.empty()) {
      const double d = at_path(line, f.over);
      v = d > 0 ? v / d : NAN;
    }
    if (std::isfinite(step) && std::isfinite(v)) s.points.emplace_back(step, v);
  }
  std::stable_sort(s.points.begin(), s.points.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return s;
}

bool all_zero(const ReportSeries& s) {
  return std::all_of(s.points.begin(), s.points.end(), [](const auto& p) { return p.second == 0; });
}

}  // namespace

ReportRun load_report_run(const std::string& dir, const std::string& label) {
  ReportRun run;
  run.dir = dir;
  run.label = label.empty() ? fs::path(dir).lexically_normal().filename().string() : label;
  if (run.label.empty()) run.label = fs::path(dir).lexically_normal().parent_path().filename().string();
  check(fs::is_directory(dir), dir, ": not a folder (report takes run folders: RUN/metrics.jsonl, RUN/eval/)");
  const fs::path root(dir);
  bool any = false;
  if (fs::exists(root / "metrics.jsonl")) run.metrics = read_jsonl(root / "metrics.jsonl"), any = true;
  if (fs::exists(root / "trajectories.jsonl")) run.trajectories = read_jsonl(root / "trajectories.jsonl"), any = true;
  if (fs::is_directory(root / "eval")) {
    for (const auto& entry : fs::directory_iterator(root / "eval")) {
      const fs::path summary = entry.path() / "summary.json";
      if (!fs::exists(summary)) continue;
      const std::string text = read_file_text(summary.string());
      check_json_depth(text, summary.string());
      nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
      check(!j.is_discarded() && j.is_object(), summary.string(), ": not a JSON object");
      const std::string name = entry.path().filename().string();
      run.evals.push_back({name, step_of(name), std::move(j)});
      any = true;
    }
    std::sort(run.evals.begin(), run.evals.end(), [](const ReportEval& a, const ReportEval& b) {
      if ((a.step < 0) != (b.step < 0)) return a.step >= 0;
      return a.step != b.step ? a.step < b.step : a.name < b.name;
    });
  }
  check(any, dir, ": no metrics.jsonl, trajectories.jsonl or eval/*/summary.json (not a run folder?)");
  return run;
}

std::vector<ReportChart> report_charts(const std::vector<ReportRun>& runs) {
  std::vector<ReportChart> charts;
  const bool several = runs.size() > 1;
  for (const ChartSpec& spec : chart_specs()) {
    ReportChart chart{spec.id, spec.title, spec.smooth, {}};
    std::vector<Figure> figures;
    for (const Figure& f : spec.figures) {
      if (f.path.size() > 2 && f.path.compare(f.path.size() - 2, 2, "/*") == 0) {
        const std::string parent = f.path.substr(0, f.path.size() - 2);
        for (const std::string& key : keys_at(runs, parent))
          figures.push_back({key, parent + "/" + key + spec.suffix, false, ""});
      } else {
        figures.push_back(f);
      }
    }
    // A figure that is 0 in every run (one process's collectives, a term that is off) is left
    // out, unless the chart would be empty.
    std::vector<ReportSeries> zero;
    for (const Figure& f : figures) {
      std::vector<ReportSeries> of_figure;
      for (const ReportRun& run : runs) {
        ReportSeries s = series_of(run, f, several ? run.label + ": " + f.label : f.label);
        if (!s.points.empty()) of_figure.push_back(std::move(s));
      }
      const bool zeros = std::all_of(of_figure.begin(), of_figure.end(), all_zero);
      for (ReportSeries& s : of_figure) (zeros ? zero : chart.series).push_back(std::move(s));
    }
    if (chart.series.empty()) chart.series = std::move(zero);
    if (!chart.series.empty()) charts.push_back(std::move(chart));
  }
  return charts;
}

std::vector<double> ema_smooth(const std::vector<double>& values, double weight) {
  std::vector<double> out;
  out.reserve(values.size());
  double last = 0;
  int64_t n = 0;
  for (double x : values) {
    if (!std::isfinite(x)) {
      out.push_back(x);
      continue;
    }
    last = last * weight + (1 - weight) * x;
    ++n;
    const double debias = weight == 1 ? 1.0 : 1.0 - std::pow(weight, static_cast<double>(n));
    out.push_back(last / debias);
  }
  return out;
}

// Besides the five HTML specials: an untrained model writes any bytes, and HTML5 counts control
// characters and invalid UTF-8 as parse errors. Invalid UTF-8 becomes U+FFFD (utf8_lossy, as the
// tokenizers' decoders do), C0 controls but tab and newline their visible Control Pictures
// (U+2400 + c; DEL U+2421), C1 controls U+FFFD.
std::string html_escape(const std::string& text) {
  const std::string valid = utf8_lossy(text);
  std::string out;
  out.reserve(valid.size());
  for (size_t i = 0; i < valid.size();) {
    uint32_t cp = 0;
    const int len = utf8_decode_valid(valid, i, &cp);
    switch (cp) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case '\t': case '\n': out += static_cast<char>(cp); break;
      default:
        if (cp < 0x20 || cp == 0x7f) utf8_append(out, cp == 0x7f ? 0x2421 : 0x2400 + cp);
        else if (cp >= 0x80 && cp <= 0x9f) utf8_append(out, 0xFFFD);
        else out.append(valid, i, static_cast<size_t>(len));
    }
    i += static_cast<size_t>(len);
  }
  return out;
}

namespace {

// SQL words: identifiers/numbers, quoted strings, and single punctuation characters.
std::vector<std::string> sql_words(const std::string& sql) {
  std::vector<std::string> words;
  size_t i = 0;
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || (c & 0x80); };
  while (i < sql.size()) {
    const char c = sql[i];
    if (std::isspace(static_cast<unsigned char>(c))) { ++i; continue; }
    size_t j = i + 1;
    if (c == '\'' || c == '"' || c == '`') {
      while (j < sql.size() && sql[j] != c) ++j;
      j = std::min(j + 1, sql.size());
    } else if (word_char(c)) {
      while (j < sql.size() && word_char(sql[j])) ++j;
    } else if ((c == '<' || c == '>' || c == '!') && j < sql.size() && (sql[j] == '=' || sql[j] == '>')) {
      ++j;
    }
    words.push_back(sql.substr(i, j - i));
    i = j;
  }
  return words;
}

}  // namespace

std::string sql_diff_html(const std::string& gold, const std::string& predicted) {
  const std::vector<std::string> a = sql_words(gold), b = sql_words(predicted);
  // Keywords compare case-insensitively outside quotes, as SQL reads them.
  auto same = [](const std::string& x, const std::string& y) {
    if (x.size() != y.size()) return false;
    if (!x.empty() && (x[0] == '\'' || x[0] == '"')) return x == y;
    for (size_t i = 0; i < x.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(x[i])) != std::tolower(static_cast<unsigned char>(y[i]))) return false;
    return true;
  };
  // A quadratic table: model answers are short; beyond 600 words each, show both whole.
  if (a.size() > 600 || b.size() > 600)
    return "<del>" + html_escape(gold) + "</del> <ins>" + html_escape(predicted) + "</ins>";
  std::vector<std::vector<int32_t>> lcs(a.size() + 1, std::vector<int32_t>(b.size() + 1, 0));
  for (size_t i = a.size(); i-- > 0;)
    for (size_t j = b.size(); j-- > 0;)
      lcs[i][j] = same(a[i], b[j]) ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  std::string out;
  auto emit = [&out](const char* tag, const std::string& w) {
    if (!out.empty()) out += ' ';
    out += tag[0] ? str_cat("<", tag, ">", html_escape(w), "</", tag, ">") : html_escape(w);
  };
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (i < a.size() && j < b.size() && same(a[i], b[j])) emit("", b[j]), ++i, ++j;
    else if (j < b.size() && (i == a.size() || lcs[i][j + 1] >= lcs[i + 1][j])) emit("ins", b[j++]);
    else emit("del", a[i++]);
  }
  return out;
}

}  // namespace sqlrl
