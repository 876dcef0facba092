// `llm_sqlrl init`: a Hugging Face checkpoint folder of a published shape (or any config.json)
// with random weights and a tokenizer. No download needed to smoke-test a pipeline at the real
// size, and what scripts/gpu_first_light.sh runs every subcommand on, on the CPU and on the GPU.
#include <cstdio>
#include <filesystem>

#include "app/commands.h"
#include "model/model.h"
#include "rl/run_folder.h"
#include "runtime/error.h"
#include "weights/checkpoint.h"

namespace sqlrl {

void add_init_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "init", "Write a checkpoint folder of a published shape with random weights (N(0, std), norms 1) and a tokenizer");
  struct Args {
    std::string preset, config, tokenizer, out;
    uint64_t seed = 1;
    double std = 0.02;
  };
  auto args = std::make_shared<Args>();
  auto* shape = cmd->add_option_group("shape", "the model's shape");
  shape->add_option("--preset", args->preset, "qwen3-0.6b|1.7b|4b|8b, qwen2.5-coder-3b|7b|14b");
  shape->add_option("--config", args->config, "a config.json instead");
  shape->require_option(1);
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json or its folder (its tokenizer files are copied)")->required();
  cmd->add_option("--out", args->out, "the checkpoint folder to write (must not exist, or be empty)")->required();
  cmd->add_option("--seed", args->seed, "Philox seed of the weights")->capture_default_str();
  cmd->add_option("--std", args->std, "standard deviation of the non-norm weights (transformers' initializer_range)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->callback([args] {
    namespace fs = std::filesystem;
    check(!fs::exists(args->out) || (fs::is_directory(args->out) && fs::is_empty(args->out)), "init: ", args->out,
          " exists and is not an empty folder");
    QwenConfig config = args->preset.empty() ? read_config_file(args->config) : preset_config(args->preset);
    QwenModel model = make_model(config);
    init_random_weights(model, args->seed, static_cast<float>(args->std));
    fs::create_directories(args->out);
    save_model(model, args->out);
    rl::copy_tokenizer_files(args->tokenizer, args->out);
    std::printf("%s: %s, %.3f B parameters, random N(0, %g) weights (seed %llu), tokenizer from %s\n",
                args->out.c_str(), arch_name(config.arch), model.num_params / 1e9, args->std,
                static_cast<unsigned long long>(args->seed), args->tokenizer.c_str());
  });
}

}  // namespace sqlrl
