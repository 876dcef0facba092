#include "rl/grpo/train_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/error.h"
#include "runtime/json_depth.h"
#include "runtime/file_io.h"
#include "runtime/progress.h"

namespace sqlrl::rl {

std::vector<double> trajectory_sums(const std::vector<Trajectory>& trajs, const std::vector<uint8_t>* ex_flags,
                                    const RewardPanel& panel) {
  double reward = 0, reward_sq = 0, ex = 0, format = 0, answered = 0, truncated = 0, out_of_turns = 0, turns = 0;
  double generated = 0, tokens = 0, invalid = 0;
  std::vector<double> terms(panel.terms.size(), 0.0);
  for (size_t i = 0; i < trajs.size(); ++i) {
    const Trajectory& t = trajs[i];
    reward += t.reward;
    reward_sq += t.reward * t.reward;
    ex += ex_flags && i < ex_flags->size() ? (*ex_flags)[i] : 0;
    format += t.answered && t.invalid_actions == 0 && !t.truncated;
    answered += t.answered;
    truncated += t.truncated;
    out_of_turns += t.out_of_turns;
    turns += static_cast<double>(t.turns.size());
    invalid += static_cast<double>(t.invalid_actions);
    generated += static_cast<double>(t.generated_tokens());
    tokens += static_cast<double>(t.tokens.size());
    for (const auto& [name, value] : t.reward_terms)
      for (size_t k = 0; k < panel.terms.size(); ++k)
        if (panel.terms[k].name == name) terms[k] += value;
  }
  std::vector<double> out{static_cast<double>(trajs.size()), reward, reward_sq, ex, format, answered, truncated,
                          out_of_turns, turns, invalid, generated, tokens};
  out.insert(out.end(), terms.begin(), terms.end());
  return out;
}

nlohmann::ordered_json metrics_json(const StepRecord& r, const RewardPanel& panel) {
  const std::vector<double>& v = r.sums;
  check(v.size() == 12 + panel.terms.size(), "metrics: ", v.size(), " trajectory sums for a panel of ",
        panel.terms.size(), " terms");
  const double count = v[0], reward = v[1], reward_sq = v[2], ex = v[3], format = v[4], answered = v[5];
  const double truncated = v[6], out_of_turns = v[7], turns = v[8], invalid = v[9], generated = v[10], tokens = v[11];
  const double n = std::max<double>(1, count);
  std::vector<double> terms(v.begin() + 12, v.end());
  const double mean = reward / n;
  nlohmann::ordered_json j;
  j["step"] = r.step;
  j["epoch"] = r.epoch;
  j["data_position"] = r.data_position;
  if (r.level > 0) j["curriculum_level"] = r.level;
  if (r.staleness >= 0) j["staleness"] = r.staleness;
  if (r.staleness_min >= 0) j["staleness_min"] = r.staleness_min;
  if (r.staleness_mean >= 0) j["staleness_mean"] = r.staleness_mean;
  if (r.dynamic)
    j["dynamic_sampling"] = {{"tries", r.dynamic->tries},
                             {"prompts", r.dynamic->prompts},
                             {"informative_groups", r.dynamic->informative_groups},
                             {"kept_groups", r.dynamic->kept_groups}};
  j["trajectories"] = static_cast<int64_t>(count);
  j["lr"] = r.grpo.lr;
  j["reward_mean"] = mean;
  j["reward_std"] = std::sqrt(std::max(0.0, reward_sq / n - mean * mean));
  nlohmann::ordered_json term_means = nlohmann::ordered_json::object();
  for (size_t k = 0; k < panel.terms.size(); ++k) term_means[panel.terms[k].name] = terms[k] / n;
  j["reward_terms"] = term_means;
  j["ex"] = ex / n;
  j["format_rate"] = format / n;
  j["answered_rate"] = answered / n;
  j["truncated_rate"] = truncated / n;
  j["out_of_turns_rate"] = out_of_turns / n;
  j["turns_mean"] = turns / n;
  j["invalid_actions_mean"] = invalid / n;
  j["generated_tokens_mean"] = generated / n;
  j["tokens_mean"] = tokens / n;
  j["sql_calls"] = r.rollout.sql_calls;
  j["sql_errors"] = r.rollout.sql_errors;
  j["sql_infra_errors"] = r.rollout.sql_infra_errors;  // of sql_errors, the machine's (rollout turns)
  const FilterCounts& f = r.grpo.filtered;
  // infra: trajectories with an infrastructure failure (rollout or scoring), left out of the
  // baseline and the loss unless exclude-infra-failures is off; infra_groups: groups dropped for it.
  j["filtered"] = {{"infra", f.infra},
                   {"infra_groups", f.infra_groups},
                   {"truncated", f.truncated},
                   {"malformed", f.malformed},
                   {"no_valid_action", f.no_valid_action},
                   {"zero_variance_groups", f.zero_variance_groups},
                   {"zero_variance_trajectories", f.zero_variance_trajectories},
                   {"kept", f.kept},
                   {"groups", f.groups},
                   {"kept_groups", f.kept_groups},
                   {"spared_answers", f.spared_answers}};
  j["loss"] = r.grpo.loss;
  j["grad_norm"] = r.grpo.grad_norm;
  j["grad_norm_max"] = r.grpo.grad_norm_max;
  j["clip_fraction"] = r.grpo.clip_fraction;
  j["approx_kl"] = r.grpo.approx_kl;
  j["entropy"] = r.grpo.entropy;
  j["ratio_mean"] = r.grpo.ratio_mean;
  j["ref_kl"] = r.grpo.ref_kl;
  // KL in the reward: the mean amount taken off a trajectory's reward (absent when off).
  if (r.grpo.kl_in_reward) j["kl_penalty"] = r.grpo.kl_penalty;
  // Sampler vs trainer (rl/grpo/rollout_is.h); tokens 0: not measured this step.
  j["mismatch"] = {{"tokens", r.grpo.mismatch_tokens},
                   {"kl", r.grpo.mismatch_kl},
                   {"k3", r.grpo.mismatch_k3},
                   {"abs_log_ratio", r.grpo.mismatch_abs_log_ratio},
                   {"is_weight_mean", r.grpo.is_weight_mean},
                   {"is_truncated", r.grpo.is_truncated},
                   {"is_masked", r.grpo.is_masked},
                   {"is_masked_sequences", r.grpo.is_masked_sequences}};
  j["updates"] = r.grpo.updates;
  j["trained_tokens"] = r.grpo.tokens;
  j["packed_positions"] = r.grpo.positions;
  const RolloutStats& s = r.rollout;
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  // The rollout engine's schedule (rl/agent/rollout.h): samples live per decode step (holding KV
  // blocks), how full the KV cache got, preemptions. Data parallel: live_mean over every rank's steps, live_max and
  // decode_ms_per_step the slowest rank's, the peak fraction of every rank's blocks together. They
  // follow the cache size, the batch cap and the clock, not what is sampled, so comparisons of
  // runs leave "rollout" out as they leave "time".
  j["rollout"] = {{"decode_ms_per_step", 1000 * ratio(s.decode_seconds, static_cast<double>(s.decode_steps))},
                  {"live_mean", ratio(static_cast<double>(s.live_sum), static_cast<double>(s.live_steps))},
                  {"live_max", s.live_max},
                  {"kv_peak_fraction", ratio(static_cast<double>(s.kv_blocks_peak), static_cast<double>(s.kv_blocks))},
                  {"preemptions", s.preemptions},
                  {"preempted_tokens", s.preempted_tokens}};
  if (s.weight_switches > 0)  // --partial-rollout
    j["rollout"]["weight_switches"] = s.weight_switches, j["rollout"]["switch_recomputed_tokens"] = s.switch_recomputed_tokens;
  if (r.eval) j["eval"] = *r.eval;
  auto rate = [](double count, double seconds) { return seconds > 0 ? count / seconds : 0.0; };
  j["time"] = {{"step_s", r.step_seconds},
               {"rollout_s", s.wall_seconds},
               {"decode_s", s.decode_seconds},
               {"prefill_s", s.prefill_seconds},
               {"sql_s", s.sql_seconds},
               {"score_s", r.score_seconds},
               {"train_s", r.grpo.seconds},
               {"optimizer_s", r.grpo.optimizer_seconds},
               {"comm_s", r.comm_seconds},
               {"rollout_tokens_per_s", rate(static_cast<double>(s.sampled_tokens), s.wall_seconds)},
               {"train_tokens_per_s", rate(static_cast<double>(r.grpo.positions * r.ppo_epochs), r.grpo.seconds)}};
  if (r.eval) j["time"]["eval_s"] = r.eval_seconds;
  if (r.checkpoint_seconds > 0) j["time"]["checkpoint_s"] = r.checkpoint_seconds;
  if (r.overlap_seconds >= 0) {
    j["time"]["overlap_s"] = r.overlap_seconds;
    j["time"]["overlap_fraction"] = ratio(r.overlap_seconds, r.step_seconds);
  }
  if (r.trainer_idle_seconds >= 0) {
    j["time"]["trainer_idle_s"] = r.trainer_idle_seconds;
    j["time"]["trainer_idle_fraction"] = ratio(r.trainer_idle_seconds, r.step_seconds);
    j["time"]["rollout_idle_s"] = r.rollout_idle_seconds;
    j["time"]["rollout_idle_fraction"] = ratio(r.rollout_idle_seconds, r.rollout_wall_seconds);
    j["time"]["weight_sync_s"] = r.weight_sync_seconds;
  }
  return j;
}

nlohmann::ordered_json eval_metrics_json(const nlohmann::ordered_json& summary) {
  nlohmann::ordered_json j;
  j["n"] = summary.at("questions");
  for (const char* key : {"ex", "correct"}) j[key] = summary.at(key);
  nlohmann::ordered_json diff = nlohmann::ordered_json::object();
  for (const auto& [label, t] : summary.at("by_difficulty").items())
    diff[label] = {{"n", t.at("n")}, {"ex", t.at("ex")}, {"correct", t.at("correct")}};
  j["by_difficulty"] = diff;
  for (const char* key : {"answered_rate", "format_error_rate", "avg_turns", "sql_calls_per_question"})
    j[key] = summary.at(key);
  return j;
}

bool is_new_best(const BestEval& best, double ex) { return best.step == 0 || ex > best.ex; }

BestEval best_eval_in(const std::string& metrics_path) {
  BestEval best;
  std::ifstream in(metrics_path, std::ios::binary);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (json_too_deep_at(line) != std::string_view::npos) continue;  // not a line this program wrote
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("eval")) continue;
    double ex = 0;
    int64_t step = 0;
    try {
      ex = j["eval"].at("ex").get<double>();
      step = j.at("step").get<int64_t>();
    } catch (const nlohmann::json::exception& e) {
      fail(metrics_path, ": a line's eval.ex or step: ", e.what());
    }
    if (is_new_best(best, ex)) best = {step, ex};
  }
  return best;
}

void write_best_json(const std::string& run_dir, const BestEval& best) {
  nlohmann::ordered_json j;
  j["step"] = best.step;
  j["eval_ex"] = best.ex;
  j["checkpoint"] = checkpoint_dir("", best.step);
  write_text_atomic((std::filesystem::path(run_dir) / "best.json").string(), j.dump(2) + "\n");
}

std::vector<nlohmann::ordered_json> trajectory_json(const StepRecord& r, int64_t count) {
  const std::vector<Trajectory>& trajs = *r.trajs;
  std::vector<nlohmann::ordered_json> out;
  const int64_t n = static_cast<int64_t>(trajs.size());
  count = std::min(count, n);
  for (int64_t k = 0; k < count; ++k) {
    const Trajectory& t = trajs[static_cast<size_t>(k * n / count)];
    const sql::Example& ex = (*r.examples)[static_cast<size_t>(t.example_index)];
    nlohmann::ordered_json j;
    j["step"] = r.step;
    j["example_id"] = ex.id;
    j["db_id"] = ex.db_id;
    j["question"] = ex.question;
    j["gold_sql"] = ex.gold_sql;
    j["sample"] = t.sample_index;
    nlohmann::ordered_json turns = nlohmann::ordered_json::array();
    for (const TurnRecord& turn : t.turns) {
      nlohmann::ordered_json tj;
      tj["text"] = turn.assistant_text;
      tj["action"] = action_kind_name(turn.action.kind);
      if (!turn.action.sql.empty()) tj["sql"] = turn.action.sql;
      if (!turn.action.tool.empty()) tj["tool"] = turn.action.tool;
      if (!turn.action.verdict.empty()) tj["verdict"] = turn.action.verdict;
      if (!turn.action.error.empty()) tj["error"] = turn.action.error;
      if (turn.executed) tj["rows"] = turn.rows, tj["sql_error"] = turn.sql_error;
      if (turn.infra_error) tj["infra_error"] = true;
      tj["observation"] = turn.observation;
      turns.push_back(tj);
    }
    j["turns"] = turns;
    j["answered"] = t.answered;
    j["truncated"] = t.truncated;
    if (t.infra_failure) j["infra_failure"] = t.infra_reason;
    j["final_sql"] = t.final_sql;
    j["ex"] = r.ex ? (*r.ex)[static_cast<size_t>(k * n / count)] : 0;
    j["reward"] = t.reward;
    nlohmann::ordered_json terms = nlohmann::ordered_json::object();
    for (const auto& [name, value] : t.reward_terms) terms[name] = value;
    j["reward_terms"] = terms;
    j["generated_tokens"] = t.generated_tokens();
    if (t.switch_at >= 0) {  // --partial-rollout: of them, sampled by the next weights
      int64_t after = 0;
      for (size_t i = static_cast<size_t>(t.switch_at); i < t.tokens.size(); ++i) after += t.policy_mask[i];
      j["tokens_after_switch"] = after;
    }
    out.push_back(std::move(j));
  }
  return out;
}

std::string progress_line(const StepRecord& r, int64_t max_steps, double mean_step_seconds, double last_eval_ex) {
  const double count = r.sums.empty() ? 0 : r.sums[0];
  const double reward = r.sums.size() > 3 ? r.sums[1] : 0, ex = r.sums.size() > 3 ? r.sums[3] : 0;
  double n = std::max<double>(1, count);
  const std::string eta = format_duration(mean_step_seconds * static_cast<double>(max_steps - r.step));
  // Infrastructure failures only when there are some: a line without them reads as before.
  char infra[64] = "";
  if (r.grpo.filtered.infra > 0)
    std::snprintf(infra, sizeof infra, " | infra %lld", static_cast<long long>(r.grpo.filtered.infra));
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "step %lld/%lld | reward %.4f | EX %.3f | loss %.4g | kept %lld/%lld%s | %.2f s/step | ETA %s",
                static_cast<long long>(r.step), static_cast<long long>(max_steps), reward / n, ex / n, r.grpo.loss,
                static_cast<long long>(r.grpo.filtered.kept), static_cast<long long>(count), infra, r.step_seconds,
                eta.c_str());
  std::string line = buf;
  if (last_eval_ex >= 0) {
    std::snprintf(buf, sizeof buf, " | eval %.1f%%", 100.0 * last_eval_ex);
    line += buf;
  }
  return line;
}

}  // namespace sqlrl::rl
