// `llm_sqlrl eval`: evaluate a checkpoint as a multi-turn (or single-turn) SQL agent.
//   llm_sqlrl eval --weights DIR [--tokenizer FILE] --dataset FORMAT:PATH[,db=DBDIR] [--split dev|test]
//       [--protocol skyrl] [--mode greedy|vote|passk] [--samples k] [--temperature T] [--top-p P]
//       [--single-turn] [--limit N] [--seed S] [--out DIR] [--adapter DIR] [--device cpu|cuda] [--config FILE]
// Writes DIR/summary.json, DIR/summary.md, DIR/examples.jsonl (rl/eval/eval.h) and the resolved
// DIR/config.toml (app/options.h: it reads back with --config), and prints the
// tables. Same seed and build -> the same bytes, except the wall-clock fields ("seconds" in each
// line, "time" in the summary). Defaults: vote/passk 8 samples at T=1; EX semantics bird for
// BIRD data, else spider; --limit takes the first N questions (dialogue turns, for SParC/CoSQL).
#include <cstdio>
#include <filesystem>
#include <memory>

#include "app/commands.h"
#include "app/launch.h"
#include "app/options.h"
#include "rl/eval/eval.h"
#include "rl/options.h"
#include "rl/policy.h"
#include "rl/policy_backend.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/gemm.h"
#include "runtime/file_io.h"
#include "tokenizer/chat_template.h"

namespace fs = std::filesystem;

namespace sqlrl {
namespace {

// Every setting of an evaluation; the shared groups are rl/options.h's.
struct EvalConfig : rl::OutputOptions, rl::DeviceOptions, rl::ModelOptions, rl::AdapterOptions, rl::TemplateOptions,
                    rl::ProtocolOptions, rl::SamplingOptions, rl::TurnOptions, rl::SqlOptions {
  EvalConfig() {
    out = "runs/eval";
    temperature = -1;  // < 0 = the mode's default (greedy 0, else 1)
  }
  std::string dataset, split = "dev", mode = "greedy", compare;
  int64_t samples = 0;  // 0 = the mode's default
  int64_t limit = 0, batch = 32;
  uint64_t seed = 0;
  bool single_turn = false;
};

OptionTable eval_options(EvalConfig& c) {
  OptionTable t;
  rl::add_model_options(t, c);
  rl::add_adapter_options(t, c);
  rl::add_template_options(t, c);
  t.push_back({"dataset",
                "FORMAT:PATH[,db=DBDIR] (required); FORMAT spider, spider-dk, spider-syn, spider-realistic, bird, "
                "sparc, cosql, synsql; db= a folder of <db>/<db>.sqlite searched after the set's own (the Spider "
                "variants use Spider's database/); layouts in sql/data/datasets.h",
                &c.dataset});
  t.push_back({"split", "dataset split: train | dev | test (Spider's test release; BIRD, SParC and CoSQL publish none); "
                        "spider-dk and spider-realistic: dev", &c.split});
  rl::add_protocol_options(t, c);
  t.push_back({"mode", "greedy (T=0, pass@1) | vote (majority by execution result) | passk", &c.mode});
  t.push_back({"samples", "k samples per question (greedy 1, else default 8)", &c.samples});
  rl::add_sampling_options(t, c);
  set_option_help(t, "temperature", "sampling temperature (default: greedy 0, else 1)");
  t.push_back({"single-turn", "no execution: the first SQL written is the answer (one turn)", &c.single_turn});
  t.push_back({"limit", "first N questions only (0 = all)", &c.limit});
  t.push_back({"seed", "Philox seed of the samples", &c.seed});
  rl::add_output_options(t, c, "output folder: summary.json, summary.md, examples.jsonl, config.toml");
  rl::add_device_options(t, c);
  t.push_back({"compare", "EX semantics: spider (test-suite) | bird (set); default by dataset", &c.compare});
  rl::add_turn_options(t, c);
  t.push_back({"batch", "questions rolled out together", &c.batch});
  rl::add_sql_options(t, c);
  return t;
}

struct EvalArgs {
  EvalConfig config;  // the flags' values
  TableFlags flags;
  bool quiet = false;
  CommOptions launch;  // mpirun / srun / RANK: the questions shared among the ranks
};

void run_eval_command(EvalArgs& args) {
  EvalConfig a = resolve_options(args.flags, args.config, EvalConfig{}, eval_options);
  // ---- every setting checked before the model is read
  check(!a.weights.empty(), "eval: --weights is required (a checkpoint file or folder)");
  check(!a.dataset.empty(), "eval: --dataset is required (FORMAT:PATH[,db=DBDIR])");
  rl::EvalOptions options;
  options.mode = rl::parse_eval_mode(a.mode);
  const bool greedy = options.mode == rl::EvalMode::Greedy;
  options.samples = a.samples > 0 ? a.samples : (greedy ? 1 : 8);
  check(!greedy || options.samples == 1, "eval: --mode greedy takes one sample; --samples ", a.samples,
        " needs --mode vote or passk");
  check(a.samples >= 0 && a.limit >= 0 && a.batch > 0, "eval: samples and limit must be >= 0, batch positive");
  // Every question's samples are held at once (vote, pass@k): 10^9 of them was a bare bad_alloc.
  constexpr int64_t kMaxSamples = 4096;
  check(a.samples <= kMaxSamples, "eval: --samples ", a.samples, " is above ", kMaxSamples, " per question");
  const double given_temperature = a.temperature;
  if (a.temperature < 0) a.temperature = greedy ? 0.0 : 1.0;
  check(!greedy || a.temperature == 0, "eval: --mode greedy decodes at temperature 0; --temperature ", given_temperature,
        " needs --mode vote or passk");
  check(greedy || a.temperature > 0, "eval: --mode ", a.mode, " at --temperature 0 draws ", options.samples,
        " identical samples; give a temperature > 0");
  rl::validate_groups(a, "eval");
  // Several processes: each takes its share of the questions; rank 0 gathers, prints and writes.
  const Comm& job = join_job(args.launch);
  if (!job.is_root()) args.quiet = true;
  // The answers must not depend on the core count or the number of ranks (runtime/gemm.h).
  set_gemm_thread_independent(true);
  const rl::PolicyBackend& backend = rl::find_backend(a.device);
  rl::check_backend_usable(backend, "eval");
  const int gpu = join_job_device(backend.device);  // each rank on GPU local_rank
  std::unique_ptr<rl::Protocol> protocol = rl::make_protocol(a.protocol, a);
  const sql::LoadOptions load = rl::eval_load_options(a.dataset, a.split, "eval: --dataset");
  const sql::CompareMode compare = rl::eval_compare_mode(a.compare, load.format, "eval: --compare");
  check(fs::exists(a.weights), "eval: weights: no such file or folder: ", a.weights);
  const fs::path tok_path = rl::model_tokenizer_path(a);
  check(!tok_path.empty(), "eval: no tokenizer.json beside the weights ", a.weights, " (give --tokenizer FILE)");

  std::vector<sql::Example> examples = rl::load_eval_examples(load, a.limit, str_cat("eval: dataset ", a.dataset));
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(tok_path.string());
  QwenModel model = load_model(a.weights);
  const std::unique_ptr<LoraAdapter> adapter = rl::load_adapter_option(a.adapter, model, "eval");
  check(static_cast<int64_t>(tokenizer->size()) <= model.config.vocab_size, "eval: tokenizer ", tok_path.string(),
        " has ", tokenizer->size(), " ids but the model ", a.weights, " has vocab_size ", model.config.vocab_size);

  options.single_turn = a.single_turn;
  options.dialogue = rl::dialogue_format(load.format);
  options.batch_questions = a.batch;
  options.progress = !args.quiet;
  rl::RolloutOptions& ro = options.rollout;
  rl::apply_to_rollout(ro, a, a.seed, a, a);
  ro.enable_thinking = a.enable_thinking;
  if (!a.chat_template.empty())
    ro.chat_template = chat_template_from_name(a.chat_template);
  else
    ro.chat_template = detect_chat_template_for_tokenizer(tok_path.string()).value_or(ChatTemplate::qwen3);
  a.chat_template = chat_template_name(ro.chat_template);  // config.toml records the one used

  const bool bird = compare == sql::CompareMode::BirdSet;
  sql::Pool pool(sql::model_sql_pool_options());
  rl::RewardContext ctx(pool, ro.sql_limits, compare);
  rl::EvalInfo info{a.dataset, a.split, a.protocol, a.weights, bird ? "bird" : "spider", a.seed, a.device, a.adapter};
  // CUDA: bf16 weights on the device (rl/policy.h); it fails naming the model's head_dim when the
  // CUDA attention does not take it.
  rl::Policy policy = rl::frozen_policy(backend, model, gpu);
  // The adapter runs unmerged on either device (CUDA: uploaded beside the frozen base, no
  // gradients: eval never trains).
  rl::policy_attach_lora(policy, adapter.get(), /*grads=*/false);
  if (!args.quiet)
    std::fprintf(stderr, "eval: %zu questions, %s x %lld samples, protocol %s, %s, on %s\n", examples.size(),
                 a.mode.c_str(), static_cast<long long>(options.samples), a.protocol.c_str(),
                 a.single_turn ? "single-turn" : "multi-turn", a.device.c_str());
  rl::EvalRun run = rl::run_eval(policy, *tokenizer, *protocol, pool, examples, options, ctx, job);
  if (!job.is_root()) return;
  rl::write_eval_outputs(a.out, examples, run, options, info);
  write_text_atomic((fs::path(a.out) / "config.toml").string(),
                    options_to_toml(eval_options(a), "llm_sqlrl eval: the resolved configuration (llm_sqlrl eval --config FILE)"));
  std::fputs(rl::summary_markdown(run, options, info).c_str(), stdout);
  std::printf("\neval: %.1f s; wrote %s/{summary.json,summary.md,examples.jsonl}\n", run.seconds, a.out.c_str());
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate a checkpoint as a text-to-SQL agent (EX, EM, vote, pass@k)");
  add_table_flags(cmd, eval_options(a->config), a->flags, "eval");
  cmd->add_flag("--quiet", a->quiet, "no progress lines");
  add_launch_flags(cmd, a->launch);
  cmd->callback([a] { run_eval_command(*a); });
}

}  // namespace sqlrl
