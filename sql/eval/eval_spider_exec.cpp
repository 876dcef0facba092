// The text rewrites of exec_eval.py and parse.py, and the loop over a database folder. Result
// comparison is sql/exec/compare.h's spider_rows_equal (the result_eq port); execution is sql/exec/pool.h.
#include "sql/eval/eval_spider_exec.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "runtime/error.h"
#include "sql/exec/compare.h"
#include "sql/eval/eval_spider_plug.h"

namespace sqlrl::sql {
namespace {

bool word_start(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }
bool word_byte(unsigned char c) { return std::isalnum(c) || c == '_' || c == '$' || c == '#' || c >= 0x80; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// End of a quoted token starting at i with quote q ('' or \x escapes inside), or the text end.
size_t quoted_end(std::string_view s, size_t i, char q) {
  size_t j = i + 1;
  while (j < s.size()) {
    if (s[j] == '\\' && q != '`' && j + 1 < s.size()) {
      j += 2;
    } else if (s[j] == q) {
      if (j + 1 < s.size() && s[j + 1] == q) {
        j += 2;
      } else {
        return j + 1;
      }
    } else {
      ++j;
    }
  }
  return s.size();
}

}  // namespace

std::string sqlparse_remove_distinct(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  int level = 0;
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t j = i + 1;
    if (c == '\'' || c == '"' || c == '`') {
      j = quoted_end(s, i, static_cast<char>(c));
    } else if ((c == '-' && i + 1 < s.size() && s[i + 1] == '-') || (c == '#' && i + 1 < s.size() && s[i + 1] == ' ')) {
      j = s.find('\n', i);
      j = j == std::string_view::npos ? s.size() : j + 1;
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      j = s.find("*/", i + 2);
      j = j == std::string_view::npos ? s.size() : j + 2;
    } else if (c == '[' && (i == 0 || !(word_byte(s[i - 1]) || s[i - 1] == ']' || s[i - 1] == ')'))) {
      size_t close = s.find(']', i + 1);
      size_t nested = s.find('[', i + 1);
      if (close != std::string_view::npos && close > i + 1 && (nested == std::string_view::npos || nested > close)) j = close + 1;
    } else if (word_start(c)) {
      while (j < s.size() && word_byte(s[j])) ++j;
      if (iequals(s.substr(i, j - i), "distinct")) {
        i = j;
        continue;
      }
    } else if (c == '(') {
      ++level;
    } else if (c == ')') {
      --level;
    } else if (c == ';' && level <= 0) {
      // sqlparse.parse(s)[0]: the first statement ends after ';' and the whitespace that follows.
      j = i + 1;
      while (j < s.size() && std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      out.append(s.substr(i, j - i));
      return out;
    }
    out.append(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string exec_postprocess(std::string_view sql) {
  std::string s(sql);
  for (auto [from, to] : {std::pair{"> =", ">="}, std::pair{"< =", "<="}, std::pair{"! =", "!="}}) {
    std::string out;
    size_t pos = 0, hit;
    while ((hit = s.find(from, pos)) != std::string::npos) {
      out.append(s, pos, hit - pos);
      out += to;
      pos = hit + 3;
    }
    out.append(s, pos, std::string::npos);
    s.swap(out);
  }
  return s;
}

std::string replace_cur_year(std::string_view s) {
  auto is_ws = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  auto skip_ws = [&](size_t k) {
    while (k < s.size() && is_ws(s[k])) ++k;
    return k;
  };
  auto word_at = [&](size_t k, std::string_view w) { return k + w.size() <= s.size() && iequals(s.substr(k, w.size()), w); };
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t k = i;
    bool ok = word_at(k, "year");
    if (ok) k = skip_ws(k + 4), ok = k < s.size() && s[k] == '(';
    if (ok) k = skip_ws(k + 1), ok = word_at(k, "curdate");
    if (ok) k = skip_ws(k + 7), ok = k < s.size() && s[k] == '(';
    if (ok) k = skip_ws(k + 1), ok = k < s.size() && s[k] == ')';
    if (ok) k = skip_ws(k + 1), ok = k < s.size() && s[k] == ')';
    if (ok) {
      out += "2020";
      i = skip_ws(k + 1);
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

std::vector<std::string> sqlite_files_in(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.find(".sqlite") != std::string::npos) files.push_back(entry.path().string());
  }
  check(!ec, dir, ": cannot list the database folder: ", ec.message());
  check(!files.empty(), dir, ": no *.sqlite file in the database folder");
  std::sort(files.begin(), files.end());
  return files;
}

int spider_exec_match(Pool& pool, const std::vector<std::string>& db_files, const std::string& pred_in,
                      const std::string& gold_in, const SpiderExecOptions& options) {
  std::string pred = exec_postprocess(pred_in), gold = exec_postprocess(gold_in);
  if (!options.keep_distinct) {
    pred = sqlparse_remove_distinct(pred);
    gold = sqlparse_remove_distinct(gold);
  }
  bool order_matters = gold_has_order_by(gold);
  // Gold denotations are the same for every candidate, so each file runs the gold query once.
  std::vector<Result> gold_results(db_files.size());
  std::vector<char> gold_done(db_files.size(), 0);
  auto passes = [&](const std::string& candidate) {
    std::string query = replace_cur_year(candidate);
    for (size_t f = 0; f < db_files.size(); ++f) {
      const std::string& db = db_files[f];
      if (!gold_done[f]) {
        gold_results[f] = pool.execute(db, replace_cur_year(gold), options.limits);
        gold_done[f] = 1;
        if (!gold_results[f].ok())
          fail("gold query has error on database file ", db, ": ", gold_results[f].error, " (query: ", gold, ")");
        if (gold_results[f].truncated)
          fail("gold query result on database file ", db, " is larger than the cap (", gold_results[f].truncation,
               "; eval-sql --max-result-mb raises it) (query: ", gold, ")");
      }
      Result p = pool.execute(db, query, options.limits);
      // Python's sqlite3 refuses a second statement ("You can only execute one statement at a time").
      // A result stopped at the byte cap is not the prediction's denotation (OfficialCaps).
      if (!p.ok() || !p.ignored_tail.empty() || p.truncated) return false;
      if (!spider_rows_equal(gold_results[f].rows, p.rows, order_matters)) return false;
    }
    return true;
  };
  if (passes(pred)) return 1;
  // get_all_preds_for_execution reads the texts before replace_cur_year (exec_on_db applies it).
  if (options.plug_value && for_each_plugged_prediction(gold, pred, passes)) return 1;
  return 0;
}

}  // namespace sqlrl::sql
