// `llm_sqlrl train`: the multi-turn GRPO loop that ties the pieces together. Per step:
//   batch_size examples from the data schedule (rl/grpo/data_schedule.h: a seeded shuffle of the
//   train split, a new permutation per epoch, or the curated / curriculum subsets) -> prompts
//   (rl/agent/protocol) -> rollout of G samples each (rl/agent/rollout; the Philox sample ids of
//   draw d are d * G + s, so they depend only on the cursor and the seed; dynamic sampling rolls
//   out further batches until batch_size groups vary, rl/grpo/train_data.h) -> rewards (rl/agent/reward panel) -> grpo_step (rl/grpo/grpo) -> metrics.jsonl,
//   trajectories.jsonl, and a checkpoint every save_every steps.
//
// Run folder (config.out):
//   config.toml          the resolved configuration (CLI11 format; `--config` reads it back)
//   metrics.jsonl        one JSON object per step
//   trajectories.jsonl   a few readable trajectories per step
//   difficulty.jsonl     curate / curriculum: each training question's solved samples (pre-pass)
//   data_schedule.json   curate / curriculum: the counts and the questions of each level
//   memory_plan.txt      the memory plan the run executes (rl/train_memory.h; `llm_sqlrl plan` prints the same)
//   eval/step-N/         eval-every: summary.json, summary.md, examples.jsonl of the greedy pass@1
//                        evaluation after step N (rl/eval/eval.h; the same files `llm_sqlrl eval`
//                        writes); metrics.jsonl's line N carries its figures as "eval"
//   best.json            eval-every: {"step", "eval_ex", "checkpoint"} of the best evaluation so far
//                        (first of equals); an evaluation that sets a new best also saves a
//                        checkpoint at its step, so "checkpoint" (relative to RUN) always exists
//   checkpoints/step-N/  config.json + model.safetensors (HF layout), tokenizer.json,
//                        optimizer.safetensors, trainer_state.json; written as .step-N.tmp then
//                        renamed, so a crash never leaves a half checkpoint
//   cache/               the built-in synthetic benchmark and the embedded tokenizer (embedded default only)
//
// Resume (config.resume = a run folder): the latest complete checkpoint's weights, optimizer
// and step are loaded; metrics/trajectories lines past that step (a crash's leftovers) are
// dropped; the next batch and samples are the ones an uninterrupted run would have drawn. The
// best evaluation is read back from the kept metrics lines (best.json rewritten from them), so a
// resumed run records the best an uninterrupted one would.
//
// Evaluation (eval_every > 0): after step N when N % eval_every == 0, and after the last step,
// the current policy answers the held-out questions greedily (T = 0, one sample, the training's
// turn caps and SQL limits) through the rollout's own KV cache, every rank its share of them.
// CPU GEMMs run thread-independent during it, as `llm_sqlrl eval` does (runtime/gemm.h), and
// return to the run's mode after, so the evaluation changes nothing the training computes.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/memory_plan.h"
#include "model/model.h"
#include "rl/agent/protocol.h"
#include "rl/agent/reward.h"
#include "rl/agent/rollout.h"
#include "rl/grpo/train_config.h"
#include "rl/run_folder.h"
#include "sql/data/datasets.h"
#include "sql/exec/pool.h"
#include "tokenizer/tokenizer.h"

namespace sqlrl::rl {

struct RankLayout;  // rl/grpo/rollout_ranks.h

// Scores a rollout batch: fills traj.reward / reward_terms for trajs[i] against
// examples[trajs[i].example_index]; *ex_out[i] = 1 when the final SQL's result matches the gold.
using ScoreFn = std::function<void(const std::vector<sql::Example>& examples, std::vector<Trajectory>& trajs,
                                   std::vector<uint8_t>* ex_out)>;

// Everything one run trains with. make_train_env() resolves it from the config; tests may build
// one by hand (their own protocol, scorer, model, examples).
struct TrainEnv {
  TrainConfig config;
  QwenModel model;
  std::unique_ptr<QwenModel> reference;  // initial weights, only when kl_coef or kl_reward_coef > 0 (no LoRA)
  // A LoRA run (model/lora.h): the adapter trained while `model` stays frozen. Checkpoints then
  // hold the adapter in PEFT's files (adapter_config.json, adapter_model.safetensors) instead of
  // the weights, and the KL reference is `model` itself with the adapter off (no copy).
  std::unique_ptr<LoraAdapter> adapter;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string tokenizer_path;            // tokenizer.json read; it and its folder's tokenizer files go into every checkpoint
  ChatTemplate chat_template = ChatTemplate::qwen3;
  std::unique_ptr<Protocol> protocol;
  std::vector<sql::Example> examples;    // the train split
  std::string tb_dir;                    // TensorBoard event folder when not RUN/tb (rl/tb_log.h)
  std::unique_ptr<sql::Pool> pool;
  std::unique_ptr<RewardContext> reward_context;
  RewardPanel panel;
  ScoreFn score;
  // Evaluation during training (config.eval_every > 0): the held-out questions, scored with
  // eval_context's comparison (the `eval` command's rule, so RUN/eval/step-N matches an `eval` of
  // that step's checkpoint); eval_dataset and config.eval_split label summary.json.
  std::vector<sql::Example> eval_examples;
  std::unique_ptr<RewardContext> eval_context;
  bool eval_dialogue = false;
  std::string eval_dataset;
  std::string description;  // model / tokenizer / dataset sources, printed at the start
  OptionSources config_sources;  // where each config value came from (config.toml comments); may be empty
  RunLock lock;             // the run folder's, once make_train_env writes into it (else run_training takes it)
  // Data parallel (runtime/comm.h): this rank's place in the job; null = one process. Rank 0
  // alone writes the run folder; every rank rolls out and trains its shard of each step's prompts.
  const Comm* comm = nullptr;
  // --rollout-ranks: the job's split into trainers and rollout ranks (comm is then this rank's
  // side); null: every rank trains and rolls out.
  const RankLayout* layout = nullptr;
  // Called on the training thread as each step's training begins, inside its timed stretch
  // (tests hold a step there to see what runs beside it, as CheckpointWriter::set_before_write).
  std::function<void()> on_train_begin;
};

// Checks every input (config values, weights, tokenizer, vocab sizes, dataset, protocol, reward
// panel) before the run folder is touched; then, for the embedded default, generates the
// synthetic benchmark and tokenizer into <out>/cache (once; atomic). Errors name the thing.
// owner false (data-parallel ranks other than 0, after rank 0 made its environment): neither
// lock the run folder nor write into it; read the cache rank 0 wrote.
TrainEnv make_train_env(const TrainConfig& config, bool owner = true);

// The default scorer: the reward panel plus an EX check of the final SQL against the gold under
// the context's comparison mode. `context` must outlive the function.
ScoreFn panel_scorer(const RewardPanel& panel, RewardContext& context);
// The run's reward panel: the protocol's (or `reward`'s) paper panel, the optional terms the
// config turns on (executed-reward, overlong-buffer), then the reward-weight overrides.
RewardPanel train_reward_panel(const TrainConfig& c);
// The context's knobs from the config: SQL-Trail's turn budget, MTSQL-R1's missing verdict, the
// overlong term's cap and buffer.
void configure_reward_context(RewardContext& ctx, const TrainConfig& c);

struct TrainSummary {
  int64_t first_step = 0, last_step = 0;  // steps run: [first_step, last_step)
  double seconds = 0;
  std::vector<double> reward_means;       // per step run
  TrainModes modes;                       // the memory modes the first train step ran with (executed_modes)
  bool interrupted = false;               // stopped by SIGINT/SIGTERM after saving step last_step
  std::vector<std::pair<int64_t, double>> eval_ex;  // (step, EX) of each evaluation this call ran
  int64_t best_step = 0;                  // the run's best evaluation (resumed ones included); 0 = none
  double best_ex = 0;
};

// The memory plan's inputs for this run (rl/train_memory.h): the config's memory group, the
// micro-batch (at least one whole trajectory), the rollout's live samples in whole groups (a
// step's samples when max-batch-sequences is auto), kv-cache-blocks, the KL reference when there
// is one, and the mean trajectory length (rollout-mean-tokens or half of max-total-tokens).
MemoryPlanOptions grpo_memory_plan_options(const TrainEnv& env);
// max-batch-sequences as the rollouts run it: the key when set, else (auto) as many samples as
// the plan's cache holds at mo.rollout_mean_tokens each (kv_sequences_at), in whole groups, at
// least one group and at most a step's samples of this rank.
int64_t live_samples(const TrainEnv& env, const MemoryPlan& plan, const MemoryPlanOptions& mo);
// The rollout options of the run's steps, `live` samples at most at once (live_samples).
RolloutOptions train_rollout_options(const TrainConfig& c, ChatTemplate chat_template, int64_t live);

// Runs steps until config.max_steps, writing the run folder (resuming when config.resume is
// set). Progress goes to stderr on a terminal (one updating line), else a plain line per step
// to stdout unless quiet.
TrainSummary run_training(TrainEnv& env, bool quiet = false);

// make_train_env + run_training.
TrainSummary train(const TrainConfig& config);

// The embedded default's pieces (rl/grpo/train_embedded.cpp).
// Writes the built-in benchmark into `dir` (via dir.tmp + rename) unless dir/synth_info.json exists.
void ensure_synth_benchmark(const std::string& dir, uint64_t seed);
// BPE tokenizer.json trained on the benchmark's questions, SQL, schemas and every protocol's
// first prompt (so the protocols' markup encodes compactly); Qwen3's added tokens included.
// `extra_corpus` is appended to the training text (the demo passes its SFT demonstrations, so
// the merges follow the text the model will actually read and write).
std::string train_embedded_tokenizer(const std::vector<sql::Example>& examples, sql::Pool& pool, size_t vocab_size,
                                     const std::string& extra_corpus = "");
// A Qwen3-architecture model of the config's tiny-* sizes and `vocab` ids, weights N(0, std)
// from Philox(seed), norms 1, tied embeddings.
QwenModel make_embedded_model(const TrainConfig& config, int64_t vocab);

}  // namespace sqlrl::rl
