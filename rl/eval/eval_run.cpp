// run_eval: prompts -> rollout (batch by batch) -> scoring -> summary.
#include <chrono>
#include <cstdio>

#include "rl/eval/eval.h"
#include "runtime/comm.h"
#include "runtime/error.h"
#include "runtime/progress.h"

namespace sqlrl::rl {


EvalRun run_eval(const QwenModel& model, const Tokenizer& tokenizer, const Protocol& protocol, sql::Pool& pool,
                 const std::vector<sql::Example>& examples, const EvalOptions& options, RewardContext& ctx) {
  return run_eval(cpu_policy(model), tokenizer, protocol, pool, examples, options, ctx);
}

EvalRun run_eval(const Policy& model, const Tokenizer& tokenizer, const Protocol& protocol, sql::Pool& pool,
                 const std::vector<sql::Example>& examples, const EvalOptions& options, RewardContext& ctx) {
  check(options.samples >= 1, "eval: samples must be at least 1, got ", options.samples);
  check(options.mode != EvalMode::Greedy || options.samples == 1, "eval: greedy decoding takes one sample, got ",
        options.samples);
  check(options.batch_questions >= 1, "eval: batch_questions must be at least 1, got ", options.batch_questions);
  const auto start = std::chrono::steady_clock::now();
  RolloutOptions ro = options.rollout;
  ro.group_size = options.samples;
  if (options.mode == EvalMode::Greedy) ro.sampling.temperature = 0.0f;
  if (options.single_turn) {
    // One assistant turn and nothing executed: the SQL it writes (as a query or as the answer)
    // is the answer, as SkyRL-SQL's single-turn evaluation (Table 1).
    ro.single_turn = true;
    ro.max_turns = 1;
  }

  EvalRun run;
  const size_t batch = static_cast<size_t>(options.batch_questions);
  SchemaCache schemas;
  Progress bar = progress_start(options.progress_label, "questions", static_cast<int64_t>(examples.size()));
  int64_t right = 0;
  for (size_t begin = 0; begin < examples.size(); begin += batch) {
    const size_t end = std::min(examples.size(), begin + batch);
    std::vector<sql::Example> part(examples.begin() + static_cast<ptrdiff_t>(begin),
                                   examples.begin() + static_cast<ptrdiff_t>(end));
    std::vector<RolloutRequest> requests;
    for (const sql::Example& ex : part)
      requests.push_back({&ex, build_prompt_tokens(protocol, tokenizer, ex, schemas.get(pool, ex.db_path), ro)});
    RolloutOptions batch_options = ro;
    // Streams as if every question were in one rollout: a question's samples do not depend on
    // where the batches are cut.
    batch_options.first_sample_id = ro.first_sample_id + begin * static_cast<uint64_t>(options.samples);
    RolloutStats stats;
    std::vector<Trajectory> trajs =
        rollout(model, tokenizer, protocol, pool, requests, batch_options, &stats, options.kv);
    add_rollout_stats(run.stats, stats);
    std::vector<ExampleResult> scored = score_examples(part, trajs, options.samples, options.mode, ctx);
    for (ExampleResult& r : scored) {
      r.example_index += begin;
      right += r.correct ? 1 : 0;
      run.results.push_back(std::move(r));
    }
    if (options.progress) {
      char ex[48];
      std::snprintf(ex, sizeof ex, "EX %.1f%%", 100.0 * static_cast<double>(right) / static_cast<double>(run.results.size()));
      progress_update(bar, static_cast<int64_t>(end), ex);
    }
  }
  if (options.progress) progress_finish(bar);
  run.summary = summarize(examples, run.results, options.samples, options.dialogue);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

namespace {

// An ExampleResult as JSON and back, every field (doubles round-trip exactly): how ranks hand
// their results to each other.
nlohmann::json result_json(const ExampleResult& r) {
  nlohmann::json samples = nlohmann::json::array(), turns = nlohmann::json::array();
  for (const SampleOutcome& o : r.samples)
    samples.push_back({o.answered, o.format_ok, o.executable, o.ex, o.em, o.result_hash, o.turns, o.sql_calls,
                       o.seconds, o.infra_failure, o.executed_sql, o.copy_checked, o.copy_error, o.first_ex, o.last_ex});
  for (const TurnRecord& t : r.turns)
    turns.push_back({t.assistant_text, static_cast<int>(t.action.kind), t.action.sql, t.action.tool, t.action.verdict,
                     t.action.error, t.observation, t.executed, t.sql_error, t.rows, t.sql_seconds, t.infra_error});
  return {r.example_index, samples, r.chosen, r.prediction, r.correct, r.em, r.gold_parsed, r.gold_error,
          r.num_correct, r.votes, turns, r.seconds};
}

ExampleResult result_from_json(const nlohmann::json& j) {
  ExampleResult r;
  r.example_index = j[0].get<size_t>();
  for (const auto& o : j[1])
    r.samples.push_back({o[0].get<bool>(), o[1].get<bool>(), o[2].get<bool>(), o[3].get<bool>(), o[4].get<bool>(),
                         o[5].get<uint64_t>(), o[6].get<int64_t>(), o[7].get<int64_t>(), o[8].get<double>(),
                         o[9].get<bool>(), o[10].get<bool>(), o[11].get<bool>(), o[12].get<bool>(),
                         o[13].get<bool>(), o[14].get<bool>()});
  r.chosen = j[2].get<int64_t>();
  r.prediction = j[3].get<std::string>();
  r.correct = j[4].get<bool>(), r.em = j[5].get<bool>(), r.gold_parsed = j[6].get<bool>();
  r.gold_error = j[7].get<bool>();
  r.num_correct = j[8].get<int64_t>(), r.votes = j[9].get<int64_t>();
  for (const auto& t : j[10]) {
    TurnRecord turn;
    turn.assistant_text = t[0].get<std::string>();
    turn.action.kind = static_cast<ActionKind>(t[1].get<int>());
    turn.action.sql = t[2].get<std::string>(), turn.action.tool = t[3].get<std::string>();
    turn.action.verdict = t[4].get<std::string>(), turn.action.error = t[5].get<std::string>();
    turn.observation = t[6].get<std::string>();
    turn.executed = t[7].get<bool>(), turn.sql_error = t[8].get<bool>();
    turn.rows = t[9].get<int64_t>(), turn.sql_seconds = t[10].get<double>();
    turn.infra_error = t[11].get<bool>();
    r.turns.push_back(std::move(turn));
  }
  r.seconds = j[11].get<double>();
  return r;
}

}  // namespace

EvalRun run_eval(const Policy& policy, const Tokenizer& tokenizer, const Protocol& protocol, sql::Pool& pool,
                 const std::vector<sql::Example>& examples, const EvalOptions& options, RewardContext& ctx,
                 const Comm& comm) {
  if (comm.world_size == 1) return run_eval(policy, tokenizer, protocol, pool, examples, options, ctx);
  const auto start = std::chrono::steady_clock::now();
  const size_t E = examples.size(), W = static_cast<size_t>(comm.world_size), r = static_cast<size_t>(comm.rank);
  const size_t lo = r * E / W, hi = (r + 1) * E / W;
  std::vector<sql::Example> mine(examples.begin() + static_cast<ptrdiff_t>(lo),
                                 examples.begin() + static_cast<ptrdiff_t>(hi));
  EvalOptions o = options;
  o.rollout.first_sample_id += lo * static_cast<uint64_t>(options.samples);  // the streams of their global index
  o.progress = options.progress && comm.is_root();
  EvalRun part;
  if (!mine.empty()) part = run_eval(policy, tokenizer, protocol, pool, mine, o, ctx);
  nlohmann::json out = nlohmann::json::array();
  for (ExampleResult& res : part.results) {
    res.example_index += lo;
    out.push_back(result_json(res));
  }
  const RolloutStats& s = part.stats;
  nlohmann::json stats = {s.sampled_tokens, s.injected_tokens, s.prompt_tokens, s.sql_calls, s.sql_errors,
                          s.decode_seconds, s.prefill_seconds, s.sql_seconds, s.wall_seconds, s.decode_steps,
                          s.kv_blocks, s.kv_blocks_peak, s.sql_infra_errors, s.prefill_tokens,
                          s.preemptions, s.preempted_tokens, s.live_sum, s.live_steps, s.live_max};
  const std::vector<std::string> all = comm_all_gather_bytes(comm, nlohmann::json{out, stats}.dump());
  EvalRun run;
  for (const std::string& text : all) {  // rank order = dataset order
    const nlohmann::json j = nlohmann::json::parse(text);
    for (const auto& res : j[0]) run.results.push_back(result_from_json(res));
    const auto& t = j[1];
    RolloutStats rs;
    rs.sampled_tokens = t[0], rs.injected_tokens = t[1], rs.prompt_tokens = t[2], rs.sql_calls = t[3];
    rs.sql_errors = t[4], rs.decode_seconds = t[5], rs.prefill_seconds = t[6], rs.sql_seconds = t[7];
    rs.wall_seconds = t[8], rs.decode_steps = t[9], rs.kv_blocks = t[10], rs.kv_blocks_peak = t[11];
    rs.sql_infra_errors = t[12], rs.prefill_tokens = t[13];
    rs.preemptions = t[14], rs.preempted_tokens = t[15], rs.live_sum = t[16], rs.live_steps = t[17];
    rs.live_max = t[18];
    add_rollout_stats(run.stats, rs);
  }
  check(run.results.size() == E, "eval: the ranks returned ", run.results.size(), " results for ", E, " questions");
  run.summary = summarize(examples, run.results, options.samples, options.dialogue);
  std::vector<double> seconds{std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  comm_all_reduce_max(comm, seconds.data(), 1);
  run.seconds = seconds[0];
  return run;
}

}  // namespace sqlrl::rl
