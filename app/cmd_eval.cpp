// `llm_sqlrl eval`: evaluate a checkpoint as a multi-turn (or single-turn) SQL agent.
//   llm_sqlrl eval --weights DIR [--tokenizer FILE] --dataset FORMAT:PATH [--split dev]
//       [--protocol skyrl] [--mode greedy|vote|passk] [--samples k] [--temperature T] [--top-p P]
//       [--single-turn] [--limit N] [--seed S] [--out DIR] [--device cpu|cuda]
// Writes DIR/summary.json, DIR/summary.md and DIR/examples.jsonl (rl/eval/eval.h) and prints the
// tables. Same seed and build -> the same bytes, except the wall-clock fields ("seconds" in each
// line, "time" in the summary). Defaults: vote/passk 8 samples at T=1; EX semantics bird for
// BIRD data, else spider; --limit takes the first N questions (dialogue turns, for SParC/CoSQL).
#include <cstdio>
#include <filesystem>
#include <memory>

#include "app/commands.h"
#include "rl/eval/eval.h"
#include "rl/policy.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "tokenizer/chat_template.h"

namespace fs = std::filesystem;

namespace sqlrl {
namespace {

struct EvalArgs {
  std::string weights, tokenizer, dataset, split = "dev", protocol = "skyrl", mode = "greedy", compare,
                                           out = "runs/eval", device = "cpu";
  std::string chat_template;
  int64_t samples = 0;      // 0 = the mode's default
  double temperature = -1;  // < 0 = the mode's default
  double top_p = 1.0;
  int64_t top_k = 0;
  bool single_turn = false, no_thinking = false, quiet = false;
  int64_t limit = 0;
  uint64_t seed = 0;
  int64_t max_turns = 0, max_turn_tokens = 1024, max_total_tokens = 4096, batch = 32, sql_timeout_ms = 5000;
};

void run_eval_command(const EvalArgs& a) {
  // ---- every flag checked before the model is read
  rl::EvalOptions options;
  options.mode = rl::parse_eval_mode(a.mode);
  const bool greedy = options.mode == rl::EvalMode::Greedy;
  options.samples = a.samples > 0 ? a.samples : (greedy ? 1 : 8);
  check(!greedy || options.samples == 1, "eval: --mode greedy takes one sample; --samples ", a.samples,
        " needs --mode vote or passk");
  const double temperature = a.temperature >= 0 ? a.temperature : (greedy ? 0.0 : 1.0);
  check(!greedy || temperature == 0, "eval: --mode greedy decodes at temperature 0; --temperature ", a.temperature,
        " needs --mode vote or passk");
  check(greedy || temperature > 0, "eval: --mode ", a.mode, " at --temperature 0 draws ", options.samples,
        " identical samples; give a temperature > 0");
  check(a.device == "cpu" || a.device == "cuda", "eval: --device '", a.device, "': expected cpu or cuda");
  const bool cuda = a.device == "cuda";
  if (cuda) check(cuda_device_count() > 0, "eval: --device cuda: ", cuda_unavailable_reason());
  std::unique_ptr<rl::Protocol> protocol = rl::make_protocol(a.protocol);
  size_t colon = a.dataset.find(':');
  check(colon != std::string::npos && colon > 0, "eval: --dataset '", a.dataset,
        "': expected FORMAT:PATH, e.g. spider:data/spider");
  sql::LoadOptions load;
  load.format = sql::parse_dataset_format(a.dataset.substr(0, colon));
  load.dir = a.dataset.substr(colon + 1);
  load.split = a.split;
  load.compute_difficulty = true;  // Spider hardness where the dataset has no label
  check(fs::is_directory(load.dir), "eval: dataset folder does not exist: ", load.dir);
  check(a.compare.empty() || a.compare == "spider" || a.compare == "bird", "eval: --compare '", a.compare,
        "': expected spider or bird");
  check(fs::exists(a.weights), "eval: weights: no such file or folder: ", a.weights);
  fs::path tok_path = a.tokenizer;
  if (tok_path.empty())
    tok_path =
        (fs::is_directory(a.weights) ? fs::path(a.weights) : fs::path(a.weights).parent_path()) / "tokenizer.json";
  else if (fs::is_directory(tok_path))
    tok_path /= "tokenizer.json";
  check(fs::is_regular_file(tok_path), "eval: tokenizer: no such file: ", tok_path.string(),
        a.tokenizer.empty() ? " (give --tokenizer FILE)" : "");

  sql::Dataset dataset = sql::load_dataset(load);
  std::vector<sql::Example>& examples = dataset.examples;
  if (a.limit > 0 && static_cast<size_t>(a.limit) < examples.size()) examples.resize(static_cast<size_t>(a.limit));
  check(!examples.empty(), "eval: dataset ", a.dataset, " (", a.split, ") has no examples");
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(tok_path.string());
  QwenModel model = load_model(a.weights);
  check(static_cast<int64_t>(tokenizer->size()) <= model.config.vocab_size, "eval: tokenizer ", tok_path.string(),
        " has ", tokenizer->size(), " ids but the model ", a.weights, " has vocab_size ", model.config.vocab_size);

  options.single_turn = a.single_turn;
  options.dialogue = load.format == sql::DatasetFormat::Sparc || load.format == sql::DatasetFormat::Cosql;
  options.batch_questions = a.batch;
  options.progress = !a.quiet;
  rl::RolloutOptions& ro = options.rollout;
  ro.sampling = {static_cast<float>(temperature), a.top_k, static_cast<float>(a.top_p), a.seed};
  ro.max_turns = static_cast<int>(a.max_turns);
  ro.max_turn_tokens = a.max_turn_tokens;
  ro.max_total_tokens = a.max_total_tokens;
  ro.sql_limits.timeout_ms = a.sql_timeout_ms;
  ro.enable_thinking = !a.no_thinking;
  if (!a.chat_template.empty())
    ro.chat_template = chat_template_from_name(a.chat_template);
  else
    ro.chat_template = detect_chat_template_for_tokenizer(tok_path.string()).value_or(ChatTemplate::qwen3);

  const bool bird = a.compare.empty() ? load.format == sql::DatasetFormat::Bird : a.compare == "bird";
  sql::Pool pool;
  rl::RewardContext ctx(pool, ro.sql_limits, bird ? sql::CompareMode::BirdSet : sql::CompareMode::Spider);
  rl::EvalInfo info{a.dataset, a.split, a.protocol, a.weights, bird ? "bird" : "spider", a.seed, a.device};
  // CUDA: bf16 weights on the device (rl/policy.h); it fails naming the model's head_dim when the
  // CUDA attention does not take it.
  rl::Policy policy = cuda ? rl::cuda_policy(model) : rl::cpu_policy(model);
  if (!a.quiet)
    std::fprintf(stderr, "eval: %zu questions, %s x %lld samples, protocol %s, %s, on %s\n", examples.size(),
                 a.mode.c_str(), static_cast<long long>(options.samples), a.protocol.c_str(),
                 a.single_turn ? "single-turn" : "multi-turn", a.device.c_str());
  rl::EvalRun run = rl::run_eval(policy, *tokenizer, *protocol, pool, examples, options, ctx);
  rl::write_eval_outputs(a.out, examples, run, options, info);
  std::fputs(rl::summary_markdown(run, options, info).c_str(), stdout);
  std::printf("\neval: %.1f s; wrote %s/{summary.json,summary.md,examples.jsonl}\n", run.seconds, a.out.c_str());
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate a checkpoint as a text-to-SQL agent (EX, EM, vote, pass@k)");
  cmd->add_option("--weights", a->weights, "checkpoint file or folder (HF layout)")->required();
  cmd->add_option("--tokenizer", a->tokenizer, "tokenizer.json or its folder (default: the weights folder's)");
  cmd->add_option("--dataset", a->dataset, "FORMAT:PATH, FORMAT one of spider, bird, sparc, cosql, synsql")->required();
  cmd->add_option("--split", a->split, "dataset split (train | dev)");
  cmd->add_option("--protocol", a->protocol, "agent protocol: skyrl | sqltrail | mtir | mtsql");
  cmd->add_option("--mode", a->mode, "greedy (T=0, pass@1) | vote (majority by execution result) | passk");
  cmd->add_option("--samples", a->samples, "k samples per question (greedy 1, else default 8)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", a->temperature, "sampling temperature (greedy 0, else default 1)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", a->top_p, "nucleus mass, 1 = off")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", a->top_k, "0 = off")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--single-turn", a->single_turn, "no execution: the first SQL written is the answer (one turn)");
  cmd->add_option("--limit", a->limit, "first N questions only")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", a->seed, "Philox seed of the samples");
  cmd->add_option("--out", a->out, "output folder");
  cmd->add_option("--device", a->device, "cpu (f32) | cuda (one GPU, bf16 weights; head_dim 64 or 128)");
  cmd->add_option("--compare", a->compare, "EX semantics: spider (test-suite) | bird (set); default by dataset");
  cmd->add_option("--max-turns", a->max_turns, "assistant turns (0 = the protocol's budget)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-turn-tokens", a->max_turn_tokens, "sampled tokens per turn")->check(CLI::PositiveNumber);
  cmd->add_option("--max-total-tokens", a->max_total_tokens, "tokens per trajectory")->check(CLI::PositiveNumber);
  cmd->add_option("--batch", a->batch, "questions rolled out together")->check(CLI::PositiveNumber);
  cmd->add_option("--sql-timeout-ms", a->sql_timeout_ms, "per-query wall-clock limit")->check(CLI::PositiveNumber);
  cmd->add_option("--chat-template", a->chat_template, "qwen3 | qwen2.5 (default: detected from the tokenizer)");
  cmd->add_flag("--no-thinking", a->no_thinking, "Qwen3 template with enable_thinking=false");
  cmd->add_flag("--quiet", a->quiet, "no progress lines on stderr");
  cmd->callback([a] { run_eval_command(*a); });
}

}  // namespace sqlrl
