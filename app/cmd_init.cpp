// `llm_sqlrl init`: a Hugging Face checkpoint folder of a published shape (or any config.json)
// with random weights and a tokenizer. No download needed to smoke-test a pipeline at the real
// size, and what scripts/gpu_first_light.sh runs every subcommand on, on the CPU and on the GPU.
#include <cstdio>
#include <filesystem>

#include "app/commands.h"
#include "model/model.h"
#include "rl/run_folder.h"
#include "runtime/error.h"
#include "runtime/progress.h"
#include "weights/checkpoint.h"

namespace sqlrl {

void add_init_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "init", "Write a checkpoint folder of a published shape with random weights (N(0, std), norms 1) and a tokenizer");
  struct Args {
    std::string preset, config, tokenizer, out, dtype = "bf16";
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
  // bf16 by default: the published checkpoints' dtype, half the bytes of f32 to write and to read
  // back, and what the device computes with anyway. The values are the f32 draws rounded to
  // nearest even; f32 writes the draws themselves (the files init wrote before it had --dtype).
  cmd->add_option("--dtype", args->dtype, "the weights' dtype in the files")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f32", "f16"}));
  cmd->callback([args] {
    namespace fs = std::filesystem;
    check(!fs::exists(args->out) || (fs::is_directory(args->out) && fs::is_empty(args->out)), "init: ", args->out,
          " exists and is not an empty folder");
    const QwenConfig config = args->preset.empty() ? read_config_file(args->config) : preset_config(args->preset);
    validate_config(config, "init");
    const DType dtype = parse_dtype(args->dtype);
    const int64_t params = count_parameters(qwen_parameters(config));
    // Gigabytes of Philox draws straight to disk (save_random_model): the progress line counts
    // the megabytes written, so a multi-minute write on a slow disk shows its pace and end.
    const int64_t total_bytes = params * static_cast<int64_t>(dtype_size(dtype));
    const int64_t total_mb = (total_bytes + 999'999) / 1'000'000;
    Progress bar = progress_start("init", "MB", total_mb);
    progress_plain_lines(bar, 10);
    int64_t written = 0;
    fs::create_directories(args->out);
    rl::copy_tokenizer_files(args->tokenizer, args->out);  // first: a wrong path fails before gigabytes are written
    save_random_model(config, args->out, args->seed, static_cast<float>(args->std), dtype, [&](uint64_t bytes) {
      written += static_cast<int64_t>(bytes);
      // Whole megabytes until the last byte, so the 100% line comes once, at the end.
      progress_update(bar, written == total_bytes ? total_mb : written / 1'000'000);
    });
    progress_finish(bar);
    std::printf("%s: %s, %.3f B parameters, random N(0, %g) weights (seed %llu) as %s, tokenizer from %s\n",
                args->out.c_str(), arch_name(config.arch), params / 1e9, args->std,
                static_cast<unsigned long long>(args->seed), dtype_name(dtype), args->tokenizer.c_str());
  });
}

}  // namespace sqlrl
