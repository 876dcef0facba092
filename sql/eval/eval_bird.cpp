// BIRD's evaluation.py flow: package_sqls (predictions from the JSON dict in key order 0..n-1,
// gold from the .sql file), execute_model per pair, compute_acc_by_diff, print_data.
#include "sql/eval/eval_bird.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/thread_pool.h"
#include "runtime/utf8.h"
#include "sql/exec/compare.h"
#include "sql/exec/pool.h"

namespace sqlrl::sql {
namespace {

template <typename Json>
Json read_json(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), path, ": cannot open");
  // json.load on a file opened as UTF-8 (not utf-8-sig) fails on a byte order mark.
  check(in.peek() != 0xEF, path, ": starts with a UTF-8 byte order mark, which the official script's json.load "
        "refuses: save it without one");
  try {
    return Json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
}

std::string pad20(const std::string& s) { return s.size() >= 20 ? s : s + std::string(20 - s.size(), ' '); }

std::string python_strip(const std::string& s) {
  auto ws = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); };
  size_t b = 0, e = s.size();
  while (b < e && ws(s[b])) ++b;
  while (e > b && ws(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// Python's sqlite3 decodes every TEXT value as strict UTF-8 and raises ("Could not decode to
// UTF-8 column") on one that is not: execute_model then scores the pair 0. BLOBs stay bytes.
bool python_can_fetch(const Result& r) {
  for (const Row& row : r.rows)
    for (const Cell& c : row)
      if (c.type == CellType::Text && !utf8_is_valid(c.text)) return false;
  return true;
}

// Python's cursor.execute on a text with no statement returns no rows, without an error.
bool is_empty_statement(const Result& r) {
  return !r.ok() && !r.timed_out && r.ignored_tail.empty() && r.error.rfind("no SQL statement", 0) == 0;
}

}  // namespace

BirdEvalReport run_bird_eval(const BirdEvalOptions& options, Pool& pool) {
  BirdEvalReport report;
  // package_sqls(mode='gpt'): the dict's values in file order.
  auto preds = read_json<nlohmann::ordered_json>(options.pred_path);
  check(preds.is_object(), options.pred_path, ": expected a JSON object {\"0\": \"SQL\\t----- bird -----\\tdb_id\", ...}");
  const std::string sep = "\t----- bird -----\t";
  std::vector<BirdItem> pred_items;
  for (const auto& [key, v] : preds.items()) {
    BirdItem item;
    if (v.is_string()) {
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
    pred_items.push_back(std::move(item));
  }
  // package_sqls(mode='gt'): every line of readlines(), strip()ped, split on TAB into two.
  std::ifstream gold(options.gold_path, std::ios::binary);
  check(gold.good(), options.gold_path, ": cannot open");
  std::vector<std::string> gold_sqls;
  std::string line;
  while (std::getline(gold, line)) {
    std::string l = python_strip(line);
    size_t tab = l.find('\t');
    check(tab != std::string::npos && l.find('\t', tab + 1) == std::string::npos, options.gold_path, ":",
          gold_sqls.size() + 1, ": expected 'SQL<TAB>db_id'");
    gold_sqls.push_back(l.substr(0, tab));
  }
  // The official script zips predictions with gold queries, scoring a prefix as if it were the
  // whole set: a count that differs is an error instead.
  const size_t n = gold_sqls.size();
  check(pred_items.size() == n, options.pred_path, " has ", pred_items.size(), " predictions, ", options.gold_path,
        " has ", n, " gold queries: one prediction per gold query, in order");
  for (size_t i = 0; i < n; ++i) {
    BirdItem& it = pred_items[i];
    it.index = static_cast<int>(i);
    it.gold = gold_sqls[i];
    report.items.push_back(std::move(it));
  }
  if (!options.diff_path.empty()) {
    auto diff = read_json<nlohmann::json>(options.diff_path);
    check(diff.is_array(), options.diff_path, ": expected a list of questions");
    check(diff.size() <= n, options.diff_path, ": ", diff.size(), " questions for ", n,
          " evaluated pairs (compute_acc_by_diff indexes the results by question)");
    for (size_t i = 0; i < diff.size(); ++i) {
      const auto& d = diff[i];
      check(d.is_object() && d.contains("difficulty") && d["difficulty"].is_string(), options.diff_path, ": question ", i,
            ": no \"difficulty\" string");
      report.items[i].difficulty = d["difficulty"].get<std::string>();
    }
  } else {
    for (BirdItem& it : report.items) it.difficulty = "simple";
  }

  using Clock = std::chrono::steady_clock;
  const int64_t budget_ms = static_cast<int64_t>(options.timeout_s * 1000);
  Limits limits = official_script_limits(budget_ms, options.caps);
  default_thread_pool().parallel_for(report.items.size(), 4, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      BirdItem& it = report.items[i];
      std::string db = options.db_root + "/" + it.db_id + "/" + it.db_id + ".sqlite";
      // execute_sql: the prediction, then the gold, both inside one func_timeout.
      auto start = Clock::now();
      Result p = pool.execute(db, it.pred, limits);
      if (is_empty_statement(p)) p = Result{};
      // A result stopped at the byte cap is not the query's denotation (OfficialCaps): a miss.
      if (!p.ok() || p.truncated || !p.ignored_tail.empty() || p.extra_semicolon || !python_can_fetch(p)) continue;
      Limits rest = limits;
      rest.timeout_ms = budget_ms - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      if (rest.timeout_ms <= 0) continue;
      Result g = pool.execute(db, it.gold, rest);
      if (is_empty_statement(g)) g = Result{};
      if (!g.ok() || g.truncated || !g.ignored_tail.empty() || g.extra_semicolon || !python_can_fetch(g)) continue;
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
  out += "start calculate\n";
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
  out += "Finished evaluation\n";
  return report;
}

}  // namespace sqlrl::sql
