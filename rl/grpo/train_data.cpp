#include "rl/grpo/train_data.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "rl/eval/eval.h"
#include "rl/grpo/difficulty.h"
#include "rl/grpo/grpo.h"
#include "rl/grpo/train_log.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace fs = std::filesystem;

namespace sqlrl::rl {
namespace {

// Philox key of the difficulty pre-pass: its samples must not be step 1's (same seed, same ids).
constexpr uint64_t kDifficultyKey = 0x444946464943ull;  // "DIFFIC"

std::vector<Difficulty> measure_difficulty(TrainEnv& env, const Policy& policy, PolicyKV& kv,
                                           const RolloutOptions& base, const Comm& comm, bool quiet) {
  const TrainConfig& c = env.config;
  check(env.reward_context != nullptr, "train: the difficulty pre-pass needs the environment's reward context (EX)");
  EvalOptions o;
  o.mode = EvalMode::PassK;
  o.samples = c.difficulty_samples;
  o.rollout = base;
  o.rollout.sampling.seed = c.seed ^ kDifficultyKey;
  o.rollout.first_sample_id = 0;
  o.batch_questions = std::max<int64_t>(1, base.max_batch_sequences / c.difficulty_samples);
  o.progress = !quiet;
  o.progress_label = "difficulty";
  o.kv = &kv;
  if (!quiet)
    std::printf("difficulty: %lld samples of each of %zu training questions at temperature %g\n",
                static_cast<long long>(c.difficulty_samples), env.examples.size(), c.temperature);
  EvalRun run = run_eval(policy, *env.tokenizer, *env.protocol, *env.pool, env.examples, o, *env.reward_context, comm);
  return difficulty_of(env.examples, run.results, c.difficulty_metric == "ex-em");
}

// Scores `trajs` (EX into `ex`) and adds their trajectory_sums and the seconds to `out`.
void add_score(TrainEnv& env, const std::vector<sql::Example>& examples, std::vector<Trajectory>& trajs,
               std::vector<uint8_t>& ex, StepBatch& out) {
  const auto score_start = std::chrono::steady_clock::now();
  env.score(examples, trajs, &ex);
  out.score_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - score_start).count();
  const std::vector<double> sums = trajectory_sums(trajs, &ex, env.panel);
  if (out.sums.empty()) out.sums.assign(sums.size(), 0.0);
  for (size_t i = 0; i < sums.size(); ++i) out.sums[i] += sums[i];
}

}  // namespace

void score_step_batch(TrainEnv& env, StepBatch& b) {
  if (b.scored) return;
  add_score(env, b.examples, b.trajs, b.ex, b);
  b.scored = true;
}

DataSchedule make_data_schedule(TrainEnv& env, const Policy& policy, PolicyKV& kv, const RolloutOptions& base,
                                const Comm& comm, bool owner, bool quiet, nlohmann::ordered_json* summary) {
  const TrainConfig& c = env.config;
  const int64_t n = static_cast<int64_t>(env.examples.size());
  const bool curate = c.curate != "off", curriculum = c.curriculum_bin_size > 0;
  if (!curate && !curriculum && c.difficulty_samples == 0) return whole_dataset_schedule(n);

  const fs::path run = c.resume.empty() ? c.out : c.resume;
  const std::string saved = (run / "difficulty.jsonl").string();
  std::vector<Difficulty> d;
  if (fs::exists(saved)) {
    d = read_difficulty_jsonl(saved, env.examples);
  } else if (!c.difficulty_file.empty()) {
    d = read_difficulty_jsonl(c.difficulty_file, env.examples);
  } else {
    check(c.difficulty_samples >= 2, "train: curate / curriculum need difficulty-samples >= 2 or a difficulty-file");
    d = measure_difficulty(env, policy, kv, base, comm, quiet);
  }
  if (owner && !fs::exists(saved)) write_text_atomic(saved, difficulty_jsonl(env.examples, d));

  DataSchedule s;
  ScheduleCounts counts = count_pass_rates(d);
  if (curate) {
    s.levels.push_back(curate_pass_at_g(d, c.curate_keep, c.curate_unsolved, &counts));
    check(!s.levels[0].empty(), "train: curate pass-at-g keeps no question: of ", n, " questions ", counts.always,
          " were solved by all ", c.difficulty_samples, " samples and ", counts.never,
          " by none (curate-unsolved N keeps never-solved ones)");
  } else if (curriculum) {
    s.levels = curriculum_levels(d, c.curriculum_bin_size, &counts);
    check(!s.levels.empty(), "train: the curriculum is empty: all ", n, " questions were solved by every sample");
    s.level_epochs = c.curriculum_level_epochs;
    s.promote_at = c.curriculum_promote_at;
    s.window = c.curriculum_window;
  } else {
    s = whole_dataset_schedule(n);
    counts.kept = n;
  }
  nlohmann::ordered_json j;
  j["schedule"] = curate ? "pass-at-g" : curriculum ? "curriculum" : "whole";
  j["questions"] = n;
  j["always_solved"] = counts.always;
  j["never_solved"] = counts.never;
  j["sometimes_solved"] = counts.sometimes;
  j["kept"] = counts.kept;
  j["level_sizes"] = nlohmann::ordered_json::array();
  nlohmann::ordered_json ids = nlohmann::ordered_json::array();
  for (const auto& level : s.levels) {
    j["level_sizes"].push_back(level.size());
    nlohmann::ordered_json l = nlohmann::ordered_json::array();
    for (int64_t i : level) l.push_back(env.examples[static_cast<size_t>(i)].id);
    ids.push_back(l);
  }
  j["levels"] = ids;
  if (!quiet) {
    std::printf("data: %s: %lld questions solved by all samples, %lld by none, %lld by some; training on %lld",
                j["schedule"].get<std::string>().c_str(), static_cast<long long>(counts.always),
                static_cast<long long>(counts.never), static_cast<long long>(counts.sometimes),
                static_cast<long long>(counts.kept));
    if (s.levels.size() > 1) std::printf(" in %zu levels", s.levels.size());
    std::printf("\n");
  }
  if (summary) *summary = j;
  return s;
}

StepBatch sample_step_batch(TrainEnv& env, const Policy& policy, PolicyKV& kv, const RolloutOptions& base,
                            const DataSchedule& schedule, DataCursor& cursor, SchemaCache& schemas, const Comm& comm,
                            bool defer_score) {
  return std::move(sample_step_units(
      env, policy, kv, base, schedule, cursor, schemas, {comm.rank}, comm.world_size,
      [&](std::vector<double>& per_rank) { comm_sum_in_rank_order(comm, per_rank); }, defer_score)[0]);
}

std::vector<StepBatch> sample_step_units(TrainEnv& env, const Policy& policy, PolicyKV& kv, const RolloutOptions& base,
                                         const DataSchedule& schedule, DataCursor& cursor, SchemaCache& schemas,
                                         const std::vector<int>& units, int V, const SumCounts& sum_counts,
                                         bool defer_score) {
  const TrainConfig& c = env.config;
  const int64_t B = c.batch_size, G = c.group_size;
  std::vector<StepBatch> outs(units.size());
  for (StepBatch& out : outs)
    out.first_draw = cursor.draws, out.epoch = cursor_epoch(schedule, cursor), out.level = cursor.level;
  // What a unit's try leaves for the keep phase, once every unit's informative groups are counted.
  struct Try {
    std::vector<int64_t> ids;
    std::vector<sql::Example> examples;
    std::vector<Trajectory> trajs;
    std::vector<uint8_t> ex, varies;
    int64_t informative = 0;
  };
  const int64_t tries = c.dynamic_sampling ? c.dynamic_sampling_max_tries : 1;
  int64_t informative_before = 0;  // every unit's, in earlier tries
  for (int64_t t = 0; t < tries && (t == 0 || informative_before < B); ++t) {
    // The whole batch is drawn once (every rank draws it, so the cursor stays the same everywhere);
    // each unit rolls out its share.
    const int64_t first_draw = cursor.draws;
    std::vector<int64_t> drawn;
    for (int64_t i = 0; i < B; ++i) drawn.push_back(draw_example(schedule, cursor, c.seed));
    std::vector<Try> done(units.size());
    std::vector<double> per_unit(static_cast<size_t>(V), 0.0);
    for (size_t k = 0; k < units.size(); ++k) {
      StepBatch& out = outs[k];
      Try& d = done[k];
      const int64_t first_prompt = units[k] * B / V, end_prompt = (units[k] + 1) * B / V;
      d.ids.assign(drawn.begin() + first_prompt, drawn.begin() + end_prompt);
      for (int64_t id : d.ids) d.examples.push_back(env.examples[static_cast<size_t>(id)]);
      RolloutOptions ro = base;
      ro.first_sample_id = static_cast<uint64_t>((first_draw + first_prompt) * G);
      std::vector<RolloutRequest> requests;
      for (const sql::Example& ex : d.examples)
        requests.push_back({&ex, build_prompt_tokens(*env.protocol, *env.tokenizer, ex, schemas.get(*env.pool, ex.db_path), ro)});
      RolloutStats stats;
      d.trajs = rollout(policy, *env.tokenizer, *env.protocol, *env.pool, requests, ro, &stats, &kv);
      add_rollout_stats(out.rollout, stats);
      ++out.dynamic.tries;
      out.dynamic.prompts += B;
      if (!c.dynamic_sampling) {
        out.examples = std::move(d.examples), out.example_ids = d.ids, out.trajs = std::move(d.trajs);
        out.scored = false;
        if (!defer_score) score_step_batch(env, out);
        continue;
      }
      add_score(env, d.examples, d.trajs, d.ex, out);
      // Which of this unit's groups vary: as select_trajectories judges a group, over its samples
      // that did not fail for the machine.
      const int64_t P = static_cast<int64_t>(d.examples.size());
      std::vector<std::vector<float>> rewards(static_cast<size_t>(P));
      for (const Trajectory& tr : d.trajs)
        if (!(c.exclude_infra_failures && tr.infra_failure))
          rewards[static_cast<size_t>(tr.example_index)].push_back(static_cast<float>(tr.reward));
      d.varies.assign(static_cast<size_t>(P), 0);
      for (int64_t p = 0; p < P; ++p) d.informative += d.varies[p] = rewards[p].size() >= 2 && rewards_vary(rewards[p]);
      per_unit[static_cast<size_t>(units[k])] = static_cast<double>(d.informative);
    }
    if (!c.dynamic_sampling) break;
    sum_counts(per_unit);  // how many every unit has, in unit order
    for (size_t k = 0; k < units.size(); ++k) {
      StepBatch& out = outs[k];
      Try& d = done[k];
      int64_t before_me = informative_before;
      for (int r = 0; r < units[k]; ++r) before_me += static_cast<int64_t>(per_unit[r]);
      // Keep the first B informative groups of the step in draw order (tries, then units, then prompts).
      int64_t quota = std::clamp<int64_t>(B - before_me, 0, d.informative);
      const int64_t P = static_cast<int64_t>(d.examples.size());
      std::vector<int64_t> new_index(static_cast<size_t>(P), -1);
      for (int64_t p = 0; p < P && quota > 0; ++p)
        if (d.varies[p]) {
          new_index[p] = static_cast<int64_t>(out.examples.size());
          out.examples.push_back(d.examples[p]), out.example_ids.push_back(d.ids[p]), --quota;
        }
      for (size_t i = 0; i < d.trajs.size(); ++i) {
        const int64_t to = new_index[static_cast<size_t>(d.trajs[i].example_index)];
        if (to < 0) continue;
        d.trajs[i].example_index = to;
        out.trajs.push_back(std::move(d.trajs[i]));
        out.ex.push_back(d.ex[i]);
      }
    }
    for (double x : per_unit) informative_before += static_cast<int64_t>(x);
  }
  for (StepBatch& out : outs) {
    out.dynamic.informative_groups = c.dynamic_sampling ? informative_before : 0;
    out.dynamic.kept_groups = c.dynamic_sampling ? std::min(informative_before, B) : B;
  }
  return outs;
}

}  // namespace sqlrl::rl
