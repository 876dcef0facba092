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

}  // namespace

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
                            const DataSchedule& schedule, DataCursor& cursor, SchemaCache& schemas, const Comm& comm) {
  const TrainConfig& c = env.config;
  const int64_t B = c.batch_size, G = c.group_size, W = comm.world_size;
  const int64_t first_prompt = comm.rank * B / W, end_prompt = (comm.rank + 1) * B / W;
  StepBatch out;
  out.first_draw = cursor.draws, out.epoch = cursor_epoch(schedule, cursor), out.level = cursor.level;
  const int64_t tries = c.dynamic_sampling ? c.dynamic_sampling_max_tries : 1;
  int64_t informative_before = 0;  // every rank's, in earlier tries
  for (int64_t t = 0; t < tries && (t == 0 || informative_before < B); ++t) {
    // Every rank draws the whole batch (the cursor stays the same everywhere) and rolls out its share.
    const int64_t first_draw = cursor.draws;
    std::vector<int64_t> drawn;
    for (int64_t i = 0; i < B; ++i) drawn.push_back(draw_example(schedule, cursor, c.seed));
    const std::vector<int64_t> mine_ids(drawn.begin() + first_prompt, drawn.begin() + end_prompt);
    std::vector<sql::Example> mine;
    for (int64_t id : mine_ids) mine.push_back(env.examples[static_cast<size_t>(id)]);
    RolloutOptions ro = base;
    ro.first_sample_id = static_cast<uint64_t>((first_draw + first_prompt) * G);
    std::vector<RolloutRequest> requests;
    for (const sql::Example& ex : mine)
      requests.push_back({&ex, build_prompt_tokens(*env.protocol, *env.tokenizer, ex, schemas.get(*env.pool, ex.db_path), ro)});
    RolloutStats stats;
    std::vector<Trajectory> trajs = rollout(policy, *env.tokenizer, *env.protocol, *env.pool, requests, ro, &stats, &kv);
    add_rollout_stats(out.rollout, stats);
    const auto score_start = std::chrono::steady_clock::now();
    std::vector<uint8_t> ex;
    env.score(mine, trajs, &ex);
    out.score_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - score_start).count();
    const std::vector<double> sums = trajectory_sums(trajs, &ex, env.panel);
    if (out.sums.empty()) out.sums.assign(sums.size(), 0.0);
    for (size_t k = 0; k < sums.size(); ++k) out.sums[k] += sums[k];
    ++out.dynamic.tries;
    out.dynamic.prompts += B;
    if (!c.dynamic_sampling) {
      out.examples = std::move(mine), out.example_ids = mine_ids, out.trajs = std::move(trajs), out.ex = std::move(ex);
      break;
    }
    // Which of this rank's groups vary, and how many every rank has (in rank order).
    const int64_t P = static_cast<int64_t>(mine.size());
    std::vector<std::vector<float>> rewards(static_cast<size_t>(P));
    // As select_trajectories judges a group: over its samples that did not fail for the machine.
    for (const Trajectory& tr : trajs)
      if (!(c.exclude_infra_failures && tr.infra_failure))
        rewards[static_cast<size_t>(tr.example_index)].push_back(static_cast<float>(tr.reward));
    std::vector<uint8_t> varies(static_cast<size_t>(P));
    int64_t mine_informative = 0;
    for (int64_t p = 0; p < P; ++p) mine_informative += varies[p] = rewards[p].size() >= 2 && rewards_vary(rewards[p]);
    std::vector<double> per_rank(static_cast<size_t>(W), 0.0);
    per_rank[static_cast<size_t>(comm.rank)] = static_cast<double>(mine_informative);
    comm_sum_in_rank_order(comm, per_rank);
    int64_t before_me = informative_before;
    for (int64_t r = 0; r < comm.rank; ++r) before_me += static_cast<int64_t>(per_rank[r]);
    // Keep the first B informative groups of the step in draw order (tries, then ranks, then prompts).
    int64_t quota = std::clamp<int64_t>(B - before_me, 0, mine_informative);
    std::vector<int64_t> new_index(static_cast<size_t>(P), -1);
    for (int64_t p = 0; p < P && quota > 0; ++p)
      if (varies[p]) {
        new_index[p] = static_cast<int64_t>(out.examples.size());
        out.examples.push_back(mine[p]), out.example_ids.push_back(mine_ids[p]), --quota;
      }
    for (size_t i = 0; i < trajs.size(); ++i) {
      const int64_t to = new_index[static_cast<size_t>(trajs[i].example_index)];
      if (to < 0) continue;
      trajs[i].example_index = to;
      out.trajs.push_back(std::move(trajs[i]));
      out.ex.push_back(ex[i]);
    }
    for (double x : per_rank) informative_before += static_cast<int64_t>(x);
  }
  out.dynamic.informative_groups = c.dynamic_sampling ? informative_before : 0;
  out.dynamic.kept_groups = c.dynamic_sampling ? std::min(informative_before, B) : B;
  return out;
}

}  // namespace sqlrl::rl
