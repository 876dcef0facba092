// Every knob of `llm_sqlrl train`, as one flat struct: the shared groups (rl/options.h) and the
// trainer's own fields. The defaults are the embedded CPU default (configs/tiny.toml lists the
// same values): a tiny model, short turns, a large learning rate. One table of fields
// (runtime/options.h) drives the CLI flags (--group-size 5), the recipe files (configs/*.toml,
// `group-size = 5`) and the resolved config.toml written into the run folder, so a key means
// the same thing everywhere.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "rl/grpo/rollout_is.h"
#include "rl/options.h"
#include "runtime/options.h"

namespace sqlrl::rl {

// Group fields (out, device, weights, tokenizer, chat_template, enable_thinking, protocol,
// temperature, top_p, top_k, max_turns, max_turn_tokens, max_total_tokens, sql_timeout_ms,
// sql_max_rows, lora_*, adapter) are rl/options.h's; the constructor sets train's defaults of them.
struct TrainConfig : OutputOptions, DeviceOptions, ModelOptions, TemplateOptions, ProtocolOptions, SamplingOptions,
                     TurnOptions, SqlOptions, MemoryOptions, ParallelOptions, LoraOptions, AdapterOptions,
                     CheckpointOptions {
  TrainConfig() {
    out = "runs/train";
    max_turn_tokens = 48;
    max_total_tokens = 2048;
  }
  // ---- run
  std::string resume;              // run folder to continue from its latest checkpoint
  int64_t max_steps = 20;         // trainer steps (rollout batches) to reach
  // > 0: stop after this many passes over the training examples the data schedule holds (after
  // curation; a curriculum's levels summed), ceil(epochs * examples / batch-size) steps, or at
  // max-steps when that is positive and sooner (MTSQL-R1 trains 60 epochs, not a step count).
  int64_t epochs = 0;
  uint64_t seed = 1;               // data shuffle, sampling (Philox) and the embedded model's init
  int64_t save_every = 10;         // checkpoint every N steps (the last step always); 0 = last only
  int64_t log_trajectories = 2;    // trajectories per step written to trajectories.jsonl
  bool tensorboard = true;         // RUN/tb event files beside metrics.jsonl (rl/tb_log.h)

  // weights "" = the embedded tiny model; tokenizer "" = the weights folder's, else the embedded one
  // ---- the embedded default (used only without --weights)
  int64_t tiny_vocab = 1024;  // BPE vocabulary trained on the synthetic benchmark (added tokens included)
  int64_t tiny_hidden = 64;
  int64_t tiny_layers = 2;
  int64_t tiny_heads = 4;
  int64_t tiny_kv_heads = 2;
  int64_t tiny_head_dim = 16;
  int64_t tiny_intermediate = 128;
  double tiny_init_std = 0.02;  // N(0, std) weights, norms 1 (transformers' initialiser)

  // ---- data
  std::string dataset;            // FORMAT:PATH[,db=DBDIR] (sql::parse_dataset_spec); "" = built-in synthetic benchmark
                                  // (its SParC-format dialogues for mtsql)
  std::string split = "train";
  uint64_t synth_seed = 1;        // the built-in benchmark's generator seed
  std::string compare;            // spider | bird (set equality); "" = bird for BIRD data and skyrl, else spider

  // ---- evaluation during training (rl/grpo/train.h): greedy pass@1 on a held-out split
  int64_t eval_every = 0;         // after every N steps and the last; 0 = off
  std::string eval_split = "dev";
  std::string eval_dataset;       // FORMAT:PATH; "" = the training dataset (the built-in benchmark's)
  int64_t eval_limit = 0;         // first N questions; 0 = all

  // ---- reward (the protocol's panel by default)
  std::string reward;              // panel; "" = the protocol's own
  std::vector<std::string> reward_weights;  // "term=w" overrides of the panel's weights
  int64_t reward_turn_budget = 0;  // SQL-Trail's T in the turn reward; 0 = max-turns if set, else 10 (A.4)
  // MTSQL-R1's verify reward for a turn after a tool call that writes no verdict: pass (the
  // released code) | zero (RewardContext::mtsql_missing_verdict_passes).
  std::string mtsql_missing_verdict = "pass";

  // ---- rollout
  int64_t batch_size = 2;  // prompts per step
  int64_t group_size = 4;  // G samples per prompt
  // Live samples (holding KV blocks, decoded together) at most; 0 = auto: as many as the memory
  // plan's KV cache holds at rollout-mean-tokens each, at most a step's samples (this rank's),
  // in whole groups and at least one group (rl/grpo/train_loop.cpp live_samples).
  int64_t max_batch_sequences = 0;
  // KV-cache blocks (of 16 tokens); 0 = from the memory plan (room for every sample of a step at
  // the full length, as far as memory allows). At least one group at max-total-tokens.
  int64_t kv_cache_blocks = 0;
  // The mean trajectory length max-batch-sequences auto expects; 0 = half of max-total-tokens
  // (metrics.jsonl's tokens_mean measures it).
  int64_t rollout_mean_tokens = 0;
  // Rollouts whose tokens and log-probs do not depend on the schedule, bit for bit (CPU;
  // RolloutOptions::batch_invariant): the cache size, the batch cap, preemptions. Slower
  // prefills. Evaluations during the run keep `eval`'s arithmetic.
  bool batch_invariant = false;
  // One assistant turn, nothing executed: the first SQL written is the answer (the single-turn RL
  // baselines of SkyRL-SQL Table 1 and SQL-Trail Table 2, trained from the same start).
  bool single_turn = false;
  // DAPO's dynamic sampling (Yu et al. 2025, "DAPO", arXiv 2503.14476, §3.2): roll out more
  // batches until batch-size groups have reward variance; at most this many rollouts per step.
  bool dynamic_sampling = false;
  int64_t dynamic_sampling_max_tries = 10;  // verl's max_num_gen_batches in the DAPO recipe

  // ---- data schedule (rl/grpo/data_schedule.h) from a difficulty pre-pass (rl/grpo/difficulty.h)
  int64_t difficulty_samples = 0;       // K samples per training question before step 1; 0 = no pre-pass
  std::string difficulty_metric = "ex";  // ex | ex-em: what counts as a solved sample
  std::string difficulty_file;          // a difficulty.jsonl of an earlier run instead of sampling
  std::string curate = "off";           // off | pass-at-g (SQL-Trail A.6)
  int64_t curate_keep = 0;              // questions with 0 < pass < 1 kept, hardest first; 0 = all of them
  int64_t curate_unsolved = 0;          // plus this many never-solved questions (SQL-Trail's exploration set)
  int64_t curriculum_bin_size = 0;      // MTSQL-R1 §3.3.1 levels of this many questions, easiest first; 0 = off
  int64_t curriculum_level_epochs = 1;  // passes over a level before the next
  double curriculum_promote_at = 0;     // > 0: move on once the training EX over curriculum-window steps reaches it
  int64_t curriculum_window = 4;

  // ---- GRPO
  double lr = 1e-3;
  std::string lr_schedule = "constant";  // constant | cosine
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // cosine horizon; 0 = max-steps
  double min_lr_ratio = 0;
  double beta1 = 0.9, beta2 = 0.999, adam_eps = 1e-8, weight_decay = 0.01;
  double clip_low = 0.2, clip_high = 0.2;
  double kl_coef = 0;
  std::string kl_estimator = "k3";  // a row of rl/grpo/algos.h kl_estimators()
  double kl_reward_coef = 0;        // KL in the reward (verl's use_kl_in_reward, kl_ctrl.kl_coef); 0: off
  std::string kl_reward_estimator = "k1";  // its estimator (verl's kl_penalty default "kl" = k1)
  double dual_clip = 0;             // c > 1: dual-clip; 0: off
  double entropy_coef = 0;          // entropy bonus (verl's entropy_coeff); 0: off
  std::string policy_loss = "grpo";  // a row of rl/grpo/algos.h policy_losses()
  double executed_reward = 0;       // the reward term "executed" (rl/agent/reward.h): its weight; 0: off
  int64_t overlong_buffer = 0;      // DAPO's soft overlong punishment over the last N tokens of the cap; 0: off
  double overlong_penalty = 1.0;    // its weight (DAPO: 1)
  std::string loss_agg = "token-mean";  // rl/grpo/loss_agg.h
  int64_t loss_norm_tokens = 0;         // seq-mean-token-sum-norm's constant; 0 = max-total-tokens
  bool sampler_logprobs = false;        // old log-probs from the sampler instead of a training forward
  std::string rollout_is = "off";        // off | truncate | mask (rl/grpo/rollout_is.h)
  std::string async = "off";             // off | one-step | full: how far the rollout runs ahead (rl/grpo/async.h)
  int64_t max_staleness = 2;             // --async full: batches sampled ahead, the staleness of each
  int64_t rollout_ranks = 0;             // ranks of the job that only roll out (rl/grpo/rollout_ranks.h); 0: every rank trains
  int64_t partial_rollout = 0;           // rollout ranks: the newest batch ahead takes the next weights before this decode step; 0: off
  std::string partial_kv = "recompute";  // recompute | keep: the cached tokens at that switch (rl/grpo/async.h)
  bool overlap_scoring = true;           // --async on one process: the batch ahead is scored while the step trains
  std::string rollout_is_level = "token";  // token | sequence | geometric
  double rollout_is_upper = 2.0, rollout_is_lower = 0;  // lower 0: 1 / upper
  int64_t ppo_epochs = 1;
  int64_t mini_batches = 1;
  double max_grad_norm = 1.0;
  std::string advantage = "grpo";  // a row of rl/grpo/algos.h advantage_estimators()
  bool adv_std = true;  // divide the group advantage by the std
  double adv_eps = 1e-6;
  bool filter_truncated = true, filter_malformed = true, filter_no_valid_action = true, filter_zero_variance = true;
  bool zero_variance_in_denominator = false;
  bool exclude_infra_failures = true;  // GrpoFilterConfig::exclude_infra_failures (a correctness fix: on)
  bool spare_copied_answers = false;   // GrpoFilterConfig::spare_copied_answers
  int64_t micro_batch_tokens = 8192;
  bool share_prefixes = true;  // CPU: pack a group's common prompt once
  bool override_safety = false;  // train a real checkpoint with settings real_model_problems refuses
};

// The table, in config.toml order, pointing into `config`.
OptionTable config_fields(TrainConfig& config);

// Checks enumerations and ranges; a bad value is a one-line error naming the key.
void validate_config(const TrainConfig& config);
// The rollout-is keys as the trainer takes them (rl/grpo/rollout_is.h); fails naming a bad value.
RolloutIsConfig rollout_is_config(const TrainConfig& config);

// Settings that would harm a pretrained model (more than kRealModelParams parameters): an lr
// above 1e-4, a turn cap below kMinTurnTokens, Qwen3 thinking with a turn cap below
// kMinThinkingTurnTokens. One sentence each, naming the key, the value and why; empty = none.
constexpr int64_t kRealModelParams = 100'000'000;
constexpr int64_t kMinTurnTokens = 256;
constexpr int64_t kMinThinkingTurnTokens = 1024;
std::vector<std::string> real_model_problems(const TrainConfig& config, int64_t num_params, bool qwen3_thinking);

// The resolved config as a CLI11-readable TOML file (one `key = value` line per field).
std::string config_to_toml(const TrainConfig& config);
// The same with each line's source as a comment (`lr = 1e-06  # recipe skyrl`); sources is
// table-aligned (runtime/options.h OptionSources).
std::string config_to_toml(const TrainConfig& config, const OptionSources& sources);
// Reads a recipe or a file written by config_to_toml: flat `key = value` lines in CLI11's TOML
// format (strings quoted, arrays ["a", "b"], # comments, an optional [train] header); keys not
// in the file keep their defaults, and `present` (when given) receives the table indices the
// file set. An unknown key is a one-line error naming it, the file and the line. (CLI11 2.1
// reads config files for the top-level app only, so the subcommand's recipes are read here.)
TrainConfig read_config_toml(const std::string& path, std::vector<size_t>* present = nullptr);

}  // namespace sqlrl::rl
