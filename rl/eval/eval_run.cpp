// run_eval: prompts -> rollout (batch by batch) -> scoring -> summary.
#include <chrono>
#include <cstdio>

#include "rl/eval/eval.h"
#include "runtime/error.h"

namespace sqlrl::rl {

namespace {

void add_stats(RolloutStats& into, const RolloutStats& s) {
  into.sampled_tokens += s.sampled_tokens;
  into.injected_tokens += s.injected_tokens;
  into.prompt_tokens += s.prompt_tokens;
  into.sql_calls += s.sql_calls;
  into.sql_errors += s.sql_errors;
  into.decode_seconds += s.decode_seconds;
  into.prefill_seconds += s.prefill_seconds;
  into.sql_seconds += s.sql_seconds;
  into.wall_seconds += s.wall_seconds;
  into.decode_steps += s.decode_steps;
  into.kv_blocks = std::max(into.kv_blocks, s.kv_blocks);
  into.kv_blocks_peak = std::max(into.kv_blocks_peak, s.kv_blocks_peak);
}

}  // namespace

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
    std::vector<Trajectory> trajs = rollout(model, tokenizer, protocol, pool, requests, batch_options, &stats);
    add_stats(run.stats, stats);
    std::vector<ExampleResult> scored = score_examples(part, trajs, options.samples, options.mode, ctx);
    for (ExampleResult& r : scored) {
      r.example_index += begin;
      run.results.push_back(std::move(r));
    }
    if (options.progress) {
      int64_t right = 0;
      for (const ExampleResult& r : run.results) right += r.correct ? 1 : 0;
      std::fprintf(stderr, "eval: %zu/%zu questions, EX %.1f%%\n", end, examples.size(),
                   100.0 * static_cast<double>(right) / static_cast<double>(run.results.size()));
    }
  }
  run.summary = summarize(examples, run.results, options.samples, options.dialogue);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

}  // namespace sqlrl::rl
