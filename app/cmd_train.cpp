// `llm_sqlrl train`: multi-turn GRPO (rl/grpo/train.h). Every TrainConfig key is a flag (--group-size
// 5) and a recipe key (configs/*.toml: `group-size = 5`); flags override the recipe (app/options.h).
// An unknown key in a recipe is an error naming it.
//   llm_sqlrl train [--config configs/skyrl.toml] [--weights DIR] [--out runs/x] [--max-steps N] ...
//   llm_sqlrl train --resume runs/x [--max-steps N]    (the run's config.toml, then the flags given)
//   llm_sqlrl train                                     (no arguments: the embedded demo, app/cmd_demo.cpp)
#include <cstdio>
#include <filesystem>
#include <memory>

#include "app/commands.h"
#include "app/options.h"
#include "rl/grpo/train.h"
#include "runtime/error.h"

namespace sqlrl {
namespace {

using TrainArgs = TableArgs<rl::TrainConfig>;

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
  // Layers, later ones winning: the defaults (or the resumed run's own config.toml), the
  // recipe's keys, then the flags given on the command line.
  rl::TrainConfig base;
  if (!args.settings.resume.empty()) {
    std::string saved = (std::filesystem::path(args.settings.resume) / "config.toml").string();
    check(std::filesystem::exists(saved), "resume: ", args.settings.resume, " is not a run folder (no config.toml in it)");
    base = rl::read_config_toml(saved);
  }
  rl::TrainConfig config = resolve_options(args.flags, args.settings, base, rl::config_fields);
  rl::TrainEnv env = rl::make_train_env(config);
  std::printf("train: %s\n", env.description.c_str());
  std::printf("train: run folder %s, steps %lld\n", env.config.out.c_str(), static_cast<long long>(env.config.max_steps));
  std::fflush(stdout);
  rl::TrainSummary s = rl::run_training(env);
  int64_t steps = s.last_step - s.first_step;
  std::printf("train: %lld steps (%lld -> %lld) in %.1f s (%.3f steps/s); checkpoints in %s/checkpoints\n",
              static_cast<long long>(steps), static_cast<long long>(s.first_step), static_cast<long long>(s.last_step),
              s.seconds, s.seconds > 0 ? static_cast<double>(steps) / s.seconds : 0.0, env.config.out.c_str());
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "Train a text-to-SQL agent with multi-turn GRPO (--device cpu or cuda); with no arguments, the embedded demo");
  add_table_flags(cmd, rl::config_fields(args->settings), args->flags);
  cmd->callback([args] { run_train(*args); });
}

}  // namespace sqlrl
