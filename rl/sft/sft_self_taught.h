// Self-taught warm start (MTSQL-R1 §3.2.2, Algorithm 1): R rounds of
//   S1 roll out N samples per remaining training question with the current model (rl/agent/rollout.h),
//      keep those whose final SQL is EX-correct (and EM-correct when asked: Algorithm 1 line 5
//      asks both; here EM is optional, SelfTaughtConfig::require_em), judged by the reward context
//      as the rewards are;
//   S2 difficulty-aware selection per question: an easy question (Spider hardness "easy") or one
//      solved by all N samples keeps up to easy_keep of its SHORTEST correct trajectories (fewest
//      assistant turns, then fewest tokens; the paper keeps <= 2 interactions); any other keeps up
//      to hard_keep of its LONGEST ones with >= 2 turns, one per distinct sequence of actions (our
//      stand-in for the paper's clustering by Qwen3-Embedding; with no such trajectory, the
//      longest correct ones);
//   S3 fine-tune the current model on the cumulative kept set T (rl/sft/sft.h);
//   S4 drop the questions solved this round.
// Coverage per round = questions with at least one kept trajectory so far / all questions.
// The fine-tuning's micro-batch budget is raised to the rollout's max_total_tokens when below it,
// so no kept trajectory is cut. Kept trajectories become SFT sequences with their rollout mask (sampled tokens trained,
// prompt and observations masked) plus a trained <|im_end|> after the final turn when the
// model stopped on a stop string (the same convention as the demonstrations).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rl/agent/protocol.h"
#include "rl/agent/rollout.h"
#include "rl/sft/sft.h"
#include "sql/exec/compare.h"
#include "sql/data/datasets.h"

namespace sqlrl::rl {

struct SelfTaughtConfig {
  int rounds = 3;                 // the paper reports 3
  bool require_em = false;
  int easy_keep = 2;              // §3.2.2: "up to two short trajectories"
  int hard_keep = 3;              // §3.2.2: "three representatives"
  RolloutOptions rollout;         // group_size = N (paper: 20), sampling (paper: T = 0.7)
  SftConfig sft;
  sql::CompareMode compare = sql::CompareMode::Spider;
};

// Per-question outcome of one round's rollouts (indices into that round's trajectory list).
struct ItemRollouts {
  std::vector<int64_t> correct;  // EX (and EM when required) trajectories
  int64_t samples = 0;
  bool easy = false;             // difficulty label "easy" / "simple"
};

// S2 for one question: the trajectories to keep, in the order chosen.
std::vector<int64_t> select_for_item(const std::vector<Trajectory>& trajs, const ItemRollouts& item,
                                     const SelfTaughtConfig& config);

// A kept trajectory as an SFT sequence (see the header comment); im_end < 0: nothing appended.
SftSequence trajectory_sequence(const Trajectory& traj, int32_t im_end, const std::string& source);

struct SelfTaughtRound {
  int round = 0;
  int64_t questions = 0;          // D_i
  int64_t rollouts = 0, correct = 0, solved = 0, kept = 0;
  int64_t covered = 0;            // questions with a kept trajectory, cumulative
  double coverage = 0;            // covered / all questions
  int64_t sft_sequences = 0;      // |T| trained on this round
  double sft_first_loss = 0, sft_last_loss = 0;
  double rollout_seconds = 0, sft_seconds = 0;
};

struct SelfTaughtOptions {
  std::string out_dir;            // round-<i>/: kept.jsonl (T so far, {tokens, mask}) and the SFT run folder; "" = none
  std::string tokenizer_path;     // copied into checkpoints
  std::function<void(const std::string&)> log;
  // CUDA: each round's rollouts and SFT on CUDA device 0 (rl/policy.h; head_dim 64 or 128);
  // `model` holds the trained master weights after every round, as on the CPU.
  DeviceType device = DeviceType::CPU;
  std::string config_toml = "";  // written as out_dir/config.toml once the folder is locked ("" = none)
  // Progress lines (runtime/progress.h): each round's rollouts (samples) and SFT (updates), then
  // the rounds with an ETA. Off: nothing drawn (log still gets the round lines).
  bool progress = false;
  // A LoRA run (model/lora.h; CPU): every round rolls out base + this adapter and its SFT trains
  // the adapter alone (a fresh optimizer per round, as for the weights); `model` stays frozen and
  // each round's checkpoints hold the adapter in PEFT's files. Never owned; null: the weights train.
  LoraAdapter* adapter = nullptr;
};

// Runs Algorithm 1 on `examples` (training questions), updating `model` in place.
std::vector<SelfTaughtRound> self_taught(QwenModel& model, const Tokenizer& tok, const Protocol& protocol,
                                         sql::Pool& pool, const std::vector<sql::Example>& examples,
                                         const SelfTaughtConfig& config, const SelfTaughtOptions& options);

}  // namespace sqlrl::rl
