// BIRD's evaluation.py flow: package_sqls (predictions from the JSON dict in key order 0..n-1,
// gold from the .sql file), execute_model per pair, compute_acc_by_diff, print_data.
#include "sql/eval_bird.h"

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/thread_pool.h"
#include "sql/compare.h"
#include "sql/pool.h"

namespace sqlrl::sql {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), path, ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
}

std::string pad20(const std::string& s) { return s.size() >= 20 ? s : s + std::string(20 - s.size(), ' '); }

}  // namespace

BirdEvalReport run_bird_eval(const BirdEvalOptions& options, Pool& pool) {
  BirdEvalReport report;
  nlohmann::json preds = read_json(options.pred_path);
  check(preds.is_object(), options.pred_path, ": expected a JSON object {\"0\": \"SQL\\t----- bird -----\\tdb_id\", ...}");
  const std::string sep = "\t----- bird -----\t";
  for (size_t i = 0; i < preds.size(); ++i) {
    std::string key = std::to_string(i);
    check(preds.contains(key), options.pred_path, ": key \"", key, "\" missing (keys must be 0..", preds.size() - 1, ")");
    BirdItem item;
    item.index = static_cast<int>(i);
    const auto& v = preds[key];
    if (v.is_string()) {  // a non-string prediction becomes " " on "financial", as in BIRD
      std::string s = v.get<std::string>();
      size_t at = s.find(sep);
      check(at != std::string::npos && s.find(sep, at + 1) == std::string::npos, options.pred_path, ": key \"", key,
            "\": expected exactly one '\\t----- bird -----\\t' separator");
      item.pred = s.substr(0, at);
      item.db_id = s.substr(at + sep.size());
    } else {
      item.pred = " ";
      item.db_id = "financial";
    }
    report.items.push_back(std::move(item));
  }
  std::ifstream gold(options.gold_path);
  check(gold.good(), options.gold_path, ": cannot open");
  std::string line;
  size_t n = 0;
  while (std::getline(gold, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == '\n' || line.back() == ' ')) line.pop_back();
    if (line.empty()) continue;
    check(n < report.items.size(), options.gold_path, ":", n + 1, ": more gold queries than the ", report.items.size(), " predictions");
    size_t tab = line.find('\t');
    check(tab != std::string::npos && line.find('\t', tab + 1) == std::string::npos, options.gold_path, ":", n + 1,
          ": expected 'SQL<TAB>db_id'");
    report.items[n].gold = line.substr(0, tab);
    ++n;
  }
  check(n == report.items.size(), options.gold_path, ": ", n, " gold queries for ", report.items.size(), " predictions");
  if (!options.diff_path.empty()) {
    nlohmann::json diff = read_json(options.diff_path);
    check(diff.is_array() && diff.size() >= report.items.size(), options.diff_path, ": expected a list of at least ",
          report.items.size(), " questions");
    for (size_t i = 0; i < report.items.size(); ++i)
      report.items[i].difficulty = diff[i].value("difficulty", std::string());
  } else {
    for (BirdItem& it : report.items) it.difficulty = "simple";
  }

  Limits limits{static_cast<int64_t>(options.timeout_s * 1000), 0, size_t(1) << 40, size_t(1) << 40, size_t(1) << 30};
  default_thread_pool().parallel_for(report.items.size(), 4, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      BirdItem& it = report.items[i];
      std::string db = options.db_root + "/" + it.db_id + "/" + it.db_id + ".sqlite";
      Result p = pool.execute(db, it.pred, limits);
      if (!p.ok() || !p.ignored_tail.empty()) continue;
      Result g = pool.execute(db, it.gold, limits);
      if (!g.ok() || !g.ignored_tail.empty()) continue;
      it.exec = bird_rows_equal(g.rows, p.rows) ? 1 : 0;
    }
  });

  // compute_acc_by_diff: an empty difficulty bucket divides by zero in BIRD; printed as 0 here.
  const char* levels[] = {"simple", "moderate", "challenging"};
  double hits[4] = {0, 0, 0, 0};
  size_t counts[4] = {0, 0, 0, 0};
  for (const BirdItem& it : report.items) {
    for (int k = 0; k < 3; ++k)
      if (it.difficulty == levels[k]) {
        counts[k]++;
        hits[k] += it.exec;
      }
    counts[3]++;
    hits[3] += it.exec;
  }
  std::string& out = report.printout;
  out += pad20("") + " " + pad20("simple") + " " + pad20("moderate") + " " + pad20("challenging") + " " + pad20("total") + "\n";
  out += pad20("count");
  for (size_t c : counts) out += " " + pad20(std::to_string(c));
  out += "\n======================================    ACCURACY    =====================================\n";
  out += pad20("accuracy");
  for (int k = 0; k < 4; ++k) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f", counts[k] ? hits[k] / counts[k] * 100 : 0.0);
    out += " " + pad20(buf);
  }
  out += "\n===========================================================================================\n";
  return report;
}

}  // namespace sqlrl::sql
