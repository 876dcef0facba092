// `llm_sqlrl plan`: the device memory plan of GRPO training for a model, from its checkpoint
// (only config.json / the tensor shapes are read) or a preset name.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <tuple>

#include "app/commands.h"
#include "app/options.h"
#include "model/memory_plan.h"
#include "rl/options.h"
#include "rl/policy.h"
#include "runtime/error.h"
#include "weights/checkpoint.h"

namespace sqlrl {

void add_plan_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "plan", "Print the memory plan the trainers run with (weights, gradients, optimizer, activations, KV cache) and the modes it chooses");
  struct Args {
    std::string weights, preset, device = "cuda", bf16_moments = "auto", recompute = "auto", offload = "auto";
    int64_t seq = 8192, chunk = 1024, rollout_seq = 8192, rollout_seqs = 64, group = 1, block = 16, mean_tokens = 0,
            kv_blocks = 0;
    int world_size = 1, zero_stage = 0;
    double memory_gb = 80, reserve_gib = 2;
    bool kl = false;
    rl::LoraOptions lora;  // the keys train and sft share (rl/options.h)
  };
  auto args = std::make_shared<Args>();
  auto* source = cmd->add_option_group("model", "the model to plan for");
  source->add_option("--weights", args->weights, "checkpoint file or folder, or a config.json");
  source->add_option("--preset", args->preset, "published shape instead: qwen3-0.6b|1.7b|4b|8b, qwen2.5-coder-3b|7b|14b");
  source->require_option(1);
  cmd->add_option("--device", args->device, "cuda (bf16 weights, one device region shared by rollout and training) or cpu (fp32, all held)")
      ->capture_default_str()->check(CLI::IsMember({"cuda", "cpu"}));
  cmd->add_option("--memory,--gpu-memory", args->memory_gb, "device memory in GB (10^9 bytes): the GPU's, or the host's for --device cpu")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--reserve", args->reserve_gib, "GiB kept back (CUDA context and workspaces; the process itself on the CPU)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--seq", args->seq, "packed tokens per training micro-batch (at least --rollout-seq, as train makes it)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--logprob-chunk", args->chunk, "tokens per log-prob chunk")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--rollout-seq", args->rollout_seq, "tokens per trajectory (max_total_tokens)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--rollout-seqs", args->rollout_seqs, "trajectories the rollout wants in flight at once (the whole job's: each rank gets its share; train with max-batch-sequences 0 wants a step's, batch-size x group-size)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--rollout-mean-tokens", args->mean_tokens, "also print how many trajectories of this mean length the KV cache keeps in flight under the rollout's optimistic admission (which preempts when the cache runs out), beside the full-length count; 0 = not shown")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-cache-blocks", args->kv_blocks, "a KV cache of exactly this many blocks, as train --kv-cache-blocks; 0 = what is left, up to --rollout-seqs trajectories at the full length")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--world-size", args->world_size, "ranks of a data-parallel job (one GPU each on cuda): the plan is one rank's")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--zero-stage", args->zero_stage, "0 | 1 (each rank keeps its slice's AdamW moments) | 2 (and its slice's reduced gradient) | 3 (and its slice's fp32 master weights)")
      ->capture_default_str()->check(CLI::Range(0, 3));
  cmd->add_option("--group", args->group, "trajectories the KV cache must hold at least (one GRPO group)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--kv-block", args->block, "tokens per KV-cache block")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--kl", args->kl, "also hold a frozen reference model (kl-coef or kl-reward-coef > 0)");
  for (auto [flag, value, what] : {std::tuple{"--bf16-moments", &args->bf16_moments, "AdamW moments in bf16"},
                                   {"--recompute", &args->recompute, "recompute layers in the backward (on: every layer)"},
                                   {"--offload-optimizer", &args->offload, "AdamW moments in host memory during rollouts (cuda)"}})
    cmd->add_option(flag, *value, str_cat(what, ": auto|on|off"))->capture_default_str()->check(CLI::IsMember({"auto", "on", "off"}));
  OptionTable lora_keys;
  rl::add_lora_options(lora_keys, args->lora);
  for (const Option& o : lora_keys) add_table_flag(cmd, o);
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
    options.device = rl::parse_device_type(args->device);
    // As train sizes it (rl/grpo/train_loop.cpp): one whole trajectory fits a micro-batch.
    options.tokens_per_micro_batch = std::max(args->seq, args->rollout_seq);
    options.logprob_chunk_tokens = args->chunk;
    options.rollout_sequence_tokens = args->rollout_seq;
    // A rank rolls out its share of the job's trajectories, whole groups.
    const int64_t share = (args->rollout_seqs + args->world_size - 1) / args->world_size;
    options.rollout_sequences = std::max(args->group, (share + args->group - 1) / args->group * args->group);
    options.min_rollout_sequences = args->group;
    options.world_size = args->world_size;
    options.zero_stage = args->zero_stage;
    options.kv_block_size = args->block;
    options.rollout_mean_tokens = args->mean_tokens;
    options.kv_blocks = args->kv_blocks;
    options.device_bytes = std::llround(args->memory_gb * 1e9);
    options.reserve_bytes = static_cast<int64_t>(args->reserve_gib * double(int64_t(1) << 30));
    options.reference_model = args->kl;
    options.bf16_moments = parse_choice(args->bf16_moments, "--bf16-moments");
    options.recompute = parse_choice(args->recompute, "--recompute");
    options.offload_optimizer = parse_choice(args->offload, "--offload-optimizer");
    options.lora = rl::lora_config_from(args->lora);
    for (const std::string& note : config.inferred) std::printf("inferred: %s\n", note.c_str());
    std::fputs(format_memory_plan(config, plan_memory(config, options), options).c_str(), stdout);
  });
}

}  // namespace sqlrl
