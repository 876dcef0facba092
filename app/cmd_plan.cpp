// `llm_sqlrl plan`: the device memory plan of GRPO training for a model, from its checkpoint
// (only config.json / the tensor shapes are read) or a preset name.
#include <cstdio>
#include <filesystem>

#include "app/commands.h"
#include "model/memory_plan.h"
#include "runtime/error.h"
#include "weights/checkpoint.h"

namespace sqlrl {

void add_plan_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("plan", "Print the GPU memory plan (weights, gradients, optimizer, activations, KV cache) for training a model");
  struct Args {
    std::string weights, preset;
    int64_t seq = 8192, chunk = 1024, rollout_seq = 8192;
    double gpu_gb = 80, reserve_gib = 2;
    bool bf16_grads = false, kl = false;
  };
  auto args = std::make_shared<Args>();
  auto* source = cmd->add_option_group("model", "the model to plan for");
  source->add_option("--weights", args->weights, "checkpoint file or folder, or a config.json");
  source->add_option("--preset", args->preset, "published shape instead: qwen3-0.6b|1.7b|4b|8b, qwen2.5-coder-3b|7b|14b");
  source->require_option(1);
  cmd->add_option("--seq", args->seq, "packed tokens per training micro-batch")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--logprob-chunk", args->chunk, "tokens per log-prob chunk")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--rollout-seq", args->rollout_seq, "tokens per trajectory, to count KV-cache sequences")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--gpu-memory", args->gpu_gb, "device memory in GB (10^9 bytes)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--reserve", args->reserve_gib, "GiB kept for the CUDA context and workspaces")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_flag("--bf16-grads", args->bf16_grads, "keep gradients in bf16 instead of fp32");
  cmd->add_flag("--kl", args->kl, "also hold a frozen reference model (kl_coef > 0)");
  cmd->callback([args] {
    QwenConfig config;
    if (!args->preset.empty()) {
      config = preset_config(args->preset);
    } else if (std::filesystem::path(args->weights).filename() == "config.json") {
      config = read_config_file(args->weights);
    } else {
      config = checkpoint_config(open_checkpoint(args->weights));
    }
    MemoryPlanOptions options;
    options.tokens_per_micro_batch = args->seq;
    options.logprob_chunk_tokens = args->chunk;
    options.rollout_sequence_tokens = args->rollout_seq;
    options.device_bytes = static_cast<int64_t>(args->gpu_gb * 1e9);
    options.reserve_bytes = static_cast<int64_t>(args->reserve_gib * double(int64_t(1) << 30));
    options.bf16_gradients = args->bf16_grads;
    options.reference_model = args->kl;
    for (const std::string& note : config.inferred) std::printf("inferred: %s\n", note.c_str());
    std::fputs(format_memory_plan(config, plan_memory(config, options), options).c_str(), stdout);
  });
}

}  // namespace sqlrl
