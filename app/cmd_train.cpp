// `llm_sqlrl train`: multi-turn GRPO (rl/grpo/train.h). Every TrainConfig key is a flag (--group-size
// 5) and a recipe key (configs/*.toml: `group-size = 5`); flags override the recipe. An unknown
// key in a recipe is an error naming it.
//   llm_sqlrl train [--config configs/skyrl.toml] [--weights DIR] [--out runs/x] [--max-steps N] ...
//   llm_sqlrl train --resume runs/x [--max-steps N]    (the run's config.toml, then the flags given)
//   llm_sqlrl train                                     (no arguments: the embedded demo, app/cmd_demo.cpp)
#include <cstdio>
#include <filesystem>
#include <memory>

#include "app/commands.h"
#include "rl/grpo/train.h"
#include "runtime/error.h"

namespace sqlrl {
namespace {

struct TrainArgs {
  rl::TrainConfig config;
  std::string recipe;                 // --config FILE
  std::vector<CLI::Option*> options;  // one per config field, in table order
};

void run_train(TrainArgs& args) {
  // No argument at all: the embedded end-to-end run (issue 11). GRPO straight from a random tiny
  // model never earns a reward; the demo warm-starts it with SFT on gold demonstrations first.
  bool any = !args.recipe.empty();
  for (const CLI::Option* o : args.options) any = any || o->count() > 0;
  if (!any) {
    std::printf("train: no arguments, so the embedded end-to-end run (= llm_sqlrl demo): synthetic benchmark, tiny "
                "Qwen3, SFT on gold demonstrations, multi-turn GRPO, evaluations. GRPO alone: pass any option, e.g. "
                "--config configs/tiny.toml\n");
    std::fflush(stdout);
    run_default_demo();
    return;
  }
  // Layers, later ones winning: the defaults (or the resumed run's own config.toml), the
  // recipe's keys, then the flags given on the command line.
  rl::TrainConfig config;
  const rl::TrainConfig& cli = args.config;
  if (!cli.resume.empty()) {
    std::string saved = (std::filesystem::path(cli.resume) / "config.toml").string();
    check(std::filesystem::exists(saved), "resume: ", cli.resume, " is not a run folder (no config.toml in it)");
    config = rl::read_config_toml(saved);
  }
  if (!args.recipe.empty()) {
    check(std::filesystem::is_regular_file(args.recipe), "config: no such file: ", args.recipe);
    std::vector<size_t> present;
    rl::TrainConfig file = rl::read_config_toml(args.recipe, &present);
    for (size_t i : present) rl::copy_config_field(file, config, i);
  }
  for (size_t i = 0; i < args.options.size(); ++i)
    if (args.options[i]->count() > 0) rl::copy_config_field(cli, config, i);
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
  cmd->add_option("--config", args->recipe, "recipe file (TOML, e.g. configs/skyrl.toml); flags override its keys");
  for (rl::ConfigField& f : rl::config_fields(args->config)) {
    std::string flag = std::string("--") + f.key;
    CLI::Option* opt = std::visit(
        [&](auto* p) -> CLI::Option* {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>)
            return cmd->add_flag(flag, *p, std::string(f.help) + (*p ? " (on by default; " + flag + "=false turns it off)" : ""));
          else return cmd->add_option(flag, *p, f.help);
        },
        f.value);
    args->options.push_back(opt);
  }
  cmd->callback([args] { run_train(*args); });
}

}  // namespace sqlrl
