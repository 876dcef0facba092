// Scoring of finished trajectories for evaluation: EX of the final SQL in the context's mode
// (Spider: the test-suite evaluation's preprocessing and result_eq, on every database file of
// the example's folder; BIRD: set equality on the example's file), Spider exact-set match where the gold parses, and
// the result hash the majority vote groups by. The gold side and the parsed schemas come from the reward caches, so the
// numbers agree with what training rewarded.
#include <filesystem>
#include <set>
#include <string_view>

#include "rl/eval/eval.h"
#include "rl/agent/reward_detail.h"
#include "runtime/error.h"
#include "sql/exec/compare.h"
#include "sql/eval/eval_spider.h"
#include "sql/eval/eval_spider_exec.h"

namespace fs = std::filesystem;

namespace sqlrl::rl {

namespace {

// Test-suite EX: the official script runs the pair on every file of the database's folder whose
// name contains ".sqlite" (the test-suite distribution ships several per database) and needs
// them all to agree. The example's own file has been compared already; this checks the others.
// A gold that fails on one of them is an error in the official script; here the sample is wrong.
bool agrees_on_test_suite(const sql::Example& example, const std::string& pred, RewardContext& ctx) {
  const fs::path own = example.db_path;
  if (own.filename().string().find(".sqlite") == std::string::npos) return true;  // not a Spider layout
  std::vector<std::string> others;
  for (const std::string& f : sql::sqlite_files_in(own.parent_path().string()))
    if (fs::path(f).filename() != own.filename()) others.push_back(f);
  if (others.empty()) return true;
  sql::SpiderExecOptions options;
  options.keep_distinct = ctx.keep_distinct;
  options.limits = ctx.limits;
  try {
    return sql::spider_exec_match(ctx.pool, others, pred, example.gold_sql, options) == 1;
  } catch (const Error&) {
    return false;
  }
}

struct Judged {
  sql::Result result;
  bool executable = false, ex = false;
};

// One query judged as the evaluation judges an answer: executable (ran, no second statement), its
// result matching the gold's in the context's mode, and for Spider on every file of the folder.
Judged judge(const sql::Example& example, const std::string& query, const std::string& gold_text,
             const sql::Result& gold, RewardContext& ctx) {
  Judged j;
  j.result = ctx.pool.execute(example.db_path, detail::exec_text(ctx, query), ctx.limits);
  // As the reward's final_outcome: a second statement is refused by Python's sqlite3 (the
  // papers' evaluators), so the answer is not executable; a result cut at the row cap ran, but
  // never matches and never votes (its hash is 0).
  j.executable = j.result.ok() && j.result.ignored_tail.empty();
  sql::CompareOptions compare;
  compare.mode = ctx.mode;
  compare.order_matters = ctx.mode == sql::CompareMode::Spider && sql::gold_has_order_by(gold_text);
  j.ex = j.executable && sql::results_match(j.result, gold, compare);
  if (j.ex && ctx.mode == sql::CompareMode::Spider) j.ex = agrees_on_test_suite(example, query, ctx);
  return j;
}

}  // namespace

SampleOutcome score_sample(const sql::Example& example, const Trajectory& traj, RewardContext& ctx) {
  SampleOutcome o;
  o.answered = traj.answered;
  o.format_ok = traj.answered && !traj.truncated && traj.invalid_actions == 0;
  o.turns = static_cast<int64_t>(traj.turns.size());
  const TurnRecord *first = nullptr, *last = nullptr;  // the executed queries (MemoryRetrieve runs no SQL of the model's)
  for (const TurnRecord& turn : traj.turns) {
    o.sql_calls += turn.executed ? 1 : 0;
    if (turn.executed && turn.action.kind == ActionKind::ExecSql) {
      if (!first) first = &turn;
      last = &turn;
    }
  }
  o.executed_sql = first != nullptr;
  o.copy_checked = o.executed_sql && traj.answered;
  o.copy_error = o.copy_checked && !same_sql(traj.final_sql, last->action.sql);
  o.seconds = traj.decode_seconds + traj.sql_seconds;
  o.infra_failure = traj.infra_failure;
  const bool final_sql = traj.has_final_sql();  // a protocol's fallback answer is scored as the papers' code does
  if (!final_sql && !o.executed_sql) return o;

  const std::string gold_text = detail::exec_text(ctx, example.gold_sql);
  std::shared_ptr<const sql::Result> gold = ctx.gold.get(example.db_path, gold_text);
  if (final_sql) {
    Judged pred = judge(example, traj.final_sql, gold_text, *gold, ctx);
    o.executable = pred.executable;
    o.ex = pred.ex;
    o.infra_failure = o.infra_failure || gold->infra_error || pred.result.infra_error;
    // Set semantics for every mode: two answers vote together when they return the same rows,
    // whatever the order (which the gold, not the sample, says whether it matters).
    o.result_hash = o.executable ? sql::result_hash(pred.result, false) : 0;
  }
  // An executed query's EX: the answer's when it is the same text; a query that failed in its
  // turn is not run again (it was not executable then).
  auto executed_ex = [&](const TurnRecord& turn) {
    if (final_sql && same_sql(turn.action.sql, traj.final_sql)) return o.ex;
    if (turn.sql_error) return false;
    Judged j = judge(example, turn.action.sql, gold_text, *gold, ctx);
    o.infra_failure = o.infra_failure || j.result.infra_error;
    return j.ex;
  };
  if (o.executed_sql) {
    o.first_ex = executed_ex(*first);
    o.last_ex = last == first ? o.first_ex : executed_ex(*last);
  }
  if (!final_sql) return o;

  std::shared_ptr<const detail::GoldFacts> gold_facts = detail::gold_facts(ctx, example);
  if (gold_facts->q.parsed) {
    detail::QueryFacts facts = detail::query_facts(*detail::db_facts(ctx, example.db_path), traj.final_sql);
    o.em = facts.parsed && sql::spider_match(facts.rebuilt, gold_facts->q.rebuilt).exact;
  }
  return o;
}

std::vector<ExampleResult> score_examples(const std::vector<sql::Example>& examples,
                                          const std::vector<Trajectory>& trajs, int64_t samples, EvalMode mode,
                                          RewardContext& ctx) {
  check(samples >= 1, "eval: samples must be at least 1, got ", samples);
  check(trajs.size() == examples.size() * static_cast<size_t>(samples), "eval: ", trajs.size(), " trajectories for ",
        examples.size(), " examples x ", samples, " samples");
  for (size_t i = 0; i < trajs.size(); ++i)
    check(trajs[i].example_index == static_cast<int64_t>(i) / samples, "eval: trajectory ", i, " is for example ",
          trajs[i].example_index, ", expected ", static_cast<int64_t>(i) / samples, " ((example, sample) order)");
  ThreadPool& workers = ctx.workers ? *ctx.workers : default_thread_pool();

  // Each distinct gold once (result and parse) before the samples, so no two threads race to
  // run the same gold query.
  std::vector<size_t> firsts;
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t e = 0; e < examples.size(); ++e)
    if (seen.emplace(examples[e].db_path, examples[e].gold_sql).second) firsts.push_back(e);
  workers.parallel_for(firsts.size(), 1, [&](size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k) {
      const sql::Example& ex = examples[firsts[k]];
      ctx.gold.get(ex.db_path, detail::exec_text(ctx, ex.gold_sql));
      detail::gold_facts(ctx, ex);
    }
  });

  std::vector<SampleOutcome> outcomes(trajs.size());
  workers.parallel_for(trajs.size(), 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) outcomes[i] = score_sample(examples[trajs[i].example_index], trajs[i], ctx);
  });

  std::vector<ExampleResult> results(examples.size());
  for (size_t e = 0; e < examples.size(); ++e) {
    ExampleResult& r = results[e];
    r.example_index = e;
    r.samples.assign(outcomes.begin() + static_cast<ptrdiff_t>(e * samples),
                     outcomes.begin() + static_cast<ptrdiff_t>((e + 1) * samples));
    r.gold_error = !ctx.gold.get(examples[e].db_path, detail::exec_text(ctx, examples[e].gold_sql))->ok();
    r.gold_parsed = detail::gold_facts(ctx, examples[e])->q.parsed;
    choose_prediction(r, mode);
    const Trajectory& chosen = trajs[e * samples + static_cast<size_t>(r.chosen)];
    r.prediction = chosen.has_final_sql() ? chosen.final_sql : "";
    r.turns = chosen.turns;
  }
  return results;
}

}  // namespace sqlrl::rl
