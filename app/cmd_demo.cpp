// `llm_sqlrl demo`: the embedded end-to-end run (rl/demo/demo.h) — synthetic benchmark, BPE
// tokenizer, tiny Qwen3, SFT on gold demos, multi-turn GRPO, evaluations — and its table.
//   llm_sqlrl demo [--full] [--seed S] [--out DIR] [--protocol NAME] [--device cpu|cuda] [--eval-every N]
//       [--config FILE]
// The resolved settings are written to DIR/config.toml (app/options.h).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "app/commands.h"
#include "app/options.h"
#include "rl/demo/demo.h"
#include "rl/options.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace sqlrl {
namespace {

struct DemoSettings : rl::OutputOptions, rl::DeviceOptions, rl::ProtocolOptions {
  DemoSettings() {
    const rl::DemoConfig d;
    out = d.out, device = d.device, protocol = d.protocol;
    seed = d.seed, synth_seed = d.synth_seed;
  }
  uint64_t seed = 0, synth_seed = 0;
  bool full = false;
  std::string size;
  int64_t dev_limit = -1, train_limit = -1, sft_epochs = -1, rl_steps = -1, eval_every = -1;  // < 0: the size's value
  double rl_lr = -1, sft_lr = -1;
  std::vector<std::string> sets;  // KEY=VALUE, applied last
  std::vector<std::string> train_sets;  // KEY=VALUE of `llm_sqlrl train`, for the GRPO phase
  std::string sft_from;
  std::string seeds;  // "1,2,3": one run per seed in OUT/seed-N and the claims over them
};

const std::string& set_help() {
  static const std::string help = [] {
    rl::DemoSizes probe;
    std::string keys;
    for (const Option& o : rl::demo_size_options(probe)) keys += std::string(keys.empty() ? "" : ", ") + o.key;
    return "KEY=VALUE over the size's knobs (repeatable): " + keys;
  }();
  return help;
}

OptionTable demo_options(DemoSettings& s) {
  OptionTable t;
  t.push_back({"full", "the larger run (more than 20 minutes on 2 cores: 2,160 demonstrations, 150 GRPO steps) "
               "instead of the default (about 11 minutes on 2 AVX-512 cores, 17 on 2 AVX2 ones: 1,069 demonstrations x 10 SFT epochs, 60 GRPO steps; both 360 dev questions)", &s.full});
  t.push_back({"size", "default | full | mini (mini: seconds, for tests)", &s.size});
  t.push_back({"seed", "model init, SFT order and GRPO sampling", &s.seed});
  t.push_back({"synth-seed", "the benchmark's generator seed", &s.synth_seed});
  rl::add_output_options(t, s, "run folder (default runs/demo)");
  rl::add_protocol_options(t, s);
  t.insert(t.end(), {
      {"dev-limit", "first N dev questions (0 = all; default: the size's)", &s.dev_limit},
      {"train-limit", "first N train questions (0 = all; default: the size's)", &s.train_limit},
      {"sft-epochs", "SFT epochs (default: the size's)", &s.sft_epochs},
      {"sft-lr", "SFT peak learning rate (default: the size's)", &s.sft_lr},
      {"rl-steps", "GRPO steps (default: the size's)", &s.rl_steps},
      {"rl-lr", "GRPO learning rate (default: the size's)", &s.rl_lr},
      {"eval-every", "GRPO evaluates the dev split every N steps and after its last (train's eval-every: "
                     "rl/eval/step-N, report.json rl_eval; 0 = off; default: the size's, off)", &s.eval_every},
      {"set", set_help().c_str(), &s.sets},
      {"train-set", "KEY=VALUE: a `llm_sqlrl train` key for the GRPO phase (repeatable; e.g. dynamic-sampling=true, "
                    "rollout-is=truncate), over the size's values", &s.train_sets},
      {"sft-from", "an earlier demo folder (same sizes, seeds and protocol): start GRPO from its SFT checkpoint "
                   "instead of training SFT again (to compare GRPO variants on one SFT)", &s.sft_from},
  });
  t.push_back({"seeds", "comma-separated seeds (e.g. 1,2,3), instead of --seed: one run per seed in OUT/seed-N (a "
                         "finished one with the same settings is reused), then OUT/seeds.md and seeds.json: the "
                         "figures by seed and whether each claim holds beyond the seeds' spread; with --sft-from, "
                         "seed N starts from SFT_FROM/seed-N", &s.seeds});
  rl::add_device_options(t, s);
  set_option_help(t, "device", "cpu (f32) | cuda (one GPU: SFT, evaluations and GRPO; bf16 weights; needs --set head_dim=64)");
  return t;
}

struct DemoArgs {
  DemoSettings settings;  // the flags' values
  TableFlags flags;
  bool quiet = false;
};

void run_demo_command(DemoArgs& args) {
  DemoSettings a = resolve_options(args.flags, args.settings, DemoSettings{}, demo_options);
  rl::validate_groups(a, "demo");
  check(a.size.empty() || a.size == "default" || a.size == "full" || a.size == "mini", "demo: size '", a.size,
        "' is not default, full or mini");
  rl::DemoConfig c;
  c.out = a.out, c.device = a.device, c.protocol = a.protocol, c.seed = a.seed, c.synth_seed = a.synth_seed;
  c.sizes = rl::demo_sizes(!a.size.empty() ? a.size : a.full ? "full" : "default");
  if (a.dev_limit >= 0) c.sizes.dev_limit = a.dev_limit;
  if (a.train_limit >= 0) c.sizes.train_limit = a.train_limit;
  if (a.sft_epochs >= 0) c.sizes.sft_epochs = a.sft_epochs;
  if (a.rl_steps >= 0) c.sizes.rl_steps = a.rl_steps;
  if (a.rl_lr > 0) c.sizes.rl_lr = a.rl_lr;
  if (a.eval_every >= 0) c.sizes.rl_eval_every = a.eval_every;
  if (a.sft_lr > 0) c.sizes.sft_lr = a.sft_lr;
  for (const std::string& kv : a.sets) rl::set_demo_size(c.sizes, kv);
  c.train_sets = a.train_sets;
  c.sft_from = a.sft_from;
  if (!args.quiet)
    c.log = [](const std::string& line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    };
  std::filesystem::create_directories(c.out);
  if (!a.seeds.empty()) {
    std::vector<uint64_t> seeds;
    std::stringstream list(a.seeds);
    for (std::string item; std::getline(list, item, ',');) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
      check(!item.empty() && end == item.c_str() + item.size() && item[0] != '-', "demo --seeds: '", item,
            "' is not a seed (a number >= 0) in '", a.seeds, "'");
      seeds.push_back(v);
    }
    write_text_atomic((std::filesystem::path(c.out) / "config.toml").string(),
                      options_to_toml(demo_options(a), "llm_sqlrl demo: the resolved configuration (llm_sqlrl demo --config FILE)"));
    const nlohmann::ordered_json summary = rl::run_demo_seeds(c, seeds);
    std::printf("\n%s\nwrote %s/seeds.md and seeds.json (each seed's run in %s/seed-N)\n",
                rl::demo_seeds_table(summary).c_str(), c.out.c_str(), c.out.c_str());
    return;
  }
  write_text_atomic((std::filesystem::path(c.out) / "config.toml").string(),
                    options_to_toml(demo_options(a), "llm_sqlrl demo: the resolved configuration (llm_sqlrl demo --config FILE)"));
  rl::DemoReport r = rl::run_demo(c);
  std::printf("\n%s\nwrote %s/report.json, report.md and report.html\n", rl::demo_table(r).c_str(), c.out.c_str());
}

}  // namespace

void run_default_demo() {
  DemoArgs a;
  run_demo_command(a);
}

void add_demo_command(CLI::App& app) {
  auto a = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand("demo", "The embedded end-to-end run: synth data, SFT, multi-turn GRPO, eval (CPU, or --device cuda)");
  add_table_flags(cmd, demo_options(a->settings), a->flags);
  cmd->add_flag("--quiet", a->quiet, "only the final table");
  cmd->callback([a] { run_demo_command(*a); });
}

}  // namespace sqlrl
