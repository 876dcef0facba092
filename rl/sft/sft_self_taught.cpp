#include "rl/sft/sft_self_taught.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>

#include "rl/policy.h"
#include "rl/policy_backend.h"
#include "rl/agent/reward.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/progress.h"

namespace sqlrl::rl {

namespace {

// The actions a trajectory took, for telling trajectories apart.
std::string action_signature(const Trajectory& t) {
  std::string sig;
  for (const TurnRecord& turn : t.turns) sig += std::string(action_kind_name(turn.action.kind)) + ":" + turn.action.sql + "\n";
  return sig;
}

bool is_easy_label(const std::string& label) { return label == "easy" || label == "simple"; }

}  // namespace

std::vector<int64_t> select_for_item(const std::vector<Trajectory>& trajs, const ItemRollouts& item,
                                     const SelfTaughtConfig& config) {
  std::vector<int64_t> pool = item.correct;
  auto turns = [&](int64_t i) { return static_cast<int64_t>(trajs[i].turns.size()); };
  auto length = [&](int64_t i) { return static_cast<int64_t>(trajs[i].tokens.size()); };
  const bool all_correct = item.samples > 0 && static_cast<int64_t>(item.correct.size()) == item.samples;
  std::vector<int64_t> out;
  std::set<std::string> seen;
  auto take = [&](const std::vector<int64_t>& ordered, int keep) {
    for (int64_t i : ordered) {
      if (static_cast<int>(out.size()) >= keep) break;
      if (seen.insert(action_signature(trajs[i])).second) out.push_back(i);
    }
  };
  if (item.easy || all_correct) {
    // Shortest first: fewest turns, then fewest tokens, then rollout order (stable).
    std::stable_sort(pool.begin(), pool.end(), [&](int64_t a, int64_t b) {
      return turns(a) != turns(b) ? turns(a) < turns(b) : length(a) < length(b);
    });
    take(pool, config.easy_keep);
    return out;
  }
  std::stable_sort(pool.begin(), pool.end(), [&](int64_t a, int64_t b) {
    return turns(a) != turns(b) ? turns(a) > turns(b) : length(a) > length(b);
  });
  std::vector<int64_t> longer;
  for (int64_t i : pool)
    if (turns(i) >= 2) longer.push_back(i);
  take(longer.empty() ? pool : longer, config.hard_keep);
  return out;
}

SftSequence trajectory_sequence(const Trajectory& traj, int32_t im_end, const std::string& source) {
  SftSequence seq;
  seq.tokens = traj.tokens;
  seq.mask = traj.policy_mask;
  seq.source = source;
  if (im_end >= 0 && (seq.tokens.empty() || seq.tokens.back() != im_end)) {
    seq.tokens.push_back(im_end);
    seq.mask.push_back(1);
  }
  return seq;
}

std::vector<SelfTaughtRound> self_taught(QwenModel& model, const Tokenizer& tok, const Protocol& protocol,
                                         sql::Pool& pool, const std::vector<sql::Example>& examples,
                                         const SelfTaughtConfig& config, const SelfTaughtOptions& options) {
  check(config.rounds >= 1, "self-taught: rounds must be at least 1, got ", config.rounds);
  check(config.rollout.group_size >= 1, "self-taught: samples per question must be at least 1");
  const PolicyBackend& backend = policy_backend(options.device);
  // Its rollouts set policy.lora by hand (the host adapter, not uploaded beside a device base).
  check(backend.device == DeviceType::CPU || !options.adapter, "sft self-taught: a LoRA adapter runs on the CPU only "
        "for now (--device cpu)");
  RunLock lock;  // the whole self-taught folder; each round's SFT locks its own round-<i>/ too
  if (!options.out_dir.empty()) {
    lock = lock_run_folder(options.out_dir);
    if (!options.config_toml.empty())
      write_text_atomic((std::filesystem::path(options.out_dir) / "config.toml").string(), options.config_toml);
  }
  const int32_t im_end = tok.token_id("<|im_end|>");
  const RewardPanel panel = make_reward_panel("mtsql");  // its raw "ex" and "em" terms (weights 1)
  RewardContext ctx(pool, config.rollout.sql_limits, config.compare);
  SchemaCache schemas;
  std::vector<size_t> remaining(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) remaining[i] = i;
  std::vector<bool> covered(examples.size(), false);
  std::vector<SftSequence> kept_all;
  std::vector<SelfTaughtRound> report;
  // One line at a time on a terminal: each phase's line is finished (kept on screen) before the
  // next one starts, and the rounds' line is drawn and finished after each round.
  Progress rounds_bar = progress_start("self-taught", "rounds", config.rounds);
  for (int r = 0; r < config.rounds && !remaining.empty(); ++r) {
    const std::string round_label = str_cat("self-taught round ", r + 1, "/", config.rounds);
    SelfTaughtRound rr;
    rr.round = r + 1;
    rr.questions = static_cast<int64_t>(remaining.size());
    // S1: rollouts of the remaining questions.
    auto t0 = std::chrono::steady_clock::now();
    RolloutOptions ro = config.rollout;
    ro.first_sample_id += static_cast<uint64_t>(r) * examples.size() * static_cast<uint64_t>(ro.group_size);
    std::vector<sql::Example> round_examples;
    std::vector<RolloutRequest> requests;
    for (size_t i : remaining) round_examples.push_back(examples[i]);
    for (const sql::Example& ex : round_examples)
      requests.push_back({&ex, build_prompt_tokens(protocol, tok, ex, schemas.get(pool, ex.db_path), ro)});
    std::vector<Trajectory> trajs;
    {
      // This round's weights: the previous round's SFT changed them.
      Policy policy = frozen_policy(backend, model);
      policy.lora = options.adapter;
      Progress bar = progress_start(round_label + ": rollouts", "samples",
                                    static_cast<int64_t>(requests.size()) * ro.group_size);
      if (options.progress) ro.progress = &bar;
      trajs = rollout(policy, tok, protocol, pool, requests, ro);
      ro.progress = nullptr;  // `bar` is gone after this block
      if (options.progress) progress_finish(bar);
    }
    score_batch(panel, round_examples, trajs, ctx);
    rr.rollouts = static_cast<int64_t>(trajs.size());
    std::vector<ItemRollouts> items(round_examples.size());
    for (size_t k = 0; k < round_examples.size(); ++k) items[k].easy = is_easy_label(round_examples[k].difficulty);
    for (size_t j = 0; j < trajs.size(); ++j) {
      const Trajectory& t = trajs[j];
      ItemRollouts& item = items[static_cast<size_t>(t.example_index)];
      ++item.samples;
      double ex = 0, em = 0;
      for (const auto& [name, value] : t.reward_terms) {
        if (name == "ex") ex = value;
        if (name == "em") em = value;
      }
      if (t.answered && !t.truncated && ex > 0 && (!config.require_em || em > 0)) item.correct.push_back(static_cast<int64_t>(j));
    }
    rr.rollout_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // S2: selection; S4's solved set.
    std::vector<size_t> next;
    for (size_t k = 0; k < items.size(); ++k) {
      rr.correct += static_cast<int64_t>(items[k].correct.size());
      std::vector<int64_t> chosen = select_for_item(trajs, items[k], config);
      for (int64_t j : chosen)
        kept_all.push_back(trajectory_sequence(trajs[j], im_end,
                                               "round " + std::to_string(r + 1) + " " + round_examples[k].id + " sample " +
                                                   std::to_string(trajs[j].sample_index)));
      rr.kept += static_cast<int64_t>(chosen.size());
      if (!items[k].correct.empty()) {
        ++rr.solved;
        covered[remaining[k]] = true;
      } else {
        next.push_back(remaining[k]);
      }
    }
    remaining = std::move(next);
    rr.covered = std::count(covered.begin(), covered.end(), true);
    rr.coverage = examples.empty() ? 0.0 : static_cast<double>(rr.covered) / static_cast<double>(examples.size());
    // The cumulative set T as pre-tokenised SFT lines, reusable with `llm_sqlrl sft --data`.
    if (!options.out_dir.empty()) {
      const std::filesystem::path dir = std::filesystem::path(options.out_dir) / ("round-" + std::to_string(r + 1));
      std::filesystem::create_directories(dir);
      std::ofstream out(dir / "kept.jsonl", std::ios::binary | std::ios::trunc);
      for (const SftSequence& s : kept_all)
        out << nlohmann::ordered_json{{"source", s.source}, {"tokens", s.tokens}, {"mask", s.mask}}.dump() << "\n";
      check(out.good(), (dir / "kept.jsonl").string(), ": write failed");
    }
    // S3: fine-tune on the cumulative set (a fresh optimizer per round, as one SFT run each).
    rr.sft_sequences = static_cast<int64_t>(kept_all.size());
    if (!kept_all.empty()) {
      OptimizerState opt = fresh_optimizer_state(backend, options.adapter ? options.adapter->num_params : model.num_params);
      SftRunOptions so;
      so.device = options.device;
      so.adapter = options.adapter;
      if (!options.out_dir.empty())
        so.out_dir = (std::filesystem::path(options.out_dir) / ("round-" + std::to_string(r + 1))).string();
      so.tokenizer_path = options.tokenizer_path;
      so.progress = options.progress;
      so.progress_label = round_label + ": sft";
      // A kept trajectory is up to max_total_tokens long: a smaller budget would cut it.
      SftConfig sc = config.sft;
      sc.micro_batch_tokens = std::max(sc.micro_batch_tokens, config.rollout.max_total_tokens);
      SftRunStats st = run_sft(model, opt, kept_all, sc, so);
      rr.sft_first_loss = st.first_loss, rr.sft_last_loss = st.last_loss, rr.sft_seconds = st.seconds;
    }
    if (options.log)
      options.log("round " + std::to_string(rr.round) + ": " + std::to_string(rr.questions) + " questions, " +
                  std::to_string(rr.rollouts) + " rollouts, " + std::to_string(rr.correct) + " correct, " +
                  std::to_string(rr.solved) + " solved, " + std::to_string(rr.kept) + " kept; coverage " +
                  std::to_string(rr.covered) + "/" + std::to_string(examples.size()) + "; SFT on " +
                  std::to_string(rr.sft_sequences) + " sequences, loss " + std::to_string(rr.sft_first_loss) + " -> " +
                  std::to_string(rr.sft_last_loss));
    if (options.progress) {
      progress_update(rounds_bar, rr.round, str_cat("coverage ", rr.covered, "/", examples.size()));
      progress_finish(rounds_bar);
    }
    report.push_back(rr);
  }
  return report;
}

}  // namespace sqlrl::rl
