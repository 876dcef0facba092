// `llm_sqlrl sft`: supervised fine-tuning on masked multi-turn data (rl/sft/sft.h, rl/sft/sft_data.h).
//   llm_sqlrl sft --data FILE.jsonl --weights DIR --tokenizer FILE --out DIR [--epochs N] [--lr X]
//       [--max-steps N] [--micro-batch-tokens N] [--seed S] [--config FILE] ...
//   llm_sqlrl sft --resume DIR    continue a run from its latest checkpoint (or DIR = a step-N folder)
//   llm_sqlrl sft synth-demos --protocol NAME --out FILE.jsonl [--data BENCH_DIR] [--format spider|sparc]
//       gold demonstrations for the synthetic benchmark (rl/sft/sft_demos.h); without --data the
//       default benchmark is written to <out>.bench/ first
//   llm_sqlrl sft self-taught --weights DIR --tokenizer FILE --data BENCH_DIR --protocol NAME --out DIR
//       MTSQL-R1's self-taught warm start (rl/sft/sft_self_taught.h)
// Each one's settings are one options table (app/options.h): flags, --config FILE, and the
// resolved config.toml written into the output folder (sft, self-taught).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "app/commands.h"
#include "app/launch.h"
#include "kernels/attention.h"
#include "app/options.h"
#include "rl/run_folder.h"
#include "rl/options.h"
#include "rl/sft/sft.h"
#include "rl/sft/sft_demos.h"
#include "rl/sft/sft_self_taught.h"
#include "rl/tb_log.h"
#include "rl/policy_backend.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/interrupt.h"
#include "sql/data/datasets.h"
#include "sql/data/synth.h"

namespace sqlrl {
namespace {
namespace fs = std::filesystem;

// The SFT settings a resumed run takes from its checkpoint (SftConfig), as table entries.
struct SftTraining {
  rl::SftConfig config;
  std::string decay = "cosine";  // config.decay by name
};

void add_sft_training_options(OptionTable& t, SftTraining& s) {
  rl::SftConfig& c = s.config;
  t.insert(t.end(), {
      {"epochs", "passes over the data", &c.epochs},
      {"lr", "peak learning rate (MTSQL-R1: 5e-6)", &c.lr},
      {"max-steps", "stop after this many updates (0 = epochs decide)", &c.max_steps},
      {"micro-batch-tokens", "packed positions per micro-batch", &c.micro_batch_tokens},
      {"grad-accum", "micro-batches per optimizer update (CPU: each one's gradient from zero, added in order: the bits "
                     "mpirun -np N computes with one micro-batch per rank)", &c.grad_accum},
      {"warmup-ratio", "linear warmup share of the updates", &c.warmup_ratio},
      {"min-lr-ratio", "cosine floor as a share of --lr", &c.min_lr_ratio},
      {"decay", "cosine | constant", &s.decay},
      {"weight-decay", "AdamW decoupled weight decay", &c.adamw.weight_decay},
      {"beta1", "AdamW beta1", &c.adamw.beta1},
      {"beta2", "AdamW beta2 (SQL-Trail A.5: 0.95)", &c.adamw.beta2},
      {"adam-eps", "AdamW epsilon", &c.adamw.eps},
      {"max-grad-norm", "global grad-norm clip (<= 0: off)", &c.max_grad_norm},
      {"seed", "shuffle seed", &c.seed},
      {"save-every", "updates between checkpoints (0 = only the last)", &c.save_every},
      {"share-group", "visit sequences with a common prompt in runs of N and pack the prompt once (0 = off)",
       &c.share_group},
  });
}

constexpr int64_t kMaxGradAccum = 65536;

// The checks CLI11 made per flag before the table, now on the resolved values.
void finish_sft_training(SftTraining& s, const char* command) {
  const rl::SftConfig& c = s.config;
  check(c.epochs >= 0 && c.max_steps >= 0 && c.save_every >= 0 && c.share_group >= 0, command,
        ": epochs, max-steps, save-every and share-group must be >= 0");
  check(c.lr > 0, command, ": lr must be positive, got ", c.lr);
  check(c.micro_batch_tokens > 0 && c.grad_accum > 0, command, ": micro-batch-tokens and grad-accum must be positive");
  // Each micro-batch of an update is planned up front: 10^9 of them asked for gigabytes before
  // the first step. No real run accumulates more than a few hundred.
  check(c.grad_accum <= kMaxGradAccum, command, ": grad-accum ", c.grad_accum, " is above ", kMaxGradAccum,
        " micro-batches per update");
  check(c.warmup_ratio >= 0 && c.warmup_ratio <= 1 && c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1, command,
        ": warmup-ratio and min-lr-ratio must be in [0, 1]");
  check(c.adamw.beta1 >= 0 && c.adamw.beta1 < 1 && c.adamw.beta2 >= 0 && c.adamw.beta2 < 1 && c.adamw.eps > 0, command,
        ": beta1 and beta2 must be in [0, 1), adam-eps positive");
  check(s.decay == "cosine" || s.decay == "constant", command, ": decay '", s.decay, "' is not cosine or constant");
  s.config.decay = s.decay == "constant" ? rl::LrDecay::Constant : rl::LrDecay::Cosine;
}

struct SftSettings : rl::OutputOptions, rl::DeviceOptions, rl::ModelOptions, rl::TemplateOptions, SftTraining,
                     rl::MemoryOptions, rl::LoraOptions, rl::AdapterOptions, rl::CheckpointOptions {
  std::string data, resume;
  bool tensorboard = true;
  int64_t zero_stage = 0;  // several ranks (rl/data_parallel.h); may change on resume
};

OptionTable sft_options(SftSettings& s) {
  OptionTable t;
  // Resumable (Option::resumable): where the data and tokenizer are (their fingerprints must match),
  // the run folder, logging, device, memory and checkpoints; the rest is the checkpoint's.
  t.push_back({"data", "JSONL: {messages}, {segments} or {tokens, mask} per line", &s.data, true});
  rl::add_model_options(t, s);
  rl::add_lora_options(t, s);
  rl::add_adapter_options(t, s);
  set_option_help(t, "adapter", "PEFT LoRA adapter folder to go on training (its files set rank, alpha and targets; "
                  "the base frozen)");
  rl::add_output_options(t, s, "run folder: metrics.jsonl, checkpoints/step-N/, config.toml");
  t.push_back({"resume", "continue a run: its folder (latest checkpoint) or a checkpoints/step-N folder; the settings, "
               "data and tokenizer are the run's own", &s.resume, true});
  t.push_back({"tensorboard", rl::kTensorboardHelp, &s.tensorboard, true});
  rl::add_device_options(t, s);
  set_option_help(t, "device", "cpu (f32) | cuda (one GPU: bf16 weights, f32 master and moments; head_dim 64 or 128)");
  rl::add_template_options(t, s);
  add_sft_training_options(t, s);
  rl::add_checkpoint_options(t, s);
  rl::add_zero_stage_option(t, s.zero_stage);
  rl::add_memory_options(t, s);
  set_option_resumable(t, "tokenizer", true);
  // SFT has no rollout phase to offload the moments during: that key is GRPO's alone.
  std::erase_if(t, [](const Option& o) { return std::string(o.key) == "offload-optimizer"; });
  return t;
}

struct SftArgs : TableArgs<SftSettings> {
  CommOptions launch;  // mpirun / srun / RANK: one micro-batch per rank per update
};

ChatTemplate template_for(const std::string& name, const std::string& tokenizer) {
  if (!name.empty()) return chat_template_from_name(name);
  return detect_chat_template_for_tokenizer(tokenizer).value_or(ChatTemplate::qwen3);
}

void log_line(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// --resume DIR: the checkpoint's weights, optimizer and settings; data and tokenizer as the run
// recorded them unless given again (the data's fingerprint must match).
rl::SftCheckpoint prepare_resume(const SftArgs& args, SftSettings& a, QwenModel& model, rl::OptimizerState& opt,
                                 std::unique_ptr<LoraAdapter>& adapter) {
  // A key that is not resumable (Option::resumable: the training settings, model and template)
  // is the checkpoint's: giving it is refused.
  SftSettings scratch;
  const OptionTable table = sft_options(scratch);
  std::vector<bool> given;
  for (size_t i = 0; i < table.size(); ++i) given.push_back(args.flags.flags[i]->count() > 0);
  const std::vector<std::string> fixed = rl::fixed_settings_given(table, given);
  check(fixed.empty(), "sft --resume: --", fixed.empty() ? "" : fixed[0],
        " cannot be given: a resumed run keeps its checkpoint's training settings");
  check(args.flags.config.empty(), "sft --resume: --config cannot be given: a resumed run keeps its checkpoint's settings");
  check(!rl::sft_run_without_checkpoint(a.resume), "sft --resume: ", a.resume, " has no complete checkpoint (the run "
        "stopped before its first save): start it again from update 0 with: llm_sqlrl sft --config ", a.resume,
        "/config.toml --out ", a.resume);
  const std::string ckpt = rl::resolve_checkpoint(a.resume);
  rl::SftCheckpoint ck = rl::read_sft_checkpoint(ckpt);
  const nlohmann::json saved_state = rl::read_trainer_state(ckpt, "sft");
  const std::string note = rl::blas_threads_note(saved_state, ckpt);
  if (!note.empty()) std::printf("%s\n", note.c_str());
  if (const std::string core = rl::find_backend(a.device).host_blas ? rl::check_blas_core(saved_state, ckpt) : "";
      !core.empty())
    std::printf("%s\n", core.c_str());
  const std::string state_file = (fs::path(ckpt) / "trainer_state.json").string();
  auto recorded = [&](const char* key) {
    check(ck.run.contains(key) && ck.run[key].is_string(), state_file, ": run.", key,
          " is not recorded (give --", key, ")");
    return ck.run[key].get<std::string>();
  };
  if (a.data.empty()) a.data = recorded("data");
  if (a.tokenizer.empty())
    a.tokenizer = fs::exists(fs::path(ckpt) / "tokenizer.json") ? (fs::path(ckpt) / "tokenizer.json").string()
                                                                 : recorded("tokenizer");
  a.chat_template = recorded("chat_template");
  if (ck.run.contains("enable_thinking")) a.enable_thinking = ck.run["enable_thinking"].get<bool>();
  // The run folder holding checkpoints/step-N.
  if (a.out.empty()) a.out = fs::path(ckpt).parent_path().parent_path().string();
  if (rl::is_adapter_checkpoint(ckpt)) {
    // A LoRA run: the checkpoint holds the adapter; the frozen base is the run's --weights.
    const std::string base = recorded("weights");
    model = load_model(base);
    adapter = std::make_unique<LoraAdapter>(load_adapter(ckpt, model));
    adapter->config.base_model = base;
  } else {
    model = load_model(ckpt);
  }
  // Every moment (from one file or any world size's shards); run_sft keeps this rank's slice.
  const int64_t trainable = adapter ? adapter->num_params : model.num_params;
  opt = rl::load_optimizer_range(ckpt, trainable, 0, trainable);
  std::printf("resuming %s after update %lld of %lld\n", ckpt.c_str(), static_cast<long long>(ck.cursor.updates),
              static_cast<long long>(ck.cursor.planned));
  return ck;
}

void run_sft_command(SftArgs& args) {
  SftSettings a = resolve_options(args.flags, args.settings, SftSettings{}, sft_options);
  rl::validate_groups(a, "sft");
  rl::validate_zero_stage(a.zero_stage);
  // Several processes: each reads the data, rank 0 alone prints and writes the run folder.
  const Comm& job = join_job(args.launch);
  if (!job.is_root()) check(std::freopen("/dev/null", "w", stdout) != nullptr, "sft: rank ", job.rank, ": /dev/null");
  const rl::PolicyBackend& backend = rl::find_backend(a.device);
  rl::check_backend_usable(backend, "sft");
  join_job_device(backend.device);  // each rank on GPU local_rank, NCCL between them
  QwenModel model;
  rl::OptimizerState opt;
  std::unique_ptr<LoraAdapter> adapter;  // a LoRA run's (the base frozen)
  std::optional<rl::SftCheckpoint> resume;
  if (!a.resume.empty()) resume = prepare_resume(args, a, model, opt, adapter);
  if (a.tokenizer.empty()) a.tokenizer = rl::model_tokenizer_path(a);
  check(!a.data.empty() && (resume || !a.weights.empty()) && !a.tokenizer.empty() && !a.out.empty(),
        "sft: --data, --weights, --out and --tokenizer (unless one is beside the weights) are required (or --resume DIR, or a subcommand: synth-demos, "
        "self-taught)");
  finish_sft_training(a, "sft");
  if (!resume) {
    model = load_model(a.weights);
    adapter = rl::training_adapter(a, a, model, a.config.seed, fs::absolute(a.weights).string(), "sft");
    opt = rl::fresh_optimizer_state(backend, adapter ? adapter->num_params : model.num_params);
  }
  // Refused before the data is read and anything printed.
  rl::check_backend_usable(backend, "sft", model.config.head_dim);
  std::unique_ptr<Tokenizer> tok = load_tokenizer(a.tokenizer);
  ChatOptions chat;
  chat.chat_template = resume ? chat_template_from_name(a.chat_template) : template_for(a.chat_template, a.tokenizer);
  if (!a.enable_thinking) chat.enable_thinking = false;  // unset renders as true (the template's default)
  rl::SftLoadStats ls;
  std::vector<rl::SftSequence> data = rl::load_sft_jsonl(a.data, *tok, chat, model.config.vocab_size, &ls);
  std::printf("%s: %lld lines, %lld sequences (%lld without a trained token skipped), %lld tokens, %lld trained\n",
              a.data.c_str(), static_cast<long long>(ls.lines), static_cast<long long>(ls.sequences),
              static_cast<long long>(ls.skipped_no_target), static_cast<long long>(ls.tokens),
              static_cast<long long>(ls.trained_tokens));
  // Field by field: GCC 12 took the aggregate form for a maybe-uninitialized string (-Werror).
  rl::SftRunOptions ro;
  ro.out_dir = a.out, ro.tokenizer_path = a.tokenizer, ro.log = log_line;
  ro.checkpoint = a;  // the checkpoint group
  ro.progress = true;  // a progress line per update; the update's JSON is in OUT/metrics.jsonl
  ro.comm = &job;
  ro.resume = resume ? &*resume : nullptr;
  ro.device = backend.device;
  ro.memory = a;
  ro.zero_stage = static_cast<int>(a.zero_stage);
  ro.tensorboard = a.tensorboard;
  ro.adapter = adapter.get();
  if (adapter)
    std::printf("sft: LoRA rank %lld, alpha %g on %s (%lld trainable parameters, the base's %lld frozen)\n",
                static_cast<long long>(adapter->config.rank), adapter->config.alpha, adapter->config.base_model.c_str(),
                static_cast<long long>(adapter->num_params), static_cast<long long>(model.num_params));
  ro.run_info = {{"data", fs::absolute(a.data).string()},
                 {"weights", resume ? resume->run.value("weights", std::string()) : fs::absolute(a.weights).string()},
                 {"tokenizer", fs::absolute(a.tokenizer).string()},
                 {"chat_template", chat_template_name(chat.chat_template)},
                 {"enable_thinking", a.enable_thinking}};
  if (!resume) {
    a.chat_template = chat_template_name(chat.chat_template);
    ro.config_toml = options_to_toml(sft_options(a), "llm_sqlrl sft: the resolved configuration (llm_sqlrl sft --config FILE)");
  }
  install_interrupt_handlers();
  rl::SftRunStats st = rl::run_sft(model, opt, std::move(data), a.config, ro);
  if (st.interrupted) {
    std::printf("sft: interrupted after %lld updates; the checkpoint %s holds the last; continue with --resume %s\n",
                static_cast<long long>(st.updates), st.checkpoints.empty() ? "(none: no --out)" : st.checkpoints.back().c_str(),
                a.out.c_str());
    std::fflush(stdout);
    leave_job();  // MPI_Finalize: std::exit skips main's
    std::exit(128 + interrupt_signal());
  }
  std::printf("sft: %lld updates over %lld epochs, loss %.4f -> %.4f, %lld trained tokens, %lld sequences cut "
              "(%lld dropped: no target left), %.1f s; %s in %s\n",
              static_cast<long long>(st.updates), static_cast<long long>(st.epochs_done), st.first_loss, st.last_loss,
              static_cast<long long>(st.trained_tokens), static_cast<long long>(st.clipped.cut),
              static_cast<long long>(st.clipped.dropped), st.seconds, adapter ? "the LoRA adapter" : "weights",
              st.checkpoints.empty() ? "(none)" : st.checkpoints.back().c_str());
}

struct DemoSettings : rl::ProtocolOptions {
  DemoSettings() { protocol.clear(); }  // required: no default
  std::string out, data, split = "train", format = "spider";
  bool enable_thinking = true, naive = true;
  double repair_share = rl::SynthDemoOptions{}.repair_share;
  uint64_t synth_seed = 1;
};

OptionTable synth_demo_options(DemoSettings& s) {
  OptionTable t;
  rl::add_protocol_options(t, s);
  t.insert(t.end(), {
      {"out", "output JSONL", &s.out},
      {"data", "synthetic benchmark folder (llm_sqlrl data synth); default: write one", &s.data},
      {"split", "train | dev", &s.split},
      {"format", "spider (questions) | sparc (dialogue turns, <data>/sparc)", &s.format},
      {"synth-seed", "seed of the benchmark written when --data is absent", &s.synth_seed},
  });
  rl::add_thinking_option(t, s.enable_thinking);
  t.push_back({"naive", "trap demos start with the naive query (=false: with the probe)", &s.naive});
  t.push_back({"repair-share", "share of trap-free questions shown as a repair (a misnamed column, the error, the fix)",
               &s.repair_share});
  return t;
}

using DemoArgs = TableArgs<DemoSettings>;

void run_synth_demos(DemoArgs& args) {
  DemoSettings a = resolve_options(args.flags, args.settings, DemoSettings{}, synth_demo_options);
  check(!a.protocol.empty() && !a.out.empty(), "sft synth-demos: --protocol and --out are required");
  rl::validate_groups(a, "sft synth-demos");
  check(a.split == "train" || a.split == "dev", "sft synth-demos: split '", a.split, "' is not train or dev");
  check(a.format == "spider" || a.format == "sparc", "sft synth-demos: format '", a.format, "' is not spider or sparc");
  std::unique_ptr<rl::Protocol> protocol = rl::make_protocol(a.protocol, a);
  std::string dir = a.data;
  if (dir.empty()) {
    dir = (fs::path(a.out).parent_path() / (fs::path(a.out).stem().string() + ".bench")).string();
    sql::SynthOptions so;
    so.seed = a.synth_seed;
    so.progress = true;
    sql::SynthReport r = sql::write_synth_benchmark(dir, so);
    std::printf("wrote the synthetic benchmark (seed %llu) to %s: %d train + %d dev questions\n",
                static_cast<unsigned long long>(a.synth_seed), dir.c_str(), r.train_questions, r.dev_questions);
  }
  sql::LoadOptions lo;
  lo.format = a.format == "sparc" ? sql::DatasetFormat::Sparc : sql::DatasetFormat::Spider;
  lo.dir = a.format == "sparc" ? (fs::path(dir) / "sparc").string() : dir;
  lo.split = a.split;
  sql::Dataset ds = sql::load_dataset(lo);
  sql::Pool pool;
  rl::SynthDemoOptions o;
  o.naive_first = a.naive;
  check(a.repair_share >= 0 && a.repair_share <= 1, "sft synth-demos: --repair-share ", a.repair_share, " is not in [0, 1]");
  o.repair_share = a.repair_share;
  o.progress = true;
  if (!a.enable_thinking) o.enable_thinking = false;  // unset renders as true
  rl::SynthDemoStats st;
  std::vector<rl::Demo> demos = rl::synth_demos(*protocol, pool, ds, o, &st);
  std::string jsonl;
  for (const rl::Demo& d : demos) jsonl += rl::demo_jsonl(d, ds.examples[d.example], *protocol) + "\n";
  write_text_atomic(a.out, jsonl);
  std::printf("%s: %lld demonstrations of %lld %s questions (%lld with traps, %lld repairs; %lld turns, %lld SQL "
              "executions); skipped: %lld over the turn budget, %lld no cue in the first result, %lld probe could not "
              "show the value, %lld not EX-correct\n",
              a.out.c_str(), static_cast<long long>(st.written), static_cast<long long>(st.questions), a.split.c_str(),
              static_cast<long long>(st.trap_demos), static_cast<long long>(st.repair_demos), static_cast<long long>(st.turns),
              static_cast<long long>(st.exec_turns), static_cast<long long>(st.skipped_budget),
              static_cast<long long>(st.skipped_no_cue), static_cast<long long>(st.skipped_probe),
              static_cast<long long>(st.skipped_not_ex));
}

struct SelfTaughtSettings : rl::OutputOptions, rl::DeviceOptions, rl::ModelOptions, rl::TemplateOptions,
                            rl::ProtocolOptions, rl::SamplingOptions, rl::TurnOptions, rl::SqlOptions, SftTraining,
                            rl::LoraOptions, rl::AdapterOptions {
  SelfTaughtSettings() {
    const rl::SelfTaughtConfig d;
    protocol.clear();  // required: no default
    temperature = 0.7;  // MTSQL-R1 §3.2.2
    top_p = d.rollout.sampling.top_p, top_k = d.rollout.sampling.top_k;
    max_turns = d.rollout.max_turns, max_turn_tokens = d.rollout.max_turn_tokens;
    max_total_tokens = d.rollout.max_total_tokens;
    sql_timeout_ms = d.rollout.sql_limits.timeout_ms, sql_max_rows = static_cast<int64_t>(d.rollout.sql_limits.max_rows);
    rounds = d.rounds, samples = d.rollout.group_size, easy_keep = d.easy_keep, hard_keep = d.hard_keep;
    require_em = d.require_em;
  }
  std::string data, split = "train", format = "spider";
  int64_t rounds = 0, samples = 0, easy_keep = 0, hard_keep = 0, limit = 0;
  bool require_em = false;
  uint64_t sample_seed = 0;
};

OptionTable self_taught_options(SelfTaughtSettings& s) {
  OptionTable t;
  t.push_back({"data", "benchmark folder (its training split)", &s.data});
  t.push_back({"format", "spider | bird | sparc | cosql | synsql", &s.format});
  t.push_back({"split", "train | dev", &s.split});
  rl::add_model_options(t, s);
  rl::add_lora_options(t, s);
  rl::add_adapter_options(t, s);
  set_option_help(t, "adapter", "PEFT LoRA adapter folder the rounds go on training (its files set rank, alpha and "
                  "targets; the base frozen); cpu only");
  rl::add_output_options(t, s, "run folder: round-<i>/ (metrics, checkpoints), self_taught.json, config.toml");
  rl::add_protocol_options(t, s);
  t.insert(t.end(), {
      {"rounds", "rounds R (paper: 3)", &s.rounds},
      {"samples", "rollouts N per question (paper: 20)", &s.samples},
  });
  rl::add_sampling_options(t, s);
  set_option_help(t, "temperature", "sampling temperature (paper: 0.7)");
  t.insert(t.end(), {
      {"sample-seed", "Philox seed of the rollouts", &s.sample_seed},
      {"require-em", "keep only trajectories that are EX and EM correct", &s.require_em},
      {"easy-keep", "short trajectories kept per easy/fully-solved question", &s.easy_keep},
      {"hard-keep", "long trajectories kept per hard question", &s.hard_keep},
  });
  rl::add_turn_options(t, s);
  rl::add_sql_options(t, s);
  t.push_back({"limit", "first N questions only (0 = all)", &s.limit});
  rl::add_device_options(t, s);
  set_option_help(t, "device", "cpu (f32) | cuda (rollouts and SFT on one GPU: bf16 weights, f32 master; head_dim 64 or 128)");
  rl::add_template_options(t, s);
  add_sft_training_options(t, s);
  return t;
}

using SelfTaughtArgs = TableArgs<SelfTaughtSettings>;

void run_self_taught(SelfTaughtArgs& args) {
  SelfTaughtSettings a = resolve_options(args.flags, args.settings, SelfTaughtSettings{}, self_taught_options);
  if (a.tokenizer.empty()) a.tokenizer = rl::model_tokenizer_path(a);
  check(!a.data.empty() && !a.weights.empty() && !a.tokenizer.empty() && !a.out.empty() && !a.protocol.empty(),
        "sft self-taught: --data, --weights, --out, --protocol and --tokenizer (unless one is beside the weights) are "
        "required");
  rl::validate_groups(a, "sft self-taught");
  check(a.rounds > 0 && a.samples > 0 && a.easy_keep >= 0 && a.hard_keep >= 0 && a.limit >= 0,
        "sft self-taught: rounds and samples must be positive, easy-keep, hard-keep and limit >= 0");
  const rl::PolicyBackend& backend = rl::find_backend(a.device);
  rl::check_backend_usable(backend, "sft self-taught");
  finish_sft_training(a, "sft self-taught");
  rl::SelfTaughtConfig config;
  config.rounds = static_cast<int>(a.rounds);
  config.require_em = a.require_em;
  config.easy_keep = static_cast<int>(a.easy_keep), config.hard_keep = static_cast<int>(a.hard_keep);
  config.sft = a.config;
  config.rollout.group_size = a.samples;
  rl::apply_to_rollout(config.rollout, a, a.sample_seed, a, a);
  config.rollout.chat_template = template_for(a.chat_template, a.tokenizer);
  config.rollout.enable_thinking = a.enable_thinking;
  QwenModel model = load_model(a.weights);
  std::unique_ptr<Tokenizer> tok = load_tokenizer(a.tokenizer);
  std::unique_ptr<rl::Protocol> protocol = rl::make_protocol(a.protocol, a);
  sql::LoadOptions lo;
  lo.format = sql::parse_dataset_format(a.format);
  lo.dir = a.data;
  lo.split = a.split;
  lo.compute_difficulty = true;
  sql::Dataset ds = sql::load_dataset(lo);
  if (a.limit > 0 && static_cast<int64_t>(ds.examples.size()) > a.limit) ds.examples.resize(static_cast<size_t>(a.limit));
  sql::Pool pool(sql::model_sql_pool_options());
  rl::SelfTaughtOptions so{a.out, a.tokenizer, log_line};
  so.device = backend.device;
  const std::unique_ptr<LoraAdapter> adapter =
      rl::training_adapter(a, a, model, a.config.seed, fs::absolute(a.weights).string(), "sft self-taught");
  so.adapter = adapter.get();
  so.progress = true;
  a.chat_template = chat_template_name(config.rollout.chat_template);
  so.config_toml = options_to_toml(self_taught_options(a), "llm_sqlrl sft self-taught: the resolved configuration");
  std::vector<rl::SelfTaughtRound> rounds = rl::self_taught(model, *tok, *protocol, pool, ds.examples, config, so);
  nlohmann::ordered_json report = nlohmann::ordered_json::array();
  std::printf("round  questions  rollouts  correct  solved  kept  coverage\n");
  for (const rl::SelfTaughtRound& r : rounds) {
    std::printf("%5d  %9lld  %8lld  %7lld  %6lld  %4lld  %lld/%zu (%.1f%%)\n", r.round,
                static_cast<long long>(r.questions), static_cast<long long>(r.rollouts),
                static_cast<long long>(r.correct), static_cast<long long>(r.solved), static_cast<long long>(r.kept),
                static_cast<long long>(r.covered), ds.examples.size(), 100.0 * r.coverage);
    report.push_back({{"round", r.round}, {"questions", r.questions}, {"rollouts", r.rollouts}, {"correct", r.correct},
                      {"solved", r.solved}, {"kept", r.kept}, {"covered", r.covered}, {"coverage", r.coverage},
                      {"sft_sequences", r.sft_sequences}, {"sft_first_loss", r.sft_first_loss},
                      {"sft_last_loss", r.sft_last_loss}, {"rollout_seconds", r.rollout_seconds},
                      {"sft_seconds", r.sft_seconds}});
  }
  fs::create_directories(a.out);
  std::ofstream out(fs::path(a.out) / "self_taught.json", std::ios::binary | std::ios::trunc);
  out << report.dump(2) << "\n";
  check(out.good(), a.out, "/self_taught.json: write failed");
}

}  // namespace


void add_sft_command(CLI::App& app) {
  auto a = std::make_shared<SftArgs>();
  CLI::App* cmd = app.add_subcommand("sft", "Supervised fine-tuning on masked multi-turn data (JSONL)");
  cmd->require_subcommand(0, 1);
  add_table_flags(cmd, sft_options(a->settings), a->flags, "sft");
  add_launch_flags(cmd, a->launch);

  auto d = std::make_shared<DemoArgs>();
  CLI::App* demos = cmd->add_subcommand("synth-demos", "Gold multi-turn demonstrations for the synthetic benchmark");
  add_table_flags(demos, synth_demo_options(d->settings), d->flags, "synth-demos");
  demos->callback([d] { run_synth_demos(*d); });

  auto s = std::make_shared<SelfTaughtArgs>();
  CLI::App* st = cmd->add_subcommand("self-taught", "MTSQL-R1 self-taught warm start (Algorithm 1)");
  add_table_flags(st, self_taught_options(s->settings), s->flags, "self-taught");
  st->callback([s] { run_self_taught(*s); });

  cmd->callback([a, cmd] {
    if (!cmd->get_subcommands().empty()) return;
    run_sft_command(*a);
  });
}

}  // namespace sqlrl
