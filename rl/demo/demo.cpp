// run_demo: the embedded end-to-end run (see rl/demo/demo.h). Only composition lives here; every
// stage is the library's own function.
#include "rl/demo/demo.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "rl/policy.h"
#include "rl/policy_backend.h"
#include "kernels/attention.h"
#include "rl/sft/sft.h"
#include "rl/sft/sft_demos.h"
#include "rl/grpo/train.h"
#include "rl/grpo/train_log.h"
#include "report/report.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/options.h"
#include "sql/data/datasets.h"
#include "sql/data/synth.h"

namespace fs = std::filesystem;

namespace sqlrl::rl {
namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path, ": cannot read");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `limit` > 0 keeps that many examples: the first ones, or evenly spaced ones when `spread`
// (the split lists its databases one after another, so every database keeps its share).
std::vector<sql::Example> first_or_spread(std::vector<sql::Example> examples, int64_t limit, bool spread) {
  const size_t n = examples.size(), k = static_cast<size_t>(limit);
  if (limit <= 0 || k >= n) return examples;
  std::vector<sql::Example> kept;
  for (size_t i = 0; i < k; ++i) kept.push_back(examples[spread ? i * n / k : i]);
  return kept;
}

sql::Dataset load_split(const std::string& dir, const std::string& split, int64_t limit, bool spread) {
  sql::LoadOptions o;
  o.dir = dir;
  o.split = split;
  o.compute_difficulty = true;
  sql::Dataset ds = sql::load_dataset(o);
  ds.examples = first_or_spread(std::move(ds.examples), limit, spread);
  check(!ds.examples.empty(), "demo: ", dir, " (", split, ") has no examples");
  return ds;
}

// ensure_synth_benchmark with the run's sizes: written once into `dir` (via dir.tmp + rename).
void write_benchmark(const std::string& dir, uint64_t seed, const DemoSizes& s) {
  if (fs::exists(fs::path(dir) / "synth_info.json")) return;
  sql::SynthOptions o;
  o.seed = seed;
  o.train_databases = static_cast<int>(s.train_databases);
  o.dev_databases = static_cast<int>(s.dev_databases);
  o.questions_per_database = static_cast<int>(s.questions_per_database);
  const std::string tmp = dir + ".tmp";
  fs::remove_all(tmp);
  sql::write_synth_benchmark(tmp, o);
  fs::remove_all(dir);
  fs::rename(tmp, dir);
}

// SFT's and GRPO's questions: with n > 0 the first n databases of the split (in its order) and
// the others; with n = 0 the whole split twice.
std::pair<sql::Dataset, sql::Dataset> split_databases(const sql::Dataset& train, int64_t n) {
  if (n == 0) return {train, train};
  std::vector<std::string> order;
  for (const sql::Example& e : train.examples)
    if (std::find(order.begin(), order.end(), e.db_id) == order.end()) order.push_back(e.db_id);
  check(n < static_cast<int64_t>(order.size()), "demo: sft_databases ", n, " leaves GRPO no database: the train split has ",
        order.size());
  const std::set<std::string> first(order.begin(), order.begin() + n);
  sql::Dataset sft = train, rl = train;
  sft.examples.clear(), rl.examples.clear();
  for (const sql::Example& e : train.examples) (first.count(e.db_id) ? sft : rl).examples.push_back(e);
  return {std::move(sft), std::move(rl)};
}

// The trainer's config for this run: the tiny-* sizes, the GRPO knobs, the rollout limits.
TrainConfig train_config(const DemoConfig& c) {
  const DemoSizes& s = c.sizes;
  TrainConfig t;
  t.out = (fs::path(c.out) / "rl").string();
  t.seed = c.seed;
  t.synth_seed = c.synth_seed;
  t.protocol = c.protocol;
  t.device = c.device;
  t.tiny_vocab = s.vocab, t.tiny_hidden = s.hidden, t.tiny_layers = s.layers, t.tiny_heads = s.heads;
  t.tiny_kv_heads = s.kv_heads, t.tiny_head_dim = s.head_dim, t.tiny_intermediate = s.intermediate;
  t.max_steps = s.rl_steps;
  t.eval_every = s.rl_eval_every;
  t.save_every = 0;
  t.batch_size = s.rl_batch;
  t.group_size = s.rl_group;
  t.lr = s.rl_lr;
  t.lr_schedule = s.rl_cosine ? "cosine" : "constant";
  t.min_lr_ratio = s.rl_min_lr_ratio;
  t.executed_reward = s.rl_executed_reward;
  t.spare_copied_answers = s.rl_spare_copied_answers != 0;
  t.temperature = s.rl_temperature;
  t.top_p = s.rl_top_p;
  t.max_turn_tokens = s.max_turn_tokens;
  t.max_total_tokens = s.max_total_tokens;
  t.micro_batch_tokens = std::max<int64_t>(8192, s.max_total_tokens);
  // SkyRL-SQL's plain GRPO (configs/skyrl.toml): a malformed or truncated sample keeps its -1, so
  // the group still learns the format; groups with one reward carry no advantage and are dropped.
  t.filter_truncated = t.filter_malformed = t.filter_no_valid_action = false;
  const OptionTable table = config_fields(t);
  for (const std::string& kv : c.train_sets) {
    const size_t eq = kv.find('=');
    check(eq != std::string::npos, "demo: --train-set '", kv, "' is not KEY=VALUE");
    const std::string key = kv.substr(0, eq);
    auto it = std::find_if(table.begin(), table.end(), [&](const Option& o) { return key == o.key; });
    check(it != table.end(), "demo: --train-set: '", key, "' is not a key of llm_sqlrl train");
    set_option_value(*it, std::string_view(kv).substr(eq + 1), "demo --train-set " + key);
  }
  validate_config(t);
  return t;
}

EvalSummary evaluate(const DemoConfig& c, const Policy& policy, const Tokenizer& tok, const Protocol& protocol,
                     sql::Pool& pool, RewardContext& ctx, const std::vector<sql::Example>& dev,
                     const std::string& stage, bool single_turn) {
  EvalOptions o;
  o.single_turn = single_turn;
  o.rollout.sampling = {0.0f, 0, 1.0f, c.seed};
  o.rollout.max_turn_tokens = c.sizes.max_turn_tokens;
  o.rollout.max_total_tokens = c.sizes.max_total_tokens;
  o.rollout.chat_template = ChatTemplate::qwen3;
  o.rollout.enable_thinking = true;
  EvalRun run = run_eval(policy, tok, protocol, pool, dev, o, ctx);
  EvalInfo info{"synthetic", "dev", c.protocol, stage, "bird", c.seed, c.device};
  write_eval_outputs((fs::path(c.out) / "eval" / (stage + (single_turn ? "-single" : "-multi"))).string(), dev, run, o,
                     info);
  if (c.log)
    c.log(str_cat("demo: eval ", stage, single_turn ? " single-turn" : " multi-turn", ": EX ", run.summary.total.ex(),
                  " (", run.summary.total.correct, "/", run.summary.total.n, "), ", run.seconds, " s"));
  return run.summary;
}

// GRPO from `model`'s weights on the train split with config `tc` (multi- or single-turn), in its
// own run folder tc.out; the trained weights come back in `model`.
TrainSummary grpo_phase(const DemoConfig& c, const TrainConfig& tc, QwenModel& model, const std::string& tok_json,
                        const std::string& tok_path, const sql::Dataset& train, const sql::Dataset& dev,
                        const sql::Limits& limits) {
  TrainEnv env;
  env.config = tc;
  env.model = model;
  env.tokenizer = load_tokenizer_from_string(tok_json, tok_path);
  env.tokenizer_path = tok_path;
  env.protocol = make_protocol(c.protocol);
  env.examples = train.examples;
  // One TensorBoard folder for the demo, a run per phase: `tensorboard --logdir OUT/tb`.
  env.tb_dir = (fs::path(c.out) / "tb" / fs::path(tc.out).filename()).string();
  env.pool = std::make_unique<sql::Pool>(sql::model_sql_pool_options());
  env.panel = train_reward_panel(tc);  // the protocol's panel plus what --train-set turns on
  env.reward_context = std::make_unique<RewardContext>(*env.pool, limits, sql::CompareMode::BirdSet);
  configure_reward_context(*env.reward_context, tc);
  env.score = panel_scorer(env.panel, *env.reward_context);
  if (tc.eval_every > 0) {  // the stage evaluations' questions and EX (in the run's own turn mode)
    env.eval_examples = dev.examples;
    env.eval_context = std::make_unique<RewardContext>(*env.pool, limits, sql::CompareMode::BirdSet);
    env.eval_dataset = "synthetic";
  }
  TrainSummary ts = run_training(env, /*quiet=*/!c.log);
  model.params = env.model.params;
  return ts;
}

}  // namespace

namespace {

// A previous demo's outputs move to OUT/previous (replacing an older one there), so a second
// `make demo` does not destroy the first's report; the cache (benchmark, tokenizer) stays.
void keep_previous_demo(const fs::path& out, const std::function<void(const std::string&)>& log) {
  static const char* outputs[] = {"sft", "rl", "rl-single", "tb", "eval", "report.json", "report.md", "report.html", "demos.jsonl"};
  bool any = false;
  for (const char* o : outputs) any = any || fs::exists(out / o);
  if (!any) return;
  const fs::path previous = out / "previous";
  fs::remove_all(previous);
  fs::create_directories(previous);
  for (const char* o : outputs)
    if (fs::exists(out / o)) fs::rename(out / o, previous / o);
  const std::string line = str_cat("demo: the previous demo run in ", out.string(), " moved to ", previous.string());
  if (log) log(line);
  else std::printf("%s\n", line.c_str());
}

}  // namespace

DemoSizes demo_sizes(const std::string& name) {
  DemoSizes s;
  if (name == "default") return s;
  if (name == "full") {
    // Twice the demonstrations, 8 epochs, 150 GRPO steps, 360 dev questions: 20 min wall alone
    // on 2 cores (seed 1: SFT 691 s, GRPO 332 s), SFT 65.8% -> GRPO 69.7% dev EX, measured before
    // the single-turn GRPO run (and its two evaluations) was added.
    s.train_databases = 72;
    s.dev_databases = 12;  // one per domain: 360 dev questions, as the default
    s.sft_epochs = 8;
    s.rl_steps = 150, s.rl_batch = 8, s.rl_group = 8;
    return s;
  }
  if (name == "mini") {
    s.train_databases = 2, s.dev_databases = 1, s.questions_per_database = 10;
    s.vocab = 600, s.hidden = 32, s.heads = 2, s.kv_heads = 1, s.head_dim = 16, s.intermediate = 64;
    s.sft_epochs = 1;
    s.train_limit = 12;
    s.rl_steps = 2, s.rl_batch = 2, s.rl_group = 2;
    s.max_turn_tokens = 16, s.max_total_tokens = 3072;
    s.dev_limit = 4;
    return s;
  }
  fail("demo: unknown size '", name, "' (default | full | mini)");
}

std::vector<std::string> demo_stage_names(const DemoSizes& sizes) {
  std::vector<std::string> names = {"base", "sft", "rl"};
  if (sizes.rl_single_turn) names.push_back("rl-single");
  return names;
}

OptionTable demo_size_options(DemoSizes& z) {
  return {{"train_databases", "", &z.train_databases}, {"dev_databases", "", &z.dev_databases},
          {"questions_per_database", "", &z.questions_per_database}, {"train_limit", "", &z.train_limit},
          {"dev_limit", "", &z.dev_limit}, {"base_dev_limit", "", &z.base_dev_limit}, {"vocab", "", &z.vocab}, {"hidden", "", &z.hidden},
          {"layers", "", &z.layers}, {"heads", "", &z.heads}, {"kv_heads", "", &z.kv_heads},
          {"head_dim", "", &z.head_dim}, {"intermediate", "", &z.intermediate},
          {"sft_epochs", "", &z.sft_epochs}, {"restate_question", "", &z.restate_question},
          {"sft_micro_batch_tokens", "", &z.sft_micro_batch_tokens}, {"sft_share_group", "", &z.sft_share_group},
          {"sft_lr", "", &z.sft_lr}, {"sft_databases", "", &z.sft_databases}, {"rl_steps", "", &z.rl_steps}, {"rl_batch", "", &z.rl_batch},
          {"rl_group", "", &z.rl_group}, {"rl_lr", "", &z.rl_lr}, {"rl_cosine", "", &z.rl_cosine},
          {"rl_min_lr_ratio", "", &z.rl_min_lr_ratio}, {"rl_eval_every", "", &z.rl_eval_every},
          {"rl_executed_reward", "", &z.rl_executed_reward}, {"rl_spare_copied_answers", "", &z.rl_spare_copied_answers},
          {"rl_single_turn", "", &z.rl_single_turn}, {"rl_temperature", "", &z.rl_temperature},
          {"rl_top_p", "", &z.rl_top_p}, {"max_turn_tokens", "", &z.max_turn_tokens},
          {"max_total_tokens", "", &z.max_total_tokens}};
}

void set_demo_size(DemoSizes& sizes, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  check(eq != std::string::npos, "demo --set: '", assignment, "' is not KEY=VALUE");
  const std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  std::string known;
  for (const Option& o : demo_size_options(sizes)) {
    known += std::string(known.empty() ? "" : ", ") + o.key;
    if (key != o.key) continue;
    check(!value.empty() && value.front() != '-', "demo --set ", key, ": '", value, "' is not a number >= 0");
    set_option_value(o, value, "demo --set " + key);
    return;
  }
  fail("demo --set: unknown key '", key, "' (known: ", known, ")");
}

DemoReport run_demo(const DemoConfig& config) {
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = cpu_seconds();
  auto log = [&](const std::string& line) {
    if (config.log) config.log(line);
  };
  DemoReport rep;
  rep.config = config;
  const DemoSizes& s = config.sizes;
  // Before anything is written: a CUDA run that cannot run says so now, not after the benchmark.
  const PolicyBackend& backend = find_backend(config.device);
  check_backend_usable(backend, "demo", s.head_dim, "add --set head_dim=64");
  TrainConfig tc = train_config(config);
  std::unique_ptr<Protocol> protocol = make_protocol(config.protocol);
  const fs::path out = config.out, cache = out / "cache";
  // One process per folder; never another command's run; the previous demo kept one level back.
  RunLock lock = lock_run_folder(out.string());
  check(!fs::exists(out / "metrics.jsonl") && !fs::exists(out / "checkpoints"), "demo: ", out.string(),
        " holds a train or sft run (metrics.jsonl, checkpoints/); give the demo a folder of its own (--out)");
  keep_previous_demo(out, config.log);
  fs::create_directories(cache);

  // ---- benchmark, tokenizer, model
  const std::string synth = (cache / str_cat("synth-s", config.synth_seed, "-", s.train_databases, "x",
                                             s.dev_databases, "x", s.questions_per_database)).string();
  write_benchmark(synth, config.synth_seed, s);
  sql::Dataset train = load_split(synth, "train", s.train_limit, false);
  sql::Dataset dev = load_split(synth, "dev", s.dev_limit, true);
  rep.train_questions = static_cast<int64_t>(train.examples.size());
  rep.dev_questions = static_cast<int64_t>(dev.examples.size());
  const auto [sft_train, rl_train] = split_databases(train, s.sft_databases);
  if (s.sft_databases > 0)
    log(str_cat("demo: SFT on the first ", s.sft_databases, " train databases (", sft_train.examples.size(),
                " questions), GRPO on the other ", rl_train.examples.size(), " questions"));
  sql::Pool pool;
  // The gold demonstrations come first: the tokenizer learns its merges on them too.
  SynthDemoOptions dopt;
  dopt.enable_thinking = true;  // the rollout's prompt (Qwen3 template, thinking on)
  dopt.restate_question = s.restate_question != 0;
  SynthDemoStats dstats;
  std::vector<Demo> demos = synth_demos(*protocol, pool, sft_train, dopt, &dstats);
  check(!demos.empty(), "demo: no demonstrations for protocol ", config.protocol);
  std::string demo_text;
  {
    std::ofstream f(out / "demos.jsonl", std::ios::binary | std::ios::trunc);
    for (const Demo& d : demos) {
      f << demo_jsonl(d, sft_train.examples[d.example], *protocol) << "\n";
      for (const SftSegment& seg : d.segments) demo_text += seg.text;
    }
    check(f.good(), (out / "demos.jsonl").string(), ": write failed");
  }
  // Keyed by the corpus's FNV-1a: another protocol or demo wording gets its own tokenizer.
  uint64_t corpus_hash = 1469598103934665603ull;
  for (unsigned char ch : demo_text) corpus_hash = (corpus_hash ^ ch) * 1099511628211ull;
  const std::string tok_path = (cache / str_cat("tokenizer-s", config.synth_seed, "-v", s.vocab, "-n",
                                                train.examples.size(), "-", std::hex, corpus_hash, ".json")).string();
  if (!fs::exists(tok_path))
    write_text_atomic(tok_path, train_embedded_tokenizer(train.examples, pool, static_cast<size_t>(s.vocab), demo_text));
  const std::string tok_json = slurp(tok_path);
  std::unique_ptr<Tokenizer> tok = load_tokenizer_from_string(tok_json, tok_path);
  QwenModel model = make_embedded_model(tc, static_cast<int64_t>(tok->size()));
  for (const char* eos : {"<|im_end|>", "<|endoftext|>"})
    if (int32_t id = tok->token_id(eos); id >= 0) model.config.eos_token_ids.push_back(id);
  rep.params = model.num_params;
  log(str_cat("demo: ", rep.train_questions, " train / ", rep.dev_questions, " dev questions, tokenizer ", tok->size(),
              " ids, tiny Qwen3 ", model.num_params, " parameters, protocol ", config.protocol, ", seed ", config.seed,
              ", device ", config.device));

  // Each step's wall and CPU seconds, from the end of the previous one.
  auto phase_start = start;
  double phase_cpu = cpu_start;
  auto end_phase = [&](const std::string& name) {
    const double now_cpu = cpu_seconds();
    rep.phases.push_back({name, since(phase_start), now_cpu - phase_cpu});
    phase_start = std::chrono::steady_clock::now();
    phase_cpu = now_cpu;
    return rep.phases.back().seconds;
  };
  end_phase("setup");  // benchmark, demonstrations, tokenizer, model

  sql::Limits limits;
  RewardContext eval_ctx(pool, limits, sql::CompareMode::BirdSet);
  double eval_seconds = 0;
  auto eval_stage = [&](const std::string& name, const std::vector<sql::Example>& questions) {
    DemoStage st{name, {}, {}};
    Policy policy = frozen_policy(backend, model);
    st.multi = evaluate(config, policy, *tok, *protocol, pool, eval_ctx, questions, name, false);
    eval_seconds += end_phase("eval " + name + " multi-turn");
    st.single = evaluate(config, policy, *tok, *protocol, pool, eval_ctx, questions, name, true);
    eval_seconds += end_phase("eval " + name + " single-turn");
    rep.stages.push_back(std::move(st));
  };
  eval_stage("base", first_or_spread(dev.examples, s.base_dev_limit, true));

  // ---- SFT on gold multi-turn demonstrations of the train split
  std::vector<SftSequence> seqs;
  for (const Demo& d : demos) seqs.push_back(tokenize_segments(*tok, d.segments));
  rep.demos = static_cast<int64_t>(seqs.size());
  SftConfig sc;
  sc.epochs = s.sft_epochs;
  sc.lr = static_cast<float>(s.sft_lr);
  sc.warmup_ratio = 0.05f;
  sc.min_lr_ratio = 0.1f;
  sc.micro_batch_tokens = s.sft_micro_batch_tokens;
  sc.share_group = s.sft_share_group;
  sc.seed = config.seed;
  OptimizerState sft_opt = fresh_optimizer_state(backend, model.num_params);
  SftRunStats ss;
  if (config.sft_from.empty()) {
    SftRunOptions so;
    so.out_dir = (out / "sft").string(), so.tokenizer_path = tok_path;
    so.device = backend.device;
    so.tb_dir = (out / "tb" / "sft").string();
    if (config.log) {
      // SFT is the longest phase (~60% of the default's time): show it moving.
      so.progress = true;
      so.progress_label = "demo: sft";
      so.progress_plain_lines = 20;
    }
    ss = run_sft(model, sft_opt, std::move(seqs), sc, so);
  } else {
    // An earlier demo's SFT weights: the same benchmark and tokenizer (checked), so the GRPO phase
    // of several variants starts from one SFT run.
    const std::string ckpt = latest_checkpoint((fs::path(config.sft_from) / "sft").string());
    check(!ckpt.empty(), "demo: --sft-from ", config.sft_from, ": no checkpoint in ", config.sft_from, "/sft/checkpoints");
    check(slurp((fs::path(ckpt) / "tokenizer.json").string()) == tok_json, "demo: --sft-from ", ckpt,
          ": its tokenizer is not this run's (another synth-seed, size or protocol)");
    // The SFT settings this run would train with (its seed, epochs, lr): another run's weights
    // would make the comparison meaningless.
    const nlohmann::json saved = read_trainer_state(ckpt, "sft").at("config");
    check(saved == nlohmann::json(sft_config_json(sc)), "demo: --sft-from ", ckpt,
          ": trained with SFT settings ", saved.dump(), ", this run's are ", sft_config_json(sc).dump());
    QwenModel loaded = load_model(ckpt);
    check(loaded.num_params == model.num_params, "demo: --sft-from ", ckpt, ": ", loaded.num_params,
          " parameters, this run's model has ", model.num_params);
    model.params = std::move(loaded.params);
    log(str_cat("demo: SFT weights from ", ckpt));
  }
  rep.sft_first_loss = ss.first_loss, rep.sft_last_loss = ss.last_loss, rep.sft_seconds = ss.seconds;
  {
    // The held-out demonstrations' loss: how far the SFT model is from writing the dev gold
    // trajectories (a cheap sign of generalisation before the slower greedy evaluation).
    std::vector<SftSequence> dev_seqs;
    for (const Demo& d : synth_demos(*protocol, pool, dev, dopt)) dev_seqs.push_back(tokenize_segments(*tok, d.segments));
    TrainOptions topt;
    topt.max_tokens = std::max<int64_t>(s.sft_micro_batch_tokens, 1);
    for (const SftSequence& q : dev_seqs) topt.max_tokens = std::max<int64_t>(topt.max_tokens, static_cast<int64_t>(q.tokens.size()));
    TrainState state = make_train_state(model.config, topt);
    rep.sft_dev_loss = sft_eval_loss(model, state, dev_seqs, topt.max_tokens);
  }
  end_phase(config.sft_from.empty() ? "sft" : "sft (loaded)");  // with the dev demonstrations' loss
  log(str_cat("demo: SFT on ", rep.demos, " demonstrations (", dstats.trap_demos, " with traps): ", ss.updates,
              " updates, loss ", ss.first_loss, " -> ", ss.last_loss, ", dev demonstrations ", rep.sft_dev_loss, ", ",
              ss.seconds, " s"));
  eval_stage("sft", dev.examples);

  // ---- multi-turn GRPO from the SFT weights on the train split
  const std::vector<float> sft_params = model.params;  // the single-turn run starts here too
  TrainSummary ts = grpo_phase(config, tc, model, tok_json, tok_path, rl_train, dev, limits);
  rep.rl_reward_means = ts.reward_means;
  rep.rl_seconds = ts.seconds;
  rep.rl_eval = ts.eval_ex;
  rep.rl_best_step = ts.best_step;
  log(str_cat("demo: GRPO ", ts.last_step - ts.first_step, " steps, ", ts.seconds, " s"));
  end_phase("grpo multi-turn");
  eval_stage("rl", dev.examples);

  // ---- single-turn GRPO from the same SFT weights: the grid's other trained row
  if (s.rl_single_turn) {
    TrainConfig single = tc;
    single.out = (out / "rl-single").string();
    single.single_turn = true;
    single.executed_reward = 0;  // nothing runs in a single-turn rollout: the term has nothing to check
    validate_config(single);
    model.params = sft_params;
    TrainSummary st = grpo_phase(config, single, model, tok_json, tok_path, rl_train, dev, limits);
    rep.rl_single_reward_means = st.reward_means;
    rep.rl_single_seconds = st.seconds;
    log(str_cat("demo: single-turn GRPO ", st.last_step - st.first_step, " steps, ", st.seconds, " s"));
    end_phase("grpo single-turn");
    eval_stage("rl-single", dev.examples);
  }

  rep.eval_seconds = eval_seconds;
  rep.seconds = since(start);
  rep.cpu_seconds = cpu_seconds() - cpu_start;
  write_text_atomic((out / "report.json").string(), demo_report_json(rep).dump(2) + "\n");
  write_text_atomic((out / "report.md").string(), demo_table(rep));
  // report.html (report/report.h) reads back what the stages wrote: the SFT and GRPO run
  // folders and the stage evaluations of OUT/eval.
  std::vector<ReportRun> runs;
  if (fs::exists(out / "sft" / "metrics.jsonl")) runs.push_back(load_report_run((out / "sft").string(), "SFT"));
  runs.push_back(load_report_run((out / "rl").string(), "GRPO"));
  if (fs::exists(out / "rl-single" / "metrics.jsonl"))
    runs.push_back(load_report_run((out / "rl-single").string(), "GRPO single-turn"));
  runs.push_back(load_report_run(out.string(), "stage evaluations"));
  ReportOptions report_options;
  report_options.title = str_cat("llm_sqlrl demo: SFT then multi-turn", s.rl_single_turn ? " and single-turn" : "",
                                  " GRPO (seed ", config.seed, ")");
  write_text_atomic((out / "report.html").string(), report_html(runs, report_options));
  return rep;
}

}  // namespace sqlrl::rl
