// `llm_sqlrl demo`: the embedded end-to-end run (rl/demo/demo.h) — synthetic benchmark, BPE
// tokenizer, tiny Qwen3, SFT on gold demos, multi-turn GRPO, evaluations — and its table.
//   llm_sqlrl demo [--full] [--seed S] [--out DIR] [--protocol NAME] [--device cpu|cuda]
#include <cstdio>

#include "app/commands.h"
#include "rl/demo/demo.h"

namespace sqlrl {
namespace {

struct DemoArgs {
  rl::DemoConfig config;
  bool full = false, quiet = false;
  std::string size;
  int64_t dev_limit = -1, train_limit = -1, sft_epochs = -1, rl_steps = -1;  // < 0: the size's value
  double rl_lr = -1, sft_lr = -1;
  std::vector<std::string> sets;  // KEY=VALUE, applied last
};

void run_demo_command(DemoArgs& a) {
  rl::DemoConfig c = a.config;
  c.sizes = rl::demo_sizes(!a.size.empty() ? a.size : a.full ? "full" : "default");
  if (a.dev_limit >= 0) c.sizes.dev_limit = a.dev_limit;
  if (a.train_limit >= 0) c.sizes.train_limit = a.train_limit;
  if (a.sft_epochs >= 0) c.sizes.sft_epochs = a.sft_epochs;
  if (a.rl_steps >= 0) c.sizes.rl_steps = a.rl_steps;
  if (a.rl_lr > 0) c.sizes.rl_lr = a.rl_lr;
  if (a.sft_lr > 0) c.sizes.sft_lr = a.sft_lr;
  for (const std::string& kv : a.sets) rl::set_demo_size(c.sizes, kv);
  if (!a.quiet)
    c.log = [](const std::string& line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    };
  rl::DemoReport r = rl::run_demo(c);
  std::printf("\n%s\nwrote %s/report.json and report.md\n", rl::demo_table(r).c_str(), c.out.c_str());
}

}  // namespace

void run_default_demo() {
  DemoArgs a;
  run_demo_command(a);
}

void add_demo_command(CLI::App& app) {
  auto a = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand("demo", "The embedded end-to-end run: synth data, SFT, multi-turn GRPO, eval (CPU, or --device cuda)");
  cmd->add_flag("--full", a->full, "the larger run (about 20 minutes on 2 cores: 2,160 demonstrations, 150 GRPO steps, 360 dev questions) instead of the default (8 minutes)");
  cmd->add_option("--size", a->size, "default | full | mini (mini: seconds, for tests)")
      ->check(CLI::IsMember({"default", "full", "mini"}));
  cmd->add_option("--seed", a->config.seed, "model init, SFT order and GRPO sampling");
  cmd->add_option("--synth-seed", a->config.synth_seed, "the benchmark's generator seed");
  cmd->add_option("--out", a->config.out, "run folder (default runs/demo)");
  cmd->add_option("--protocol", a->config.protocol, "skyrl | sqltrail | mtir | mtsql")
      ->check(CLI::IsMember({"skyrl", "sqltrail", "mtir", "mtsql"}));
  cmd->add_option("--dev-limit", a->dev_limit, "first N dev questions (0 = all; default: the size's)");
  cmd->add_option("--train-limit", a->train_limit, "first N train questions (0 = all; default: the size's)");
  cmd->add_option("--sft-epochs", a->sft_epochs, "SFT epochs (default: the size's)");
  cmd->add_option("--sft-lr", a->sft_lr, "SFT peak learning rate (default: the size's)");
  cmd->add_option("--rl-steps", a->rl_steps, "GRPO steps (default: the size's)");
  cmd->add_option("--rl-lr", a->rl_lr, "GRPO learning rate (default: the size's)");
  {
    rl::DemoSizes probe;
    std::string keys;
    for (const rl::DemoSizeField& f : rl::demo_size_fields(probe)) keys += std::string(keys.empty() ? "" : ", ") + f.name;
    cmd->add_option("--set", a->sets, "KEY=VALUE over the size's knobs (repeatable): " + keys);
  }
  cmd->add_option("--device", a->config.device,
                  "cpu (f32) | cuda (one GPU: SFT, evaluations and GRPO; bf16 weights; needs --set head_dim=64)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--quiet", a->quiet, "only the final table");
  cmd->callback([a] { run_demo_command(*a); });
}

}  // namespace sqlrl
