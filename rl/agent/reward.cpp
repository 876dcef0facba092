// Panels, weights and overrides; the context's caches; executing the final answer; score().
#include "rl/agent/reward.h"

#include <charconv>
#include <cmath>
#include <map>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "rl/agent/paper.h"
#include "rl/agent/reward_detail.h"
#include "runtime/error.h"
#include "sql/eval/eval_spider_exec.h"
#include "sql/eval/lexer.h"
#include "sql/eval/sql_features.h"

namespace sqlrl::rl {

struct RewardCaches {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const detail::DbFacts>> dbs;
  std::map<std::string, std::shared_ptr<const detail::GoldFacts>> golds;  // key: db_path \0 gold text
};

namespace {

std::string joined_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::vector<std::string> term_names(const RewardPanel& panel) {
  std::vector<std::string> out;
  for (const RewardTerm& t : panel.terms) out.push_back(t.name);
  return out;
}

}  // namespace

std::vector<std::string> reward_panel_names() { return paper_names(); }

// The paper's terms and weights (rl/agent/paper.cpp, each from the paper named there).
RewardPanel make_reward_panel(const std::string& name) {
  return RewardPanel{name, find_paper(name, "reward panel").terms};
}

void set_reward_weight(RewardPanel& panel, std::string_view key, double weight) {
  std::string term(key);
  if (key.starts_with("reward.")) {
    std::string_view rest = key.substr(7);
    size_t dot = rest.find('.');
    check(dot != std::string_view::npos, "reward weight key '", key, "': expected reward.<panel>.<term>");
    std::string_view panel_name = rest.substr(0, dot);
    check(panel_name == panel.name, "reward weight key '", key, "': this run's reward panel is '", panel.name,
          "' (terms: ", joined_names(term_names(panel)), ")");
    term = std::string(rest.substr(dot + 1));
  }
  check(std::isfinite(weight), "reward weight '", key, "' must be a finite number, got ", weight);
  for (RewardTerm& t : panel.terms)
    if (t.name == term) {
      t.weight = weight;
      return;
    }
  fail("reward panel '", panel.name, "' has no term '", term, "'; terms: ", joined_names(term_names(panel)));
}

void apply_reward_override(RewardPanel& panel, std::string_view assignment) {
  size_t eq = assignment.find('=');
  check(eq != std::string_view::npos, "reward override '", assignment, "': expected reward.<panel>.<term>=<weight>");
  std::string_view key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  double weight = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), weight);
  check(ec == std::errc() && end == value.data() + value.size() && !value.empty(), "reward override '", assignment,
        "': '", value, "' is not a number");
  set_reward_weight(panel, key, weight);
}

RewardContext::RewardContext(sql::Pool& pool_, sql::Limits limits_, sql::CompareMode mode_)
    : pool(pool_), limits(limits_), mode(mode_), gold(pool_, limits_), caches(std::make_unique<RewardCaches>()) {}

RewardContext::~RewardContext() = default;

namespace detail {

std::string exec_text(const RewardContext& ctx, std::string_view sql) {
  if (ctx.mode != sql::CompareMode::Spider) return std::string(sql);
  // exec_eval.eval_exec_match's order: postprocess, remove DISTINCT, then YEAR(CURDATE()).
  std::string s = sql::exec_postprocess(sql);
  if (!ctx.keep_distinct) s = sql::sqlparse_remove_distinct(s);
  return sql::replace_cur_year(s);
}

std::shared_ptr<const DbFacts> db_facts(RewardContext& ctx, const std::string& db_path) {
  {
    std::lock_guard<std::mutex> lock(ctx.caches->mutex);
    auto it = ctx.caches->dbs.find(db_path);
    if (it != ctx.caches->dbs.end()) return it->second;
  }
  auto facts = std::make_shared<DbFacts>();
  facts->schema = sql::load_schema_sqlite(db_path);
  // tables.json's foreign_keys, rebuilt from PRAGMA foreign_key_list (private connection, so
  // the pool's execution counts stay those of model and gold queries).
  nlohmann::json entry = {{"db_id", db_path}, {"table_names_original", nlohmann::json::array()},
                          {"column_names_original", nlohmann::json::array({{-1, "*"}})},
                          {"foreign_keys", nlohmann::json::array()}};
  std::map<std::string, int> column_index;  // "t.c" lower-case -> index in column_names_original
  std::map<std::string, std::string> primary_key;  // table -> first pk column
  for (size_t t = 0; t < facts->schema.table_order.size(); ++t) {
    const std::string& table = facts->schema.table_order[t];
    entry["table_names_original"].push_back(table);
    for (const std::string& col : facts->schema.columns[table]) {
      column_index[table + "." + col] = static_cast<int>(entry["column_names_original"].size());
      entry["column_names_original"].push_back({static_cast<int>(t), col});
    }
    sql::Result info = sql::execute_once(db_path, "PRAGMA table_info(\"" + table + "\")");
    for (const sql::Row& r : info.rows)
      if (r.size() > 5 && r[5].type == sql::CellType::Integer && r[5].integer == 1 && !primary_key.count(table))
        primary_key[table] = sql::python_lower(r[1].text);
  }
  for (const std::string& table : facts->schema.table_order) {
    sql::Result fks = sql::execute_once(db_path, "PRAGMA foreign_key_list(\"" + table + "\")");
    for (const sql::Row& r : fks.rows) {  // id, seq, table, from, to, ...
      if (r.size() < 5) continue;
      std::string parent = sql::python_lower(r[2].text), from = sql::python_lower(r[3].text);
      std::string to = r[4].is_null() ? primary_key[parent] : sql::python_lower(r[4].text);
      auto a = column_index.find(table + "." + from), b = column_index.find(parent + "." + to);
      if (a != column_index.end() && b != column_index.end()) entry["foreign_keys"].push_back({a->second, b->second});
    }
  }
  facts->kmap = sql::build_foreign_key_map(entry);
  std::lock_guard<std::mutex> lock(ctx.caches->mutex);
  return ctx.caches->dbs.emplace(db_path, std::move(facts)).first->second;
}

std::shared_ptr<const GoldFacts> gold_facts(RewardContext& ctx, const sql::Example& example) {
  std::string text = exec_text(ctx, example.gold_sql);
  std::string key = example.db_path + '\0' + text;
  {
    std::lock_guard<std::mutex> lock(ctx.caches->mutex);
    auto it = ctx.caches->golds.find(key);
    if (it != ctx.caches->golds.end()) return it->second;
  }
  auto db = db_facts(ctx, example.db_path);
  auto facts = std::make_shared<GoldFacts>();
  facts->sql = text;
  // Structure is read from the gold as written: DISTINCT removal is an execution detail.
  facts->q = query_facts(*db, example.gold_sql);
  try {
    facts->bigrams = sql::token_bigrams(example.gold_sql);
    facts->bigrams_ok = true;
  } catch (const Error&) {
    facts->bigrams_ok = false;
  }
  std::lock_guard<std::mutex> lock(ctx.caches->mutex);
  return ctx.caches->golds.emplace(std::move(key), std::move(facts)).first->second;
}

Outcome final_outcome(const sql::Example& example, const Trajectory& traj, RewardContext& ctx) {
  Outcome o;
  o.answered = traj.has_final_sql();  // the protocol's fallback answer is scored as an answer
  o.pred = traj.final_sql;
  if (!o.answered) return o;
  std::shared_ptr<const sql::Result> gold = ctx.gold.get(example.db_path, exec_text(ctx, example.gold_sql));
  sql::Result pred = ctx.pool.execute(example.db_path, exec_text(ctx, o.pred), ctx.limits);
  // Python's sqlite3 (the papers' evaluators) refuses a second statement outright: not
  // executable (Spider mode's preprocessing has already kept only the first, as exec_eval does). A result cut at the row/byte cap ran fine but is not the answer (results_match
  // never matches a truncated result).
  o.executable = pred.ok() && pred.ignored_tail.empty();
  sql::CompareOptions options;
  options.mode = ctx.mode;
  options.order_matters = ctx.mode == sql::CompareMode::Spider && sql::gold_has_order_by(exec_text(ctx, example.gold_sql));
  o.ex = o.executable && sql::results_match(pred, *gold, options);
  o.infra_failure = gold->infra_error || pred.infra_error;
  if (gold->infra_error) o.infra_reason = "gold SQL: " + gold->error;
  else if (pred.infra_error) o.infra_reason = "final SQL: " + pred.error;
  return o;
}

}  // namespace detail

double overlong_penalty(int64_t length, int64_t cap, int64_t buffer) {
  check(buffer > 0 && buffer <= cap, "overlong penalty: buffer ", buffer, " must be in (0, cap ", cap, "]");
  if (length <= cap - buffer) return 0.0;
  if (length > cap) return -1.0;
  return static_cast<double>(cap - buffer - length) / static_cast<double>(buffer);
}

namespace {

void add_optional_term(RewardPanel& panel, const char* name, double weight) {
  for (const RewardTerm& t : panel.terms)
    check(t.name != name, "reward panel '", panel.name, "' has a term '", name, "' already");
  check(std::isfinite(weight), "reward term '", name, "': weight must be a finite number, got ", weight);
  panel.terms.push_back({name, weight});
}

}  // namespace

void add_overlong_term(RewardPanel& panel, double weight) { add_optional_term(panel, "overlong", weight); }
void add_executed_term(RewardPanel& panel, double weight) { add_optional_term(panel, "executed", weight); }

double executed_term(const Trajectory& traj) {
  if (!traj.has_final_sql()) return 0.0;
  return traj.answer_was_executed() ? 1.0 : -1.0;
}

void score(const RewardPanel& panel, const sql::Example& example, Trajectory& traj, RewardContext& ctx) {
  detail::Outcome outcome = detail::final_outcome(example, traj, ctx);
  traj.note_infra_failure(outcome.infra_failure, "scoring", outcome.infra_reason);
  std::vector<double> raw = find_paper(panel.name, "reward panel").score(example, traj, outcome, ctx);
  check(raw.size() <= panel.terms.size(), "reward panel '", panel.name, "': ", panel.terms.size(),
        " terms configured, the scorer gives ", raw.size());
  for (size_t i = raw.size(); i < panel.terms.size(); ++i) {  // the optional terms, after the paper's
    const std::string& name = panel.terms[i].name;
    if (name == "overlong")
      raw.push_back(overlong_penalty(static_cast<int64_t>(traj.tokens.size()), ctx.overlong_cap, ctx.overlong_buffer));
    else if (name == "executed")
      raw.push_back(executed_term(traj));
    else
      fail("reward panel '", panel.name, "': term '", name, "' is not one the scorer computes");
  }
  traj.reward = 0;
  traj.reward_terms.clear();
  for (size_t i = 0; i < raw.size(); ++i) {
    double v = panel.terms[i].weight * raw[i];
    traj.reward_terms.emplace_back(panel.terms[i].name, v);
    traj.reward += v;
  }
}

void score_batch(const RewardPanel& panel, const std::vector<sql::Example>& examples, std::vector<Trajectory>& trajs,
                 RewardContext& ctx) {
  for (const Trajectory& t : trajs)
    check(t.example_index >= 0 && static_cast<size_t>(t.example_index) < examples.size(), "score_batch: trajectory ",
          "example_index ", t.example_index, " past ", examples.size(), " examples");
  ThreadPool& workers = ctx.workers ? *ctx.workers : default_thread_pool();
  // Distinct golds first, so that the G samples of a prompt never race to run the same gold.
  std::vector<size_t> firsts;
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < trajs.size(); ++i) {
    const sql::Example& e = examples[trajs[i].example_index];
    if (seen.emplace(e.db_path, e.gold_sql).second) firsts.push_back(i);
  }
  workers.parallel_for(firsts.size(), 1, [&](size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k) {
      const sql::Example& e = examples[trajs[firsts[k]].example_index];
      ctx.gold.get(e.db_path, detail::exec_text(ctx, e.gold_sql));
      detail::gold_facts(ctx, e);
    }
  });
  workers.parallel_for(trajs.size(), 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) score(panel, examples[trajs[i].example_index], trajs[i], ctx);
  });
}

}  // namespace sqlrl::rl
