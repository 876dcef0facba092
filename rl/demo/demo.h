// The embedded end-to-end run (`llm_sqlrl demo`, `make demo`, `train` with no arguments):
// everything from nothing on the CPU (or, with DemoConfig::device, one GPU), composed from the
// trainer's pieces:
//   synthetic benchmark (rl/grpo/train.h ensure_synth_benchmark) -> BPE tokenizer trained on it
//   (train_embedded_tokenizer) -> tiny Qwen3 from Philox (make_embedded_model) -> base eval ->
//   SFT on gold multi-turn demonstrations of the train split (rl/sft/sft_demos.h, rl/sft/sft.h) -> eval
//   -> multi-turn GRPO from the SFT weights (rl/grpo/train.h run_training) -> eval -> single-turn
//   GRPO from the same SFT weights (TrainConfig::single_turn; same seed, steps and knobs) -> eval.
// Evaluation is greedy pass@1 on the held-out dev split (databases disjoint from train), multi-
// turn and single-turn (no execution), EX by difficulty and trap category, the answer turn's copy
// errors (rl/eval/eval.h). The two GRPO runs evaluated both ways are SkyRL-SQL's 2x2 (trained
// single/multi x evaluated single/multi; report.json "grid").
//
// Run folder (DemoConfig::out):
//   cache/synth/, cache/tokenizer.json   the benchmark and tokenizer (kept between runs)
//   demos.jsonl                          the SFT demonstrations
//   sft/                                 SFT run folder (metrics.jsonl, checkpoints/)
//   rl/                                  GRPO run folder (config.toml, metrics.jsonl, checkpoints/;
//                                        with rl_eval_every also eval/step-N/ and best.json)
//   rl-single/                           the single-turn GRPO run folder (rl_single_turn = 1)
//   tb/{sft,rl,rl-single}/               TensorBoard event files of each phase (`tensorboard --logdir OUT/tb`)
//   eval/<stage>-<multi|single>/         summary.json, summary.md, examples.jsonl per evaluation
//   report.json, report.md               the figures and the printed table
//   report.html                          curves, eval tables, trajectories of sft/, rl/, eval/ (report/report.h)
// A second run in the folder moves the first's outputs (sft/, rl/, rl-single/, tb/, eval/, report.*)
// to OUT/previous/.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rl/eval/eval.h"
#include "runtime/options.h"

namespace sqlrl::rl {

// The knobs that set the run's size. demo_sizes("default") took 7 min 54 s on 2 quiet cores with
// 120 dev questions of the old benchmark and no single-turn run; on the benchmark of 2026-11-25
// (trap questions, 4-5 turn demonstrations), 360 dev questions and the single-turn GRPO run it
// took 1,689-1,714 CPU s (seeds 2, 3, side by side; README), above the ~10 minute aim; with ten
// SFT epochs (2026-11-27) SFT costs ~1,230 CPU s and the rest 730-756: ~1,950 CPU s (README);
// alone on 2 cores after the CPU kernel work of 2026-11-28 (same bits) 786 s wall, 1,399 CPU s,
// and with shared prompt prefills and the decode attention in registers (same bits) 627-649 s
// wall, 1,096-1,129 CPU s;
// "full" about 20 minutes before the single-turn run was added (measured, seed 1), "mini"
// seconds (tests).
// The default's numbers come from runs on the 2-core machine (session notes, README):
//   - SFT competence appears late and suddenly: 1080 demonstrations at 3 epochs reach 5% dev EX,
//     at 6 epochs 26-42% (4 runs); 720 demonstrations at 6 epochs 8-16%. A 4-layer model learned no
//     faster per update than 2 layers, so the compute goes into updates, not depth.
//   - On the benchmark of 2026-11-25, 6 epochs left one seed of three behind (dev EX 32.5 / 23.1 /
//     32.2; seed 2 ended 35% of its dev trajectories malformed); 10 epochs give 42.8 / 43.1 / 45.8
//     (dev demonstration loss 0.185-0.193 against 0.199-0.232), which the papers' 2x2 needs: the
//     weak seed was the one where multi-turn lost to single-turn.
//   - Packing each database's schema prompt once (share_group 4: runs of 4 demonstrations of one
//     database) halves SFT's packed positions; it also halves the updates (8 demonstrations per
//     update instead of ~4) at the same dev loss (0.207).
//   - GRPO at lr 5e-4 constant collapses within 40 steps (entropy 0.3 -> 2.1); 4e-4 with cosine
//     decay blew up one of three seeds (entropy 0.22 -> 0.96); 2e-4 is stable. 8 questions x 8
//     rollouts with cosine decay over three SFT starts: 40 steps +0.8 / -0.9 / +0.8 points, 60
//     steps +3.3 / -0.9 / +1.7 (T 0.8: +1.7 / -1.7 / +1.7; 4 x 8 at a constant lr, 40 steps:
//     +0.0 / -1.7 / +3.3). A small effect: one dev question is 0.8 points.
//   - Rollouts at SkyRL-SQL's T 0.6 / top-p 0.95 (§5) succeed about 30-40% of the time after SFT,
//     at T 1.0 about 2% (3-epoch model), too rare for a group to carry a signal.
//   - GRPO must train the policy that sampled, softmax(logits / 0.6) (GrpoConfig::temperature).
//     With softmax(logits) the same 60 steps from the same three SFT checkpoints gave +0.0 / +3.3
//     / +2.5 points on the 120 dev questions; at the rollout temperature +3.3 / +2.5 / +2.5 (on
//     360 questions of 12 dev databases: +1.9 / +3.3 / +3.3 against +1.4 / +3.9 / +2.5).
//   - Longer is not better yet: 200 cosine steps (softmax(logits)) collapsed near step 95
//     (entropy 0.17 -> 1.0 within 10 steps, then every rollout malformed); dev EX at step 40 was
//     27.5, at 80 25.0 (SFT 25.8).
struct DemoSizes {
  // The built-in benchmark (sql/data/synth.h). Its 12 domains go to databases in turn, so with 12
  // train databases the dev databases are fresh instances (other rows, other values) of domains
  // seen in training; with fewer, dev domains are unseen too.
  // 12 dev databases, one per domain: 360 dev questions, so that a difference of a few points
  // between the grid's cells is more than one or two questions (one is 0.28 points).
  int64_t train_databases = 36, dev_databases = 12, questions_per_database = 30;
  int64_t train_limit = 0;  // first N train questions only (0 = all)
  // model (TrainConfig tiny-* keys)
  // vocab 2048 with merges learned on the demonstrations: the skyrl prompt is ~800 tokens, not ~1,140
  int64_t vocab = 2048, hidden = 128, layers = 2, heads = 4, kv_heads = 2, head_dim = 32, intermediate = 384;
  // SFT
  int64_t sft_epochs = 10, sft_micro_batch_tokens = 4096;
  int64_t sft_share_group = 4;  // SftConfig::share_group: runs of N same-database demos, schema packed once
  int64_t restate_question = 1;  // gold demos restate the question in their first reasoning (rl/sft/sft_demos.h)
  double sft_lr = 5e-3;
  // N > 0: SFT demonstrations from the first N train databases only, and GRPO's prompts from the
  // other train databases (RL on databases SFT never saw: their stored forms were not memorised
  // from a demonstration, so only probing finds them); 0: both phases on every train database.
  int64_t sft_databases = 0;
  // GRPO
  int64_t rl_steps = 60, rl_batch = 8, rl_group = 8;
  double rl_lr = 2e-4, rl_temperature = 0.6, rl_top_p = 0.95;
  int64_t rl_cosine = 1;         // cosine decay over rl_steps (0: constant lr)
  // Multi-turn GRPO's weight of the reward term "executed" (train's executed-reward: the answer is
  // a query the trajectory ran; rl/agent/reward.h); 0 = the protocol's panel alone.
  double rl_executed_reward = 0;
  // 1: multi-turn GRPO gives a wrong trajectory's answer turn no gradient when it copies a query
  // the trajectory ran (train's spare-copied-answers, rl/grpo/grpo.h). From the same SFT weights,
  // on 3 seeds, dev EX (multi-turn) 34.4 / 21.7 / 35.8 against plain GRPO's 30.8 / 22.8 / 35.0
  // (SFT 32.5 / 23.1 / 32.2), with fewer trajectories left without an answer on every seed.
  int64_t rl_spare_copied_answers = 1;
  double rl_min_lr_ratio = 0.1;  // the cosine's floor as a share of rl_lr
  // GRPO evaluates the dev split (greedy, multi-turn) every N steps and after its last (train's
  // eval-every; RL_FOLDER/eval/step-N, report.json "rl_eval"); 0 = off (the stage evaluations only)
  int64_t rl_eval_every = 0;
  // 1: a second GRPO run, single-turn (nothing executed, the first SQL is the answer), from the
  // same SFT weights with the same seed and knobs, evaluated both ways (the grid's "single" row,
  // OUT/rl-single/); 0 skips it.
  int64_t rl_single_turn = 1;
  // rollout and eval limits
  int64_t max_turn_tokens = 128, max_total_tokens = 2560;
  int64_t dev_limit = 0;  // N dev questions evenly spaced over the split (every database; 0 = all)
  // The base (random-init) stage evaluates N of those, evenly spaced (0 = all): it answers nothing
  // right, and its rollouts run to the token caps, so on all 360 questions it cost more wall time
  // than the SFT model's evaluations (seed 1: 116 s multi-turn + 34 s single-turn on a busy machine).
  int64_t base_dev_limit = 60;
};
DemoSizes demo_sizes(const std::string& name);  // "default" | "full" | "mini"
// The stages run_demo evaluates, in its order (the names of DemoReport::stages): base, sft, rl,
// then rl-single when sizes.rl_single_turn. Tests hold a run to this list rather than to a count,
// so a stage added to the demo is added here and every test follows.
std::vector<std::string> demo_stage_names(const DemoSizes& sizes);

// Every DemoSizes knob by its snake_case name (report.json "sizes", `demo --set KEY=VALUE`), as an
// options table (runtime/options.h).
OptionTable demo_size_options(DemoSizes& sizes);
// Sets one knob from "KEY=VALUE" (a number >= 0); an unknown key or a bad number is an error naming it.
void set_demo_size(DemoSizes& sizes, const std::string& assignment);

struct DemoConfig {
  std::string out = "runs/demo";
  uint64_t seed = 1;        // model init, SFT order, GRPO sampling
  uint64_t synth_seed = 1;  // the benchmark (fixed, so seeds compare on one dev set)
  // skyrl by default: its gold demos replay exactly (the observation is part of the assistant's
  // own stream, no chat turn boundaries to learn), its markup is the shortest of the four, and
  // its -1/0/1 reward pays format from the first step.
  std::string protocol = "skyrl";
  DemoSizes sizes;
  // cpu (f32) or cuda: SFT, evaluations and GRPO on one GPU (bf16 weights, f32 master). The CUDA
  // attention takes head_dim 64 or 128, so a CUDA run needs sizes.head_dim set to one of them.
  std::string device = "cpu";
  // "key=value" of `llm_sqlrl train`'s table (rl/grpo/train_config.h) applied to the GRPO phase
  // after the size's values: the trainer's knobs (dynamic-sampling, rollout-is, ...) on the demo.
  std::vector<std::string> train_sets;
  // An earlier demo folder whose SFT checkpoint replaces this run's SFT phase ("" = train it).
  std::string sft_from;
  std::function<void(const std::string&)> log;  // progress lines; may be empty
};

struct DemoStage {
  std::string name;  // base | sft | rl (multi-turn GRPO) | rl-single (single-turn GRPO)
  EvalSummary multi, single;
};

// One step of the run, timed: wall and process CPU seconds (the machine may be shared, so only
// the CPU seconds compare between runs).
struct DemoPhase {
  std::string name;
  double seconds = 0, cpu_seconds = 0;
};

struct DemoReport {
  DemoConfig config;
  std::vector<DemoStage> stages;  // base, sft, rl, then rl-single when sizes.rl_single_turn
  int64_t train_questions = 0, dev_questions = 0, demos = 0, params = 0;
  double sft_first_loss = 0, sft_last_loss = 0;
  double sft_dev_loss = 0;  // mean NLL per trained token of the dev split's gold demonstrations
  std::vector<double> rl_reward_means, rl_single_reward_means;
  std::vector<std::pair<int64_t, double>> rl_eval;  // rl_eval_every: (step, dev EX) during GRPO
  int64_t rl_best_step = 0;                         // the best of them (0 = none)
  double seconds = 0, cpu_seconds = 0;  // wall and process CPU time of the whole run
  double sft_seconds = 0, rl_seconds = 0, rl_single_seconds = 0, eval_seconds = 0;
  std::vector<DemoPhase> phases;  // in run order: setup, eval base, sft, ..., eval rl-single
};

// Runs the pipeline, writing the run folder; returns the figures.
DemoReport run_demo(const DemoConfig& config);

// report.json: dev_ex {base, sft, rl} (multi-turn greedy EX), single_turn_ex and multi_turn_ex
// (the multi-turn RL model), grid[trained][evaluated] (EX; trained, evaluated in {single, multi},
// multi-trained = the rl stage) with grid_details (by difficulty and category, copy errors,
// first-right-final-wrong, SQL calls per trajectory, format errors) of the same cells, seconds,
// cpu_seconds, phases, per-stage breakdowns and the sizes.
nlohmann::ordered_json demo_report_json(const DemoReport& report);
// The settings of a run as report.json records them: seed, synth_seed, protocol, device,
// train_sets, sft_from (when set) and every DemoSizes knob ("sizes").
nlohmann::ordered_json demo_settings_json(const DemoConfig& config);

// The papers' two claims over several seeds (`demo --seeds`), from each seed's report.json:
//   multi_turn_beats_single_turn  grid.multi.multi against grid.single.single (SkyRL-SQL's 2x2)
//   grpo_beats_sft                dev_ex.rl against dev_ex.sft (multi-turn)
// A claim holds when, on every seed, treatment - baseline > 0 and > the baseline's spread over
// the seeds (max - min): the margin is more than the seed alone moves the baseline, and the worst
// seed's treatment is above the best seed's baseline. seeds.json: "seeds" (a row per seed: SFT,
// grid, stored_form / plain EX of each cell, copy errors, SFT dev loss, seconds) and "claims"
// (margins, smallest and mean, both spreads, holds).
nlohmann::ordered_json demo_seeds_json(const std::vector<nlohmann::json>& reports);
std::string demo_seeds_table(const nlohmann::json& seeds_json);  // seeds.md
// Runs the demo once per seed in OUT/seed-N (with sft_from, from SFT_FROM/seed-N); a seed folder
// whose report.json has this run's settings is read back instead of run again, so a sweep stopped
// half way continues. Writes OUT/seeds.json and OUT/seeds.md; returns seeds.json.
nlohmann::ordered_json run_demo_seeds(const DemoConfig& config, const std::vector<uint64_t>& seeds);

// The papers' style tables: the trained x evaluated grid with the SFT and base rows, EX by
// difficulty and by trap category, the answer turn's figures.
std::string demo_table(const DemoReport& report);

}  // namespace sqlrl::rl
