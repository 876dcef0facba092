// `llm_sqlrl sft`: supervised fine-tuning on masked multi-turn data (rl/sft/sft.h, rl/sft/sft_data.h).
//   llm_sqlrl sft --data FILE.jsonl --weights DIR --tokenizer FILE --out DIR [--epochs N] [--lr X]
//       [--max-steps N] [--micro-batch-tokens N] [--seed S] ...
//   llm_sqlrl sft --resume DIR    continue a run from its latest checkpoint (or DIR = a step-N folder)
//   llm_sqlrl sft synth-demos --protocol NAME --out FILE.jsonl [--data BENCH_DIR] [--format spider|sparc]
//       gold demonstrations for the synthetic benchmark (rl/sft/sft_demos.h); without --data the
//       default benchmark is written to <out>.bench/ first
//   llm_sqlrl sft self-taught --weights DIR --tokenizer FILE --data BENCH_DIR --protocol NAME --out DIR
//       MTSQL-R1's self-taught warm start (rl/sft/sft_self_taught.h)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "app/commands.h"
#include "rl/sft/sft.h"
#include "rl/sft/sft_demos.h"
#include "rl/sft/sft_self_taught.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "sql/data/datasets.h"
#include "sql/data/synth.h"

namespace sqlrl {
namespace {
namespace fs = std::filesystem;

struct SftArgs {
  std::string data, weights, tokenizer, out, chat_template, resume;
  std::string device = "cpu";  // not a training setting: a resumed run may move to another device
  rl::SftConfig config;
  std::string decay = "cosine";
  std::vector<CLI::Option*> training;  // the flags a resumed run takes from its checkpoint instead
};

void add_training_options(CLI::App* cmd, SftArgs& a) {
  const size_t before = cmd->get_options().size();
  cmd->add_option("--epochs", a.config.epochs, "passes over the data")->check(CLI::NonNegativeNumber);
  cmd->add_option("--lr", a.config.lr, "peak learning rate (MTSQL-R1: 5e-6)")->check(CLI::PositiveNumber);
  cmd->add_option("--max-steps", a.config.max_steps, "stop after this many updates (0 = epochs decide)");
  cmd->add_option("--micro-batch-tokens", a.config.micro_batch_tokens, "packed positions per micro-batch")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--grad-accum", a.config.grad_accum, "micro-batches per optimizer update")->check(CLI::PositiveNumber);
  cmd->add_option("--warmup-ratio", a.config.warmup_ratio, "linear warmup share of the updates")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-lr-ratio", a.config.min_lr_ratio, "cosine floor as a share of --lr")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--decay", a.decay, "cosine | constant")->check(CLI::IsMember({"cosine", "constant"}));
  cmd->add_option("--weight-decay", a.config.adamw.weight_decay, "AdamW decoupled weight decay");
  cmd->add_option("--max-grad-norm", a.config.max_grad_norm, "global grad-norm clip (<= 0: off)");
  cmd->add_option("--seed", a.config.seed, "shuffle seed");
  cmd->add_option("--save-every", a.config.save_every, "updates between checkpoints (0 = only the last)");
  cmd->add_option("--share-group", a.config.share_group,
                  "visit sequences with a common prompt in runs of N and pack the prompt once (0 = off)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--chat-template", a.chat_template, "qwen3 | qwen2.5 (default: detected from the tokenizer, else qwen3)");
  std::vector<CLI::Option*> all = cmd->get_options();
  a.training.assign(all.begin() + static_cast<std::ptrdiff_t>(before), all.end());
}

ChatTemplate template_for(const std::string& name, const std::string& tokenizer) {
  if (!name.empty()) return chat_template_from_name(name);
  return detect_chat_template_for_tokenizer(tokenizer).value_or(ChatTemplate::qwen3);
}

void finish_config(SftArgs& a) { a.config.decay = a.decay == "constant" ? rl::LrDecay::Constant : rl::LrDecay::Cosine; }

void log_line(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// --resume DIR: the checkpoint's weights, optimizer and settings; data and tokenizer as the run
// recorded them unless given again (the data's fingerprint must match).
rl::SftCheckpoint prepare_resume(SftArgs& a, QwenModel& model, rl::OptimizerState& opt) {
  for (CLI::Option* o : a.training)
    check(o->count() == 0, "sft --resume: ", o->get_name(), " cannot be given: a resumed run keeps its checkpoint's "
          "training settings");
  check(a.weights.empty(), "sft --resume: --weights cannot be given: the weights are the checkpoint's");
  const std::string ckpt = rl::resolve_checkpoint(a.resume);
  rl::SftCheckpoint ck = rl::read_sft_checkpoint(ckpt);
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
  // The run folder holding checkpoints/step-N.
  if (a.out.empty()) a.out = fs::path(ckpt).parent_path().parent_path().string();
  model = load_model(ckpt);
  opt = rl::load_optimizer((fs::path(ckpt) / "optimizer.safetensors").string(), model.num_params);
  std::printf("resuming %s after update %lld of %lld\n", ckpt.c_str(), static_cast<long long>(ck.cursor.updates),
              static_cast<long long>(ck.cursor.planned));
  return ck;
}

void run_sft_command(SftArgs& a) {
  check(a.device == "cpu" || a.device == "cuda", "sft: --device '", a.device, "': expected cpu or cuda");
  if (a.device == "cuda") check(cuda_device_count() > 0, "sft: --device cuda: ", cuda_unavailable_reason());
  QwenModel model;
  rl::OptimizerState opt;
  std::optional<rl::SftCheckpoint> resume;
  if (!a.resume.empty()) resume = prepare_resume(a, model, opt);
  check(!a.data.empty() && (resume || !a.weights.empty()) && !a.tokenizer.empty() && !a.out.empty(),
        "sft: --data, --weights, --tokenizer and --out are required (or --resume DIR, or a subcommand: synth-demos, "
        "self-taught)");
  finish_config(a);
  if (!resume) {
    model = load_model(a.weights);
    if (a.device == "cpu") opt = rl::make_optimizer_state(model.num_params);  // CUDA: moments on the device
  }
  std::unique_ptr<Tokenizer> tok = load_tokenizer(a.tokenizer);
  ChatOptions chat;
  chat.chat_template = resume ? chat_template_from_name(a.chat_template) : template_for(a.chat_template, a.tokenizer);
  rl::SftLoadStats ls;
  std::vector<rl::SftSequence> data = rl::load_sft_jsonl(a.data, *tok, chat, model.config.vocab_size, &ls);
  std::printf("%s: %lld lines, %lld sequences (%lld without a trained token skipped), %lld tokens, %lld trained\n",
              a.data.c_str(), static_cast<long long>(ls.lines), static_cast<long long>(ls.sequences),
              static_cast<long long>(ls.skipped_no_target), static_cast<long long>(ls.tokens),
              static_cast<long long>(ls.trained_tokens));
  rl::SftRunOptions ro{a.out, a.tokenizer, log_line};
  ro.resume = resume ? &*resume : nullptr;
  ro.device = a.device;
  ro.run_info = {{"data", fs::absolute(a.data).string()},
                 {"tokenizer", fs::absolute(a.tokenizer).string()},
                 {"chat_template", chat_template_name(chat.chat_template)}};
  rl::SftRunStats st = rl::run_sft(model, opt, std::move(data), a.config, ro);
  std::printf("sft: %lld updates over %lld epochs, loss %.4f -> %.4f, %lld trained tokens, %lld sequences cut "
              "(%lld dropped: no target left), %.1f s; weights in %s\n",
              static_cast<long long>(st.updates), static_cast<long long>(st.epochs_done), st.first_loss, st.last_loss,
              static_cast<long long>(st.trained_tokens), static_cast<long long>(st.clipped.cut),
              static_cast<long long>(st.clipped.dropped), st.seconds,
              st.checkpoints.empty() ? "(none)" : st.checkpoints.back().c_str());
}

struct DemoArgs {
  std::string protocol, out, data, split = "train", thinking, format = "spider";
  bool no_naive = false;
  uint64_t synth_seed = 1;
};

void run_synth_demos(const DemoArgs& a) {
  std::unique_ptr<rl::Protocol> protocol = rl::make_protocol(a.protocol);
  std::string dir = a.data;
  if (dir.empty()) {
    dir = (fs::path(a.out).parent_path() / (fs::path(a.out).stem().string() + ".bench")).string();
    sql::SynthOptions so;
    so.seed = a.synth_seed;
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
  o.naive_first = !a.no_naive;
  if (!a.thinking.empty()) o.enable_thinking = a.thinking == "true";
  rl::SynthDemoStats st;
  std::vector<rl::Demo> demos = rl::synth_demos(*protocol, pool, ds, o, &st);
  std::string jsonl;
  for (const rl::Demo& d : demos) jsonl += rl::demo_jsonl(d, ds.examples[d.example], *protocol) + "\n";
  write_text_atomic(a.out, jsonl);
  std::printf("%s: %lld demonstrations of %lld %s questions (%lld with traps; %lld turns, %lld SQL executions); "
              "skipped: %lld over the turn budget, %lld probe could not show the value, %lld not EX-correct\n",
              a.out.c_str(), static_cast<long long>(st.written), static_cast<long long>(st.questions), a.split.c_str(),
              static_cast<long long>(st.trap_demos), static_cast<long long>(st.turns),
              static_cast<long long>(st.exec_turns), static_cast<long long>(st.skipped_budget),
              static_cast<long long>(st.skipped_probe), static_cast<long long>(st.skipped_not_ex));
}

struct SelfTaughtArgs {
  SftArgs sft;
  std::string protocol, split = "train", format = "spider";
  rl::SelfTaughtConfig config;
  float temperature = 0.7f, top_p = 1.0f;
  uint64_t sample_seed = 0;
  int64_t limit = 0;
};

void run_self_taught(SelfTaughtArgs& a) {
  check(!a.sft.data.empty() && !a.sft.weights.empty() && !a.sft.tokenizer.empty() && !a.sft.out.empty(),
        "sft self-taught: --data, --weights, --tokenizer, --out and --protocol are required");
  check(a.sft.device == "cpu" || a.sft.device == "cuda", "sft self-taught: --device '", a.sft.device,
        "': expected cpu or cuda");
  if (a.sft.device == "cuda")
    check(cuda_device_count() > 0, "sft self-taught: --device cuda: ", cuda_unavailable_reason());
  finish_config(a.sft);
  a.config.sft = a.sft.config;
  a.config.rollout.sampling.temperature = a.temperature;
  a.config.rollout.sampling.top_p = a.top_p;
  a.config.rollout.sampling.seed = a.sample_seed;
  a.config.rollout.chat_template = template_for(a.sft.chat_template, a.sft.tokenizer);
  QwenModel model = load_model(a.sft.weights);
  std::unique_ptr<Tokenizer> tok = load_tokenizer(a.sft.tokenizer);
  std::unique_ptr<rl::Protocol> protocol = rl::make_protocol(a.protocol);
  sql::LoadOptions lo;
  lo.format = sql::parse_dataset_format(a.format);
  lo.dir = a.sft.data;
  lo.split = a.split;
  lo.compute_difficulty = true;
  sql::Dataset ds = sql::load_dataset(lo);
  if (a.limit > 0 && static_cast<int64_t>(ds.examples.size()) > a.limit) ds.examples.resize(static_cast<size_t>(a.limit));
  sql::Pool pool;
  rl::SelfTaughtOptions so{a.sft.out, a.sft.tokenizer, log_line};
  so.device = a.sft.device;
  std::vector<rl::SelfTaughtRound> rounds = rl::self_taught(model, *tok, *protocol, pool, ds.examples, a.config, so);
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
  fs::create_directories(a.sft.out);
  std::ofstream out(fs::path(a.sft.out) / "self_taught.json", std::ios::binary | std::ios::trunc);
  out << report.dump(2) << "\n";
  check(out.good(), a.sft.out, "/self_taught.json: write failed");
}

}  // namespace

void add_sft_command(CLI::App& app) {
  auto a = std::make_shared<SftArgs>();
  CLI::App* cmd = app.add_subcommand("sft", "Supervised fine-tuning on masked multi-turn data (JSONL)");
  cmd->require_subcommand(0, 1);
  cmd->add_option("--data", a->data, "JSONL: {messages}, {segments} or {tokens, mask} per line");
  cmd->add_option("--weights", a->weights, "checkpoint file or folder (HF layout)");
  cmd->add_option("--tokenizer", a->tokenizer, "tokenizer.json (or its folder)");
  cmd->add_option("--out", a->out, "run folder: metrics.jsonl, checkpoints/step-N/");
  cmd->add_option("--resume", a->resume,
                  "continue a run: its folder (latest checkpoint) or a checkpoints/step-N folder; the settings, data "
                  "and tokenizer are the run's own");
  cmd->add_option("--device", a->device,
                  "cpu (f32) | cuda (one GPU: bf16 weights, f32 master and moments; head_dim 64 or 128)");
  add_training_options(cmd, *a);

  auto d = std::make_shared<DemoArgs>();
  CLI::App* demos = cmd->add_subcommand("synth-demos", "Gold multi-turn demonstrations for the synthetic benchmark");
  demos->add_option("--protocol", d->protocol, "skyrl | sqltrail | mtir | mtsql")->required();
  demos->add_option("--out", d->out, "output JSONL")->required();
  demos->add_option("--data", d->data, "synthetic benchmark folder (llm_sqlrl data synth); default: write one");
  demos->add_option("--split", d->split, "train | dev")->check(CLI::IsMember({"train", "dev"}));
  demos->add_option("--format", d->format, "spider (questions) | sparc (dialogue turns, <data>/sparc)")
      ->check(CLI::IsMember({"spider", "sparc"}));
  demos->add_option("--synth-seed", d->synth_seed, "seed of the benchmark written when --data is absent");
  demos->add_option("--enable-thinking", d->thinking, "Qwen3 template flag for the prompt: true | false")
      ->check(CLI::IsMember({"true", "false"}));
  demos->add_flag("--no-naive", d->no_naive, "trap demos start with the probe, not with the naive query");
  demos->callback([d] { run_synth_demos(*d); });

  auto s = std::make_shared<SelfTaughtArgs>();
  CLI::App* st = cmd->add_subcommand("self-taught", "MTSQL-R1 self-taught warm start (Algorithm 1)");
  st->add_option("--data", s->sft.data, "benchmark folder (its training split)");
  st->add_option("--format", s->format, "spider | bird | sparc | cosql | synsql");
  st->add_option("--split", s->split, "train | dev");
  st->add_option("--weights", s->sft.weights, "starting checkpoint");
  st->add_option("--tokenizer", s->sft.tokenizer, "tokenizer.json");
  st->add_option("--out", s->sft.out, "run folder: round-<i>/ (metrics, checkpoints), self_taught.json");
  st->add_option("--protocol", s->protocol, "skyrl | sqltrail | mtir | mtsql")->required();
  st->add_option("--rounds", s->config.rounds, "rounds R (paper: 3)")->check(CLI::PositiveNumber);
  st->add_option("--samples", s->config.rollout.group_size, "rollouts N per question (paper: 20)")->check(CLI::PositiveNumber);
  st->add_option("--temperature", s->temperature, "sampling temperature (paper: 0.7)");
  st->add_option("--top-p", s->top_p, "nucleus mass");
  st->add_option("--sample-seed", s->sample_seed, "Philox seed of the rollouts");
  st->add_flag("--require-em", s->config.require_em, "keep only trajectories that are EX and EM correct");
  st->add_option("--easy-keep", s->config.easy_keep, "short trajectories kept per easy/fully-solved question");
  st->add_option("--hard-keep", s->config.hard_keep, "long trajectories kept per hard question");
  st->add_option("--max-turn-tokens", s->config.rollout.max_turn_tokens, "sampled tokens per assistant turn");
  st->add_option("--max-total-tokens", s->config.rollout.max_total_tokens, "tokens per trajectory");
  st->add_option("--limit", s->limit, "first N questions only (0 = all)");
  st->add_option("--device", s->sft.device,
                 "cpu (f32) | cuda (rollouts and SFT on one GPU: bf16 weights, f32 master; head_dim 64 or 128)");
  add_training_options(st, s->sft);
  st->callback([s] { run_self_taught(*s); });

  cmd->callback([a, cmd] {
    if (!cmd->get_subcommands().empty()) return;
    run_sft_command(*a);
  });
}

}  // namespace sqlrl
