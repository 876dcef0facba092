#include "rl/grpo/train_config.h"

#include <cmath>
#include <string>
#include <vector>

#include "rl/grpo/algos.h"
#include "rl/grpo/async.h"
#include "rl/grpo/loss_agg.h"
#include "rl/grpo/rollout_is.h"
#include "rl/policy.h"
#include "rl/tb_log.h"
#include "runtime/error.h"

namespace sqlrl::rl {

OptionTable config_fields(TrainConfig& c) {
  OptionTable t;
  add_output_options(t, c, "run folder");
  t.push_back({"resume", "continue the run in this folder from its latest checkpoint", &c.resume, true});
  add_device_options(t, c);
  set_option_help(t, "device", "cpu | cuda (cuda: rollout and GRPO on one GPU, bf16 weights with f32 master; head_dim 64 or 128)");
  t.insert(t.end(), {
      {"max-steps", "trainer steps (rollout batches) to reach (with epochs > 0: a cap, 0 = none)", &c.max_steps, true},
      {"epochs", "> 0: passes over the training examples (after curation / curriculum), ceil(epochs x examples / "
                 "batch-size) steps (0 = max-steps decides)", &c.epochs},
      {"seed", "seed of the data shuffle, the sampler (Philox) and the embedded model", &c.seed},
      {"save-every", "checkpoint every N steps (the last always); 0 = last only", &c.save_every, true},
  });
  add_checkpoint_options(t, c);
  t.insert(t.end(), {
      {"log-trajectories", "trajectories per step written to trajectories.jsonl", &c.log_trajectories, true},
      {"tensorboard", kTensorboardHelp, &c.tensorboard, true},
  });
  add_model_options(t, c);
  add_template_options(t, c);
  set_option_help(t, "weights", "Hugging Face checkpoint file or folder (default: the embedded tiny model)");
  set_option_help(t, "tokenizer", "tokenizer.json or folder (default: the weights folder's, else the embedded one)");
  add_lora_options(t, c);
  add_adapter_options(t, c);
  set_option_help(t, "adapter", "PEFT LoRA adapter folder to go on training (its files set rank, alpha and targets; "
                  "the base frozen)");
  t.insert(t.end(), {
      {"tiny-vocab", "embedded model: BPE vocabulary size (added tokens included)", &c.tiny_vocab},
      {"tiny-hidden", "embedded model: hidden size", &c.tiny_hidden},
      {"tiny-layers", "embedded model: layers", &c.tiny_layers},
      {"tiny-heads", "embedded model: attention heads", &c.tiny_heads},
      {"tiny-kv-heads", "embedded model: key/value heads", &c.tiny_kv_heads},
      {"tiny-head-dim", "embedded model: head dimension", &c.tiny_head_dim},
      {"tiny-intermediate", "embedded model: MLP size", &c.tiny_intermediate},
      {"tiny-init-std", "embedded model: std of the random weights", &c.tiny_init_std},
      {"dataset", "FORMAT:PATH[,db=DBDIR] (spider|spider-syn|bird|sparc|cosql|synsql, as `eval --dataset`); default: "
                  "the built-in synthetic benchmark", &c.dataset},
      {"split", "dataset split to train on", &c.split},
      {"synth-seed", "generator seed of the built-in synthetic benchmark", &c.synth_seed},
      {"compare", "EX comparison: spider | bird (default: bird for BIRD data and skyrl, else spider)", &c.compare},
      {"eval-every", "evaluate greedy pass@1 on the held-out split after every N steps and the last, into "
                     "RUN/eval/step-N/ and metrics.jsonl's \"eval\"; a new best EX also saves a checkpoint and "
                     "RUN/best.json (0 = off)", &c.eval_every, true},
      {"eval-split", "split evaluated by eval-every", &c.eval_split},
      {"eval-dataset", "FORMAT:PATH[,db=DBDIR] evaluated by eval-every (default: the training dataset; EX as `eval` scores "
                       "it: compare, else bird for BIRD data, else spider)", &c.eval_dataset},
      {"eval-limit", "first N questions of the eval split (0 = all)", &c.eval_limit},
  });
  add_protocol_options(t, c);
  t.insert(t.end(), {
      {"reward", "reward panel (default: the protocol's)", &c.reward},
      {"reward-weight", "panel weight override TERM=W (repeatable)", &c.reward_weights},
      {"reward-turn-budget", "SQL-Trail turn reward's T (0 = max-turns if set, else 10)", &c.reward_turn_budget},
      {"mtsql-missing-verdict", "MTSQL-R1 verify reward of a turn after a tool call that writes no <exec_verify>/"
                                "<memory_verify>: pass (the released text2sql_process.py reads \"pass\") | zero",
       &c.mtsql_missing_verdict},
      {"batch-size", "prompts per step", &c.batch_size},
      {"group-size", "samples per prompt (G)", &c.group_size},
  });
  add_sampling_options(t, c);
  set_option_help(t, "temperature", "sampling temperature; GRPO trains softmax(logits / T), the policy that sampled (as verl)");
  add_turn_options(t, c);
  t.insert(t.end(), {
      {"max-batch-sequences", "live samples (holding KV blocks, decoded together) at most; 0 = as many as the KV "
                              "cache holds at rollout-mean-tokens each, at most a step's samples", &c.max_batch_sequences, true},
      {"kv-cache-blocks", "KV-cache blocks of 16 tokens; 0 = from the memory plan (a step's samples at the full "
                          "length as far as memory allows); at least one group at max-total-tokens. Groups are admitted "
                          "while blocks are free, the youngest samples preempted (and recomputed) when they run out",
       &c.kv_cache_blocks, true},
      {"rollout-mean-tokens", "mean trajectory length max-batch-sequences 0 plans for (0 = half of max-total-tokens; "
                              "metrics.jsonl's tokens_mean measures it)", &c.rollout_mean_tokens, true},
      {"batch-invariant", "CPU: every forward sums a token's row the same way whatever shares its call, so the "
                          "sampled tokens and log-probs do not depend on the KV cache size, the batch cap or "
                          "preemptions, bit for bit (slower prefills: every linear layer takes the few-token kernel)", &c.batch_invariant},
  });
  t.push_back({"single-turn", "one assistant turn, nothing executed: the first SQL written is the answer (the "
               "single-turn RL baseline of SkyRL-SQL Table 1 / SQL-Trail Table 2); evaluations during the run too",
               &c.single_turn});
  t.insert(t.end(), {
      {"dynamic-sampling", "DAPO's dynamic sampling: roll out more prompts until batch-size groups have reward "
                           "variance (the rest are not trained on)", &c.dynamic_sampling},
      {"dynamic-sampling-max-tries", "rollout batches per step at most with dynamic-sampling (then the step trains "
                                     "on the informative groups it has)", &c.dynamic_sampling_max_tries},
      {"difficulty-samples", "sample K rollouts of every training question before step 1 and count the solved "
                             "ones (difficulty.jsonl; needed by curate and curriculum); 0 = off", &c.difficulty_samples},
      {"difficulty-metric", "a solved sample: ex | ex-em (EX and Spider exact match, MTSQL-R1)", &c.difficulty_metric},
      {"difficulty-file", "read the pre-pass from this difficulty.jsonl (an earlier run's) instead of sampling",
       &c.difficulty_file},
      {"curate", "off | pass-at-g: train only on questions solved by some but not all of the K samples, hardest "
                 "first (SQL-Trail A.6)", &c.curate},
      {"curate-keep", "pass-at-g: keep this many of them (0 = all)", &c.curate_keep},
      {"curate-unsolved", "pass-at-g: also keep this many never-solved questions (SQL-Trail's exploration set)",
       &c.curate_unsolved},
      {"curriculum-bin-size", "MTSQL-R1 curriculum: drop the always-solved questions, sort the rest easiest first, "
                              "train level by level in bins of N; 0 = off", &c.curriculum_bin_size},
      {"curriculum-level-epochs", "passes over a curriculum level before the next", &c.curriculum_level_epochs},
      {"curriculum-promote-at", "move to the next level early once the training EX over curriculum-window steps "
                                "reaches this (0 = epochs only)", &c.curriculum_promote_at},
      {"curriculum-window", "steps averaged by curriculum-promote-at", &c.curriculum_window},
  });
  add_sql_options(t, c);
  t.insert(t.end(), {
      {"lr", "peak learning rate", &c.lr},
      {"lr-schedule", "constant | cosine", &c.lr_schedule},
      {"warmup-steps", "linear warmup steps", &c.warmup_steps},
      {"total-steps", "cosine horizon (0 = max-steps)", &c.total_steps},
      {"min-lr-ratio", "cosine floor as a fraction of lr", &c.min_lr_ratio},
      {"beta1", "AdamW beta1", &c.beta1},
      {"beta2", "AdamW beta2", &c.beta2},
      {"adam-eps", "AdamW epsilon", &c.adam_eps},
      {"weight-decay", "AdamW weight decay", &c.weight_decay},
      {"clip-low", "PPO ratio clip below (1 - clip-low)", &c.clip_low},
      {"clip-high", "PPO ratio clip above (1 + clip-high); > clip-low = clip-higher", &c.clip_high},
      {"kl-coef", "KL to the initial model, as a loss term (0 = off)", &c.kl_coef},
      {"kl-estimator", kl_estimator_help(), &c.kl_estimator},
      {"kl-reward-coef", "KL to the initial model in the reward: each trajectory's reward loses coef x the sum of "
                         "kl-reward-estimator over its trained tokens (old policy vs reference) before the group "
                         "advantages (verl's use_kl_in_reward); independent of kl-coef; 0 = off", &c.kl_reward_coef},
      {"kl-reward-estimator", "k1 | k2 | k3, as kl-estimator (verl's kl_penalty default: k1)", &c.kl_reward_estimator},
      {"executed-reward", "weight of the reward term 'executed': +1 when the answer is a query the trajectory "
                          "already ran without error, -1 for any other answer, 0 without one (MTIR-SQL's execution "
                          "term, arXiv 2510.25510 eq. 6, asked of the answer's earlier run: it pays less for a "
                          "right query re-typed wrong); 0 = off", &c.executed_reward},
      {"overlong-buffer", "DAPO's soft overlong punishment: a trajectory within this many tokens of max-total-tokens "
                          "loses up to overlong-penalty, linearly (the reward term 'overlong'); 0 = off", &c.overlong_buffer},
      {"overlong-penalty", "the overlong term's weight (DAPO: 1)", &c.overlong_penalty},
      {"policy-loss", policy_loss_help(), &c.policy_loss},
      {"dual-clip", "dual-clip c > 1: a negative-advantage token's loss is capped at -A c (verl's clip_ratio_c, 3); 0 = off",
       &c.dual_clip},
      {"entropy-coef", "entropy bonus: the loss gains -C x the policy entropy, aggregated as the policy term "
                       "(loss-agg), its gradient through the logits (verl's entropy_coeff); 0 = off", &c.entropy_coef},
      {"loss-agg", loss_agg_help(), &c.loss_agg},
      {"loss-norm-tokens", "seq-mean-token-sum-norm's constant token count L (0 = max-total-tokens)", &c.loss_norm_tokens},
      {"sampler-logprobs", "old log-probs from the sampler instead of a training forward", &c.sampler_logprobs},
      {"rollout-is", "sampler-vs-trainer correction of the policy term: off (metrics only) | truncate (TIS: weight "
                     "min(pi_trainer/pi_sampler, upper)) | mask (MIS: tokens or sequences outside [lower, upper] get "
                     "no gradient)", &c.rollout_is},
      {"rollout-is-level", "token | sequence (product of the token ratios) | geometric (their geometric mean)",
       &c.rollout_is_level},
      {"rollout-is-upper", "rollout-is cap (truncate) or upper bound (mask); > 1", &c.rollout_is_upper},
      {"rollout-is-lower", "rollout-is lower bound (mask); 0 = 1 / upper", &c.rollout_is_lower},
      {"async", async_mode_help(), &c.async},
      {"max-staleness", "--async full: K, the updates between the weights that sample a batch and those that train "
                        "on it (K batches are held ahead, in memory and in checkpoints)", &c.max_staleness},
      {"partial-rollout", "with --rollout-ranks and --async one-step or full: N > 0 makes the newest batch sampled "
                          "ahead take the weights of the update in progress before its decode step N (at a step "
                          "count, not on arrival, so the bits never depend on timing), its samples then holding "
                          "tokens of two versions (metrics.jsonl staleness_mean); the trainers wait for the steps before "
                          "N, the rest runs while the next step trains, so a small N overlaps most. 0: each "
                          "trajectory sampled whole by one version", &c.partial_rollout},
      {"partial-kv", partial_kv_help(), &c.partial_kv},
      {"overlap-scoring", "--async one-step or full on one process (no --rollout-ranks, no --dynamic-sampling): "
                          "the batches sampled ahead are scored (their SQL run against the gold) on threads of "
                          "their own while the step trains, instead of before it (the same bytes; metrics.jsonl "
                          "time.overlap_s); false: in turn", &c.overlap_scoring, true},
      {"ppo-epochs", "passes over each rollout batch", &c.ppo_epochs},
      {"mini-batches", "optimizer updates per epoch", &c.mini_batches},
      {"max-grad-norm", "gradient-norm clip (<= 0 = off)", &c.max_grad_norm},
      {"advantage", advantage_estimator_help(), &c.advantage},
      {"adv-std", "divide the group advantage by its std", &c.adv_std},
      {"adv-eps", "epsilon added to the group std", &c.adv_eps},
      {"filter-truncated", "GRPO-Filter: drop trajectories that hit the token cap", &c.filter_truncated},
      {"filter-malformed", "GRPO-Filter: drop trajectories with an invalid action", &c.filter_malformed},
      {"filter-no-valid-action", "GRPO-Filter: drop trajectories with no valid action", &c.filter_no_valid_action},
      {"filter-zero-variance", "GRPO-Filter: drop groups whose rewards are all equal", &c.filter_zero_variance},
      {"zero-variance-in-denominator",
       "the loss mean also counts the dropped zero-variance trajectories' tokens (advantage 0: verl's token-mean; a step with few informative groups moves less)",
       &c.zero_variance_in_denominator},
      {"exclude-infra-failures",
       "leave trajectories whose SQL failed for the machine's reason (database unreadable, wall clock under a step budget) out of their group's baseline and the loss; a group left with < 2 samples is dropped",
       &c.exclude_infra_failures},
      {"spare-copied-answers",
       "turn-level credit: a trajectory with a negative advantage whose answer repeats a query it already ran without "
       "error trains no token of its answer turn (the error is that query's; copying what was run is right)",
       &c.spare_copied_answers},
      {"micro-batch-tokens", "packed tokens per training micro-batch", &c.micro_batch_tokens},
      {"share-prefixes", "pack a group's common prompt once (same update up to rounding)", &c.share_prefixes},
      {"override-safety", "train a pretrained checkpoint even with settings that would harm it (lr > 1e-4, turn caps too short for an answer or a Qwen3 thought)", &c.override_safety, true},
  });
  add_memory_options(t, c);
  add_parallel_options(t, c);
  t.push_back({"rollout-ranks", "several ranks: the last R ranks of the job only roll out (sampling, SQL, scoring) and "
               "stream each step's batch to the others, which only train and send them the new weights after each "
               "update (rl/grpo/rollout_ranks.h; with --async one-step both sides work at once; on cuda the bf16 "
               "weights travel through host memory over MPI); 0: every rank does both", &c.rollout_ranks});
  t.back().resumable = true;  // where it runs, not what it trains
  return t;
}

namespace {

bool one_of(const std::string& value, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (value == n) return true;
  return false;
}

}  // namespace

RolloutIsConfig rollout_is_config(const TrainConfig& c) {
  return {parse_rollout_is_mode(c.rollout_is), parse_rollout_is_level(c.rollout_is_level),
          static_cast<float>(c.rollout_is_upper), static_cast<float>(c.rollout_is_lower)};
}

void validate_config(const TrainConfig& c) {
  validate_groups(c, "config");
  try {
    parse_loss_agg(c.loss_agg);
    find_policy_loss(c.policy_loss);
    find_kl_estimator(c.kl_estimator);
    find_kl_estimator(c.kl_reward_estimator, "kl-reward-estimator");
    find_advantage_estimator(c.advantage);
  check(c.loss_norm_tokens >= 0, "config: loss-norm-tokens must be >= 0 (0: max-total-tokens), got ", c.loss_norm_tokens);
  } catch (const Error& e) {
    fail("config: ", e.what());
  }
  // Greedy rollouts give G identical samples per prompt: every group has zero reward variance
  // and nothing would ever train.
  check(c.temperature > 0, "config: temperature must be > 0 for GRPO (0 = greedy: a group's samples would all be "
        "the same, with no advantage to learn from), got ", c.temperature);
  // The model's SQL is untrusted: without a time limit one query can stall a training step.
  check(c.sql_timeout_ms > 0, "config: sql-timeout-ms must be positive in training (0 = no limit is for eval), got ",
        c.sql_timeout_ms);
  check(c.max_steps >= 0, "config: max-steps must be >= 0, got ", c.max_steps);
  check(c.epochs >= 0, "config: epochs must be >= 0, got ", c.epochs);
  check(c.save_every >= 0, "config: save-every must be >= 0, got ", c.save_every);
  check(c.eval_every >= 0, "config: eval-every must be >= 0 (0 = off), got ", c.eval_every);
  check(c.eval_limit >= 0, "config: eval-limit must be >= 0 (0 = all), got ", c.eval_limit);
  check(c.eval_every == 0 || !c.eval_split.empty(), "config: eval-split must name a split when eval-every is on");
  check(c.log_trajectories >= 0, "config: log-trajectories must be >= 0, got ", c.log_trajectories);
  check(c.batch_size > 0, "config: batch-size must be positive, got ", c.batch_size);
  check(c.group_size > 0, "config: group-size must be positive, got ", c.group_size);
  check(c.reward_turn_budget >= 0, "config: reward-turn-budget must be >= 0, got ", c.reward_turn_budget);
  check(c.mtsql_missing_verdict == "pass" || c.mtsql_missing_verdict == "zero",
        "config: mtsql-missing-verdict must be pass or zero, got '", c.mtsql_missing_verdict, "'");
  check(c.max_batch_sequences >= 0, "config: max-batch-sequences must be >= 0 (0 = auto), got ", c.max_batch_sequences);
  check(c.kv_cache_blocks >= 0, "config: kv-cache-blocks must be >= 0 (0 = from the memory plan), got ",
        c.kv_cache_blocks);
  check(c.rollout_mean_tokens >= 0, "config: rollout-mean-tokens must be >= 0 (0 = half of max-total-tokens), got ",
        c.rollout_mean_tokens);
  check(c.lr >= 0 && std::isfinite(c.lr), "config: lr must be a finite number >= 0, got ", c.lr);
  check(one_of(c.lr_schedule, {"constant", "cosine"}), "config: lr-schedule '", c.lr_schedule,
        "' is not constant or cosine");
  check(c.compare.empty() || one_of(c.compare, {"spider", "bird"}), "config: compare '", c.compare,
        "' is not spider or bird");
  check(c.clip_low >= 0 && c.clip_high >= 0, "config: clip-low/clip-high must be >= 0");
  check(c.kl_coef >= 0, "config: kl-coef must be >= 0, got ", c.kl_coef);
  check(c.kl_reward_coef >= 0 && std::isfinite(c.kl_reward_coef),
        "config: kl-reward-coef must be a finite number >= 0, got ", c.kl_reward_coef);
  check(c.overlong_buffer >= 0 && c.overlong_buffer <= c.max_total_tokens, "config: overlong-buffer must be in [0, ",
        "max-total-tokens ", c.max_total_tokens, "], got ", c.overlong_buffer);
  check(std::isfinite(c.executed_reward), "config: executed-reward must be a finite number, got ", c.executed_reward);
  check(c.executed_reward == 0 || !c.single_turn, "config: executed-reward ", c.executed_reward,
        " needs multi-turn rollouts: a single-turn answer is never executed (set executed-reward = 0 with single-turn)");
  check(c.overlong_penalty >= 0, "config: overlong-penalty must be >= 0, got ", c.overlong_penalty);
  check(c.dual_clip == 0 || c.dual_clip > 1, "config: dual-clip must be 0 (off) or above 1, got ", c.dual_clip);
  check(c.entropy_coef >= 0 && std::isfinite(c.entropy_coef), "config: entropy-coef must be a finite number >= 0, got ",
        c.entropy_coef);
  find_async_mode(c.async);  // fails naming the rows
  check(c.max_staleness >= 1 && c.max_staleness <= 64, "config: max-staleness must be in [1, 64], got ", c.max_staleness);
  check(c.rollout_ranks >= 0, "config: rollout-ranks must be >= 0, got ", c.rollout_ranks);
  find_partial_kv(c.partial_kv);  // fails naming the rows
  check(c.partial_rollout >= 0, "config: partial-rollout must be >= 0 (0 = off), got ", c.partial_rollout);
  check(c.partial_rollout == 0 || (c.rollout_ranks > 0 && async_lag(c.async, c.max_staleness) > 0),
        "config: partial-rollout needs --rollout-ranks and --async one-step or full (a weight update reaches the "
        "rollout ranks while they sample ahead); got rollout-ranks ", c.rollout_ranks, ", async ", c.async);
  check(c.partial_rollout == 0 || !c.dynamic_sampling, "config: partial-rollout with --dynamic-sampling: a batch of "
        "several tries would switch weights in one of them only");
  {
    const RolloutIsConfig is = rollout_is_config(c);
    validate_rollout_is(is);
    check(is.mode == RolloutIsMode::Off || !c.sampler_logprobs, "config: rollout-is ", c.rollout_is,
          " weighs the trainer's old log-probs against the sampler's; sampler-logprobs makes them the same");
  }
  check(c.dynamic_sampling_max_tries > 0, "config: dynamic-sampling-max-tries must be positive, got ",
        c.dynamic_sampling_max_tries);
  check(c.difficulty_samples >= 0, "config: difficulty-samples must be >= 0, got ", c.difficulty_samples);
  check(one_of(c.difficulty_metric, {"ex", "ex-em"}), "config: difficulty-metric '", c.difficulty_metric,
        "' is not ex or ex-em");
  check(one_of(c.curate, {"off", "pass-at-g"}), "config: curate '", c.curate, "' is not off or pass-at-g");
  check(c.curate_keep >= 0 && c.curate_unsolved >= 0, "config: curate-keep and curate-unsolved must be >= 0");
  check(c.curriculum_bin_size >= 0, "config: curriculum-bin-size must be >= 0, got ", c.curriculum_bin_size);
  check(c.curriculum_level_epochs > 0 && c.curriculum_window > 0,
        "config: curriculum-level-epochs and curriculum-window must be positive");
  check(c.curriculum_promote_at >= 0 && c.curriculum_promote_at <= 1, "config: curriculum-promote-at must be in [0, 1], got ",
        c.curriculum_promote_at);
  check(c.curate == "off" || c.curriculum_bin_size == 0,
        "config: curate and curriculum-bin-size are two schedules (SQL-Trail's, MTSQL-R1's): use one");
  // A question's pass rate needs more than one sample to tell always, sometimes and never apart.
  check((c.curate == "off" && c.curriculum_bin_size == 0) || c.difficulty_samples >= 2 || !c.difficulty_file.empty(),
        "config: curate and curriculum-bin-size need difficulty-samples >= 2 (or a difficulty-file), got ",
        c.difficulty_samples);
  check(c.ppo_epochs > 0 && c.mini_batches > 0, "config: ppo-epochs and mini-batches must be positive");
  check(c.micro_batch_tokens > 0, "config: micro-batch-tokens must be positive, got ", c.micro_batch_tokens);
  check(c.warmup_steps >= 0 && c.total_steps >= 0, "config: warmup-steps and total-steps must be >= 0");
  check(c.tiny_vocab >= 300, "config: tiny-vocab must be >= 300 (256 bytes + added tokens), got ", c.tiny_vocab);
  check(c.tiny_hidden > 0 && c.tiny_layers > 0 && c.tiny_heads > 0 && c.tiny_kv_heads > 0 && c.tiny_head_dim > 0 &&
            c.tiny_intermediate > 0,
        "config: tiny-* sizes must be positive");
}

std::vector<std::string> real_model_problems(const TrainConfig& c, int64_t num_params, bool qwen3_thinking) {
  std::vector<std::string> out;
  if (num_params <= kRealModelParams) return out;  // the embedded and test models learn fast on purpose
  const double billions = static_cast<double>(num_params) / 1e9;
  // The four papers train at 1e-6 (SkyRL-SQL, SQL-Trail, MTSQL-R1) to 2e-6; 1e-3 (the embedded
  // default) destroys a pretrained model within a few AdamW steps.
  // A LoRA adapter (lora-rank) moves only a low-rank update that starts at zero; its best lr runs
  // about 10x full fine-tuning's (Schulman et al., "LoRA Without Regret", Thinking Machines, 2025),
  // so its cap is 10x too.
  const double cap = c.lora_rank > 0 || !c.adapter.empty() ? 1e-3 : 1e-4;
  if (c.lr > cap)
    out.push_back(str_cat("lr ", c.lr, " would wreck a pretrained model of ", billions, "B parameters (the paper "
                          "recipes use 1e-6", cap > 1e-4 ? "; a LoRA adapter takes up to 1e-3" : "", ")"));
  // A turn holds a reasoning block, a tagged SQL query or answer and its closing tags; below
  // this every turn is cut, malformed and filtered. The recipes cap turns at 3,000-8,192 tokens.
  if (c.max_turn_tokens < kMinTurnTokens)
    out.push_back(str_cat("max-turn-tokens ", c.max_turn_tokens, " cannot hold a reasoned SQL turn (at least ",
                          kMinTurnTokens, "; the recipes use 3000-8192)"));
  // Qwen3's <think> blocks alone run to hundreds or thousands of tokens.
  if (qwen3_thinking && c.max_turn_tokens < kMinThinkingTurnTokens)
    out.push_back(str_cat("max-turn-tokens ", c.max_turn_tokens, " cannot hold a Qwen3 thought (thinking is on: at least ",
                          kMinThinkingTurnTokens, ", or --enable-thinking=false)"));
  return out;
}

std::string config_to_toml(const TrainConfig& config) {
  TrainConfig copy = config;
  return options_to_toml(config_fields(copy), "llm_sqlrl train: the resolved configuration of this run (CLI11 config format)");
}

std::string config_to_toml(const TrainConfig& config, const OptionSources& sources) {
  TrainConfig copy = config;
  return options_to_toml(config_fields(copy),
                         "llm_sqlrl train: the resolved configuration of this run, each key's source after it", sources);
}

TrainConfig read_config_toml(const std::string& path, std::vector<size_t>* present) {
  TrainConfig config;
  read_options_toml(path, config_fields(config), present);
  return config;
}

}  // namespace sqlrl::rl
