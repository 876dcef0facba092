// `llm_sqlrl train`: multi-turn GRPO (rl/grpo/train.h). Every TrainConfig key is a flag (--group-size
// 5) and a recipe key (configs/*.toml: `group-size = 5`); flags override the recipe (app/options.h).
// An unknown key in a recipe is an error naming it. With --weights and no --config, a real
// checkpoint trains with the SkyRL-SQL recipe's values (configs/skyrl.toml, compiled in), and
// settings that would harm it are refused (rl/grpo/train_config.h real_model_problems).
//   llm_sqlrl train [--config skyrl|configs/x.toml] [--weights DIR] [--out runs/x] [--max-steps N] ...
//   llm_sqlrl train --resume runs/x [--max-steps N]    (the run's config.toml, then the flags given)
//   llm_sqlrl train                                     (no arguments: the embedded demo, app/cmd_demo.cpp)
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>

#include "app/commands.h"
#include "app/launch.h"
#include "app/options.h"
#include "app/recipes.h"
#include "rl/grpo/rollout_ranks.h"
#include "rl/grpo/train.h"
#include "runtime/error.h"
#include "runtime/interrupt.h"

namespace sqlrl {
namespace {

struct TrainArgs : TableArgs<rl::TrainConfig> {
  CommOptions launch;
};

// The recipe a real checkpoint trains with when no --config is given: SkyRL-SQL's (multi-turn
// GRPO from an instruct model with no SFT, the simplest of the four to start from).
constexpr const char* kDefaultRecipe = "skyrl";

// Every setting that is not the built-in default, with where it came from.
void print_sources(const rl::TrainConfig& config, const OptionSources& sources) {
  rl::TrainConfig copy = config;
  const OptionTable table = rl::config_fields(copy);
  std::string lines;
  for (size_t i = 0; i < table.size(); ++i)
    if (sources[i] != "default")
      lines += str_cat("  ", table[i].key, " = ", option_value_text(table[i]), "  (", sources[i], ")\n");
  std::printf("train: settings other than the built-in defaults (the rest: configs/tiny.toml's values)%s\n%s",
              lines.empty() ? ": none" : ":", lines.c_str());
}

// A resumed run continues the run its folder holds: a setting that changes what is trained
// (protocol, reward, data, lr and schedule, sampling, GRPO, model) must stay as its config.toml
// says, or metrics.jsonl would mix two runs. Only how far it goes, how it logs and where it runs
// may change: the options marked resumable (rl/grpo/train_config.cpp, rl/options.cpp).
void refuse_changed_training(rl::TrainConfig saved, rl::TrainConfig asked, const std::string& folder) {
  const std::vector<std::string> changed = rl::fixed_settings_changed(rl::config_fields(saved), rl::config_fields(asked));
  if (changed.empty()) return;
  std::string list;
  for (const std::string& k : changed) list += (list.empty() ? "" : ", ") + k;
  fail("resume: ", folder, " was trained with other values of ", list, " (its config.toml); a resumed run keeps them. ",
       "Start a new run (--out) to train with new ones");
}

// A resumed run writes into its own folder. --out naming another was printed as the run folder
// and then ignored: refused instead.
void refuse_other_out(rl::TrainConfig config, const OptionSources& sources, const std::string& folder) {
  const OptionTable table = rl::config_fields(config);
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].key != std::string("out") || sources[i] != "flag") continue;
    std::error_code ec;
    if (std::filesystem::equivalent(config.out, folder, ec)) return;
    fail("resume: --out ", config.out, " is not the resumed run's folder ", folder,
         ": a resumed run writes into its own folder (leave --out out, or start a new run without --resume)");
  }
}

void run_train(TrainArgs& args) {
  // No argument at all: the embedded end-to-end run. GRPO straight from a random tiny
  // model never earns a reward; the demo warm-starts it with SFT on gold demonstrations first.
  if (!args.flags.any_given()) {
    std::printf("train: no arguments, so the embedded end-to-end run (= llm_sqlrl demo): synthetic benchmark, tiny "
                "Qwen3, SFT on gold demonstrations, multi-turn GRPO, evaluations. GRPO alone: pass any option, e.g. "
                "--config configs/tiny.toml\n");
    std::fflush(stdout);
    run_default_demo();
    return;
  }
  // Layers, later ones winning: the built-in defaults (the embedded demo's tiny values), or for a
  // real checkpoint (--weights without --config) the SkyRL-SQL recipe's, or a resumed run's own
  // config.toml; then the --config file's or recipe's keys; then the flags given.
  rl::TrainConfig base;
  OptionSources sources(rl::config_fields(base).size(), "default");
  if (!args.settings.resume.empty()) {
    std::string saved = (std::filesystem::path(args.settings.resume) / "config.toml").string();
    check(std::filesystem::exists(saved), "resume: ", args.settings.resume, " is not a run folder (no config.toml in it)");
    base = rl::read_config_toml(saved);
    sources.assign(sources.size(), "the resumed run's config.toml");
  } else if (!args.settings.weights.empty() && args.flags.config.empty()) {
    // The recipe's chat-template is its paper's model's; a checkpoint's own comes from its tokenizer.
    const Recipe* recipe = find_recipe(kDefaultRecipe);
    apply_config_text(base, {recipe->text, str_cat("recipe ", kDefaultRecipe, " (the default with --weights)")},
                      rl::config_fields, &sources, {"chat-template"});
  }
  rl::TrainConfig config = resolve_options(args.flags, args.settings, base, rl::config_fields, &sources);
  if (!args.settings.resume.empty()) {
    refuse_changed_training(base, config, args.settings.resume);
    refuse_other_out(config, sources, args.settings.resume);
    config.out = args.settings.resume;  // what the run writes into, so the printed settings say so
  }
  rl::validate_config(config);  // a bad setting is named before a device or a job is looked for
  // Several processes (mpirun, srun, RANK/WORLD_SIZE): rank 0 prints, writes the run folder
  // and its cache first; the others then read that cache (rl/grpo/train.h TrainEnv::comm).
  const Comm& job = join_job(args.launch);
  join_job_device(rl::parse_device_type(config.device));  // each rank on GPU local_rank, NCCL between them
  const bool root = job.is_root();
  if (root) print_sources(config, sources);
  // --rollout-ranks: the last R ranks only roll out, the others only train (rl/grpo/rollout_ranks.h).
  std::optional<rl::RankLayout> layout;
  if (config.rollout_ranks > 0) layout = rl::split_rollout_ranks(job, config.rollout_ranks);
  auto ranks = [](int lo, int hi, const char* one, const char* many) {
    return lo == hi ? str_cat("rank ", lo, " ", one) : str_cat("ranks ", lo, "-", hi, " ", many);
  };
  if (layout && root)
    std::printf("train: rank 0 of %d (%s); %s %lld/%d of every step's prompts each, %s them out\n", job.world_size,
                job.source.c_str(), ranks(0, layout->trainers - 1, "trains", "train").c_str(),
                static_cast<long long>(config.batch_size), layout->trainers,
                ranks(layout->trainers, job.world_size - 1, "rolls", "roll").c_str());
  else if (job.world_size > 1 && root)
    std::printf("train: rank 0 of %d (%s); each rank rolls out and trains %lld/%d of every step's prompts\n",
                job.world_size, job.source.c_str(), static_cast<long long>(config.batch_size), job.world_size);
  rl::TrainEnv env = [&] {
    if (root) {
      rl::TrainEnv e = rl::make_train_env(config);
      comm_barrier(job);
      return e;
    }
    comm_barrier(job);
    return rl::make_train_env(config, /*owner=*/false);
  }();
  env.config_sources = sources;
  env.comm = layout ? &layout->group : &job;
  env.layout = layout ? &*layout : nullptr;
  // Every rank past make_train_env's checks (an existing run in the folder, ...) before the
  // trainers write the run folder: run_training's own barrier spans the trainers only.
  if (layout) comm_barrier(job);
  // A first SIGINT/SIGTERM on a rollout rank is noted and left to the trainers, who stop the job
  // at a step's end (a scheduler's SIGTERM reaches every rank; a second signal ends this one).
  install_interrupt_handlers();
  if (layout && layout->rolls_out()) return rl::run_rollout_rank(env, *layout);
  if (root) {
    std::printf("train: %s\n", env.description.c_str());
    if (env.config.epochs > 0)
      std::printf("train: run folder %s, %lld epochs (max-steps %lld, 0 = no cap)\n", env.config.out.c_str(),
                  static_cast<long long>(env.config.epochs), static_cast<long long>(env.config.max_steps));
    else
      std::printf("train: run folder %s, steps %lld\n", env.config.out.c_str(), static_cast<long long>(env.config.max_steps));
    std::fflush(stdout);
  }
  rl::TrainSummary s = rl::run_training(env);
  if (!root) return;
  int64_t steps = s.last_step - s.first_step;
  if (s.interrupted) {
    std::printf("train: interrupted after step %lld; its checkpoint is %s; continue with --resume %s\n",
                static_cast<long long>(s.last_step), rl::checkpoint_dir(env.config.out, s.last_step).c_str(),
                env.config.out.c_str());
    std::fflush(stdout);
    leave_job();  // MPI_Finalize: std::exit skips main's
    std::exit(128 + interrupt_signal());
  }
  std::printf("train: %lld steps (%lld -> %lld) in %.1f s (%.3f steps/s); checkpoints in %s/checkpoints\n",
              static_cast<long long>(steps), static_cast<long long>(s.first_step), static_cast<long long>(s.last_step),
              s.seconds, s.seconds > 0 ? static_cast<double>(steps) / s.seconds : 0.0, env.config.out.c_str());
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "Train a text-to-SQL agent with multi-turn GRPO (--device cpu or cuda); with no arguments, the embedded demo");
  add_table_flags(cmd, rl::config_fields(args->settings), args->flags);
  add_launch_flags(cmd, args->launch);
  cmd->callback([args] { run_train(*args); });
}

}  // namespace sqlrl
