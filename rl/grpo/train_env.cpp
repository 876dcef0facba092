// make_train_env: resolve the model, tokenizer, dataset, protocol and reward of a run from its
// config. Every user-named input is checked before anything is written, so a bad flag leaves
// no trace in the run folder.
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include "rl/agent/paper.h"
#include "rl/eval/eval.h"
#include "rl/grpo/train.h"
#include "rl/grpo/train_log.h"
#include "kernels/attention.h"
#include "rl/run_folder.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "sql/exec/compare.h"
#include "weights/config.h"
#include "weights/qwen_params.h"

namespace fs = std::filesystem;

namespace sqlrl::rl {

RewardPanel train_reward_panel(const TrainConfig& c) {
  RewardPanel panel = make_reward_panel(c.reward.empty() ? c.protocol : c.reward);
  if (c.executed_reward != 0) add_executed_term(panel, c.executed_reward);
  if (c.overlong_buffer > 0) add_overlong_term(panel, c.overlong_penalty);  // DAPO's soft overlong punishment
  for (const std::string& w : c.reward_weights) apply_reward_override(panel, w);  // TERM=W or reward.PANEL.TERM=W
  return panel;
}

void configure_reward_context(RewardContext& ctx, const TrainConfig& c) {
  ctx.mtsql_missing_verdict_passes = c.mtsql_missing_verdict == "pass";
  if (c.reward_turn_budget > 0) ctx.turn_budget = static_cast<int>(c.reward_turn_budget);
  else if (c.max_turns > 0) ctx.turn_budget = static_cast<int>(c.max_turns);
  if (c.overlong_buffer > 0) {
    ctx.overlong_cap = c.max_total_tokens;
    ctx.overlong_buffer = c.overlong_buffer;
  }
}

ScoreFn panel_scorer(const RewardPanel& panel, RewardContext& context) {
  return [panel, &context](const std::vector<sql::Example>& examples, std::vector<Trajectory>& trajs,
                           std::vector<uint8_t>* ex_out) {
    RewardContext& ctx = context;
    score_batch(panel, examples, trajs, ctx);
    if (!ex_out) return;
    // EX of the answer, as the evaluation counts it: the final SQL's result against the gold's.
    ex_out->assign(trajs.size(), 0);
    std::vector<std::future<sql::Result>> pending(trajs.size());
    for (size_t i = 0; i < trajs.size(); ++i)
      if (trajs[i].has_final_sql() && !trajs[i].final_sql.empty())
        pending[i] = ctx.pool.submit(examples[trajs[i].example_index].db_path, trajs[i].final_sql, ctx.limits);
    for (size_t i = 0; i < trajs.size(); ++i) {
      if (!pending[i].valid()) continue;
      sql::Result pred = pending[i].get();
      const sql::Example& ex = examples[trajs[i].example_index];
      std::shared_ptr<const sql::Result> gold = ctx.gold.get(ex.db_path, ex.gold_sql);
      sql::CompareOptions o;
      o.mode = ctx.mode;
      o.order_matters = sql::gold_has_order_by(ex.gold_sql);
      (*ex_out)[i] = sql::results_match(pred, *gold, o) ? 1 : 0;
    }
  };
}

TrainEnv make_train_env(const TrainConfig& config, bool owner) {
  TrainEnv env;
  env.config = config;
  TrainConfig& c = env.config;
  validate_config(c);
  // The device must be there, and the model's head_dim one it takes (rl/policy_backend.h).
  const PolicyBackend& backend = find_backend(c.device);
  check_backend_usable(backend, "");
  auto check_head_dim = [&](int64_t head_dim, const std::string& model) {
    check_backend_usable(backend, "", head_dim, c.weights.empty() ? "set --tiny-head-dim 64" : model);
  };
  if (c.weights.empty()) check_head_dim(c.tiny_head_dim, "the embedded model");

  // ---- what the user named, checked before anything is written
  env.protocol = make_protocol(c.protocol, c);
  env.panel = train_reward_panel(c);
  const std::string dir = c.resume.empty() ? c.out : c.resume;
  if (!c.resume.empty()) {
    check(fs::is_directory(fs::path(c.resume) / "checkpoints"), "resume: ", c.resume,
          " is not a run folder (no checkpoints/ in it)");
    c.out = c.resume;
  } else {
    check_no_run_in(dir, str_cat("continue it with --resume ", dir, " or choose another --out"));
  }
  std::string tok_path = model_tokenizer_path(c);
  if (!c.chat_template.empty()) env.chat_template = chat_template_from_name(c.chat_template);
  else if (!tok_path.empty()) env.chat_template = detect_chat_template_for_tokenizer(tok_path).value_or(ChatTemplate::qwen3);
  if (!c.weights.empty()) {
    check(fs::exists(c.weights), "weights: no such file or folder: ", c.weights);
    // Settings that would harm a pretrained model are refused from config.json's shape alone,
    // before gigabytes of weights are read.
    const fs::path folder = fs::is_directory(c.weights) ? fs::path(c.weights) : fs::path(c.weights).parent_path();
    if (!c.override_safety && fs::is_regular_file(folder / "config.json")) {
      const int64_t params = count_parameters(qwen_parameters(read_config_file((folder / "config.json").string())));
      std::string all;
      for (const std::string& p : real_model_problems(c, params, env.chat_template == ChatTemplate::qwen3 && c.enable_thinking))
        all += (all.empty() ? "" : "; ") + p;
      check(all.empty(), "train: ", c.weights, ": ", all, " (--override-safety trains anyway)");
    }
    env.model = load_model(c.weights);
    check_head_dim(env.model.config.head_dim, c.weights);
  }
  if (!tok_path.empty()) {
    env.tokenizer_path = tok_path;
    env.tokenizer = load_tokenizer_from_string(read_file_text(tok_path), tok_path);
  }
  if (env.tokenizer && !c.weights.empty())
    check(static_cast<int64_t>(env.tokenizer->size()) <= env.model.config.vocab_size, "tokenizer ", tok_path,
          " has ", env.tokenizer->size(), " ids but the model ", c.weights, " has vocab_size ",
          env.model.config.vocab_size);
  sql::DatasetFormat format = sql::DatasetFormat::Spider;
  if (!c.dataset.empty()) {
    sql::LoadOptions o = sql::parse_dataset_spec(c.dataset, c.split);
    format = o.format;
    check(fs::is_directory(o.dir), "dataset: no such folder: ", o.dir);
    env.examples = sql::load_dataset(o).examples;
    check(!env.examples.empty(), "dataset ", c.dataset, " (", c.split, "): no examples");
  }
  // The held-out split of eval-every: another dataset, or the training one's (the built-in
  // benchmark's, read once it is generated below).
  const std::string eval_spec = c.eval_dataset.empty() ? c.dataset : c.eval_dataset;
  sql::LoadOptions eval_load;
  if (c.eval_every > 0 && !eval_spec.empty())
    eval_load = eval_load_options(eval_spec, c.eval_split, c.eval_dataset.empty() ? "dataset" : "eval-dataset");
  const Paper& paper = find_paper(c.protocol);
  bool bird_like = format == sql::DatasetFormat::Bird || (c.compare.empty() && paper.bird_compare);
  sql::CompareMode mode = c.compare.empty() ? (bird_like ? sql::CompareMode::BirdSet : sql::CompareMode::Spider)
                                            : (c.compare == "bird" ? sql::CompareMode::BirdSet : sql::CompareMode::Spider);
  env.pool = std::make_unique<sql::Pool>(sql::model_sql_pool_options());
  sql::Limits limits;
  limits.timeout_ms = c.sql_timeout_ms;
  limits.max_rows = static_cast<size_t>(c.sql_max_rows);
  limits.max_vm_steps = c.sql_vm_steps;  // the answer and the gold under the rollout's step budget

  // A tokenizer trained here has at most tiny-vocab ids: refuse a smaller model before writing.
  if (!env.tokenizer && !c.weights.empty())
    check(c.tiny_vocab <= env.model.config.vocab_size, "no tokenizer next to ", c.weights,
          ": the embedded one (tiny-vocab ", c.tiny_vocab, " ids) does not fit the model's vocab_size ",
          env.model.config.vocab_size, "; pass --tokenizer");
  // ---- the embedded default: benchmark and tokenizer cached under the run folder
  if (owner && (c.dataset.empty() || !env.tokenizer)) {
    env.lock = lock_run_folder(dir);  // before the first write: two runs never share cache/
    fs::create_directories(fs::path(dir) / "cache");
  }
  if (c.dataset.empty()) {
    std::string synth = (fs::path(dir) / "cache" / "synth").string();
    ensure_synth_benchmark(synth, c.synth_seed);
    sql::LoadOptions o;
    o.dir = synth;
    o.split = c.split;
    // A dialogue protocol (MTSQL-R1's memory_retrieve reads earlier turns): the SParC-format dialogues.
    if (paper.dialogues) o.format = sql::DatasetFormat::Sparc, o.dir = synth + "/sparc";
    env.examples = sql::load_dataset(o).examples;
  }
  if (c.eval_every > 0) {
    if (eval_spec.empty()) {
      eval_load.dir = (fs::path(dir) / "cache" / "synth").string();
      eval_load.split = c.eval_split;
      eval_load.compute_difficulty = true;
      if (paper.dialogues) eval_load.format = sql::DatasetFormat::Sparc, eval_load.dir += "/sparc";
    }
    env.eval_dataset = eval_spec.empty() ? "synthetic" : eval_spec;
    env.eval_examples = load_eval_examples(eval_load, c.eval_limit, "eval-dataset " + env.eval_dataset);
    env.eval_dialogue = dialogue_format(eval_load.format);
  }
  if (!env.tokenizer) {
    tok_path = (fs::path(dir) / "cache" / "tokenizer.json").string();
    if (!fs::exists(tok_path))
      write_text_atomic(tok_path, train_embedded_tokenizer(env.examples, *env.pool, static_cast<size_t>(c.tiny_vocab)));
    env.tokenizer_path = tok_path;
    env.tokenizer = load_tokenizer_from_string(read_file_text(tok_path), tok_path);
    check(c.weights.empty() || static_cast<int64_t>(env.tokenizer->size()) <= env.model.config.vocab_size,
          "embedded tokenizer ", tok_path, " has ", env.tokenizer->size(), " ids but the model ", c.weights,
          " has vocab_size ", env.model.config.vocab_size);
  }
  if (c.weights.empty()) {
    env.model = make_embedded_model(c, static_cast<int64_t>(env.tokenizer->size()));
    for (const char* eos : {"<|im_end|>", "<|endoftext|>"})
      if (int32_t id = env.tokenizer->token_id(eos); id >= 0) env.model.config.eos_token_ids.push_back(id);
  }
  // LoRA: the adapter trains on the frozen model, which is then also the KL reference (no copy).
  env.adapter = training_adapter(c, c, env.model, c.seed, c.weights.empty() ? "embedded" : fs::absolute(c.weights).string(),
                                 "train");
  if ((c.kl_coef > 0 || c.kl_reward_coef > 0) && !env.adapter) env.reference = std::make_unique<QwenModel>(env.model);

  env.reward_context = std::make_unique<RewardContext>(*env.pool, limits, mode);
  configure_reward_context(*env.reward_context, c);
  env.score = panel_scorer(env.panel, *env.reward_context);
  if (c.eval_every > 0) {  // the SQL limits `eval` scores under: the rollout's
    RolloutOptions ro;
    apply_to_rollout(ro, c, c.seed, c, c);
    env.eval_context = std::make_unique<RewardContext>(*env.pool, ro.sql_limits,
                                                       eval_compare_mode(c.compare, eval_load.format));
  }
  env.description = str_cat("model ", c.weights.empty() ? "embedded tiny Qwen3" : c.weights, " (",
                            env.model.num_params, " parameters, vocab ", env.model.config.vocab_size, "), tokenizer ",
                            tok_path, " (", env.tokenizer->size(), " ids), ", env.examples.size(), " ", c.split,
                            " examples from ", c.dataset.empty() ? "the built-in synthetic benchmark" : c.dataset,
                            c.dataset.empty() && paper.dialogues ? " (dialogues)" : "",
                            ", protocol ", c.protocol, ", reward ", env.panel.name,
                            env.adapter ? str_cat(", LoRA rank ", env.adapter->config.rank, " alpha ",
                                                  env.adapter->config.alpha, " (", env.adapter->num_params,
                                                  " trainable parameters, the base frozen)")
                                        : "",
                            c.eval_every > 0 ? str_cat(", evaluated every ", c.eval_every, " steps on ",
                                                       env.eval_examples.size(), " ", c.eval_split, " questions of ",
                                                       env.eval_dataset)
                                             : "");
  return env;
}

TrainSummary train(const TrainConfig& config) {
  TrainEnv env = make_train_env(config);
  return run_training(env);
}

}  // namespace sqlrl::rl
