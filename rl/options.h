// The option groups that several commands share, declared once (runtime/options.h tables). A
// command's config struct derives from the groups it has and sets its own defaults in its
// constructor; its table function adds each group with add_*_options, so the key, the help line
// and the checks of a knob are the same in every command that takes it.
//
//   group      keys                                                    commands
//   output     out                                                     train sft self-taught eval demo
//   device     device                                                  train sft self-taught eval generate demo
//   model      weights tokenizer                                       train sft self-taught eval generate
//   adapter    adapter                                                 train sft eval generate
//   lora       lora-rank lora-alpha lora-target-modules lora-rslora    train sft plan
//   template   chat-template enable-thinking                           train sft self-taught eval (synth-demos:
//                                                                      enable-thinking)
//   protocol   protocol sqltrail-reasoning-stop sqltrail-final-solution  train self-taught eval demo synth-demos
//              mtir-rethink mtsql-memory-parse mtsql-answer-fallback
//   sampling   temperature top-p top-k                                 train self-taught eval generate
//   turns      max-turns max-turn-tokens max-total-tokens              train self-taught eval
//   sql        sql-timeout-ms sql-max-rows sql-memory-mb sql-max-value-kb  train self-taught eval
//   memory     memory-gb bf16-moments recompute offload-optimizer      train sft
//   parallel   grad-accum zero-stage deterministic-reduce              train
//   checkpoint checkpoint-background keep-checkpoints                  train sft
//              save-optimizer-every
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "model/lora.h"
#include "rl/checkpoint_writer.h"
#include "rl/agent/rollout.h"
#include "runtime/error.h"
#include "runtime/options.h"

namespace sqlrl::rl {

struct OutputOptions {
  std::string out;  // the command's output (run) folder
};
struct DeviceOptions {
  std::string device = "cpu";  // a row of rl/policy_backend.h (find_backend): cpu | cuda
};
struct ModelOptions {
  std::string weights;    // HF checkpoint file or folder
  std::string tokenizer;  // tokenizer.json or its folder; "" = the weights folder's
};
// A PEFT LoRA adapter (model/lora.h) on either device (CUDA: uploaded beside the base): applied
// unmerged by the commands that run the model (eval, generate), trained further on the frozen
// base by those that train (train, sft, sft self-taught: training_adapter).
struct AdapterOptions {
  std::string adapter;  // a folder with adapter_config.json + adapter_model.safetensors; "" = none
};
// A LoRA adapter to train on a frozen base (model/lora.h; memory priced by model/memory_plan.h).
// One group so that plan, train and sft spell and check the keys alike. The defaults are the
// common PEFT recipes' (PEFT's own LoraConfig says r 8, alpha 8): rank 16 is the usual choice
// when on, alpha twice the rank (scale alpha / r = 2 at any rank, so changing the rank does not
// change the step size of a fresh adapter's output), every linear projection, no rsLoRA.
// Dropout is not a key: the backward implements none (lora_backward_state refuses it), so the
// adapter's lora_dropout is always 0.
struct LoraOptions {
  int64_t lora_rank = 0;    // r; 0 = off (full fine-tuning)
  double lora_alpha = 0;    // lora_alpha; 0 = 2 x lora_rank
  std::string lora_target_modules = "all-linear";  // "all-linear", or a comma list of q_proj ... down_proj
  bool lora_rslora = false;  // scale alpha / sqrt(r) instead of alpha / r (PEFT's use_rslora)
};
struct TemplateOptions {
  std::string chat_template;    // qwen3 | qwen2.5; "" = detected from the tokenizer folder, else qwen3
  bool enable_thinking = true;  // Qwen3 template flag
};
// The protocol and its paper details (rl/agent/protocol.h ProtocolSettings: the papers' by
// default, each switchable for an ablation); make_protocol(o.protocol, o) builds it.
struct ProtocolOptions : ProtocolSettings {
  std::string protocol = "skyrl";  // skyrl | sqltrail | mtir | mtsql
};
struct SamplingOptions {
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0;
};
struct TurnOptions {
  int64_t max_turns = 0;  // 0 = the protocol's budget
  int64_t max_turn_tokens = 1024;
  int64_t max_total_tokens = 4096;
};
struct SqlOptions {
  int64_t sql_timeout_ms = 5000;
  int64_t sql_max_rows = 10000;
  int64_t sql_memory_mb = 256;      // per query, inside SQLite (sql::Limits::max_query_memory_bytes)
  int64_t sql_max_value_kb = 1024;  // longest string/blob a query may build (SQLITE_LIMIT_LENGTH)
  // Deterministic budget per query in SQLite VM steps (sql::Limits::max_vm_steps); 0 = none. With
  // one, the step budget is the query's limit and the wall clock a safety net: a query the clock
  // stops first failed for the machine (sql::Result::infra_error), and GRPO leaves it out.
  int64_t sql_vm_steps = 0;
};

// The memory plan's inputs (model/memory_plan.h, rl/train_memory.h): the budget and each
// mode's auto|on|off.
struct MemoryOptions {
  double memory_gb = 0;  // device memory the plan may use, GB (10^9 bytes); 0 = the device's (GPU / host RAM)
  std::string bf16_moments = "auto", recompute = "auto", offload_optimizer = "auto";
};

// Data parallelism (rl/grpo/grpo.h DataParallel): the ranks come from the launcher (mpirun,
// srun, RANK/WORLD_SIZE; runtime/comm.h); these say how the gradient is formed.
struct ParallelOptions {
  int64_t grad_accum = 1;           // one process: the step's prompts in N shards, as N ranks would split them
  int64_t zero_stage = 0;           // 0 | 1 (optimizer state sharded) | 2 (and the reduced gradients) | 3 (and the master)
  bool deterministic_reduce = true;  // rank-order sums: N ranks == --grad-accum N, bit for bit
};

// Checkpoint writing (rl/checkpoint_writer.h), which a resumed run may change.
struct CheckpointOptions {
  // auto | on | off: write from a host copy on a thread while training goes on (auto: when the
  // host has room for the copy; rl/checkpoint_writer.h)
  std::string checkpoint_background = "auto";
  int64_t keep_checkpoints = 0;       // complete checkpoints kept (newest, plus best.json's); 0 = all
  // Steps (sft: updates) between checkpoints that carry the optimizer state; those in between
  // hold the weights only (a sixth of the bytes with f32 moments) and cannot be resumed. 0 = every
  // checkpoint. The last and an interrupted run's always carry it.
  int64_t save_optimizer_every = 0;
};

// Whether the checkpoint of `step` carries the optimizer state (CheckpointOptions).
bool saves_optimizer(const CheckpointOptions& o, int64_t step, bool last);
// The writer's settings of the group (validated).
CheckpointWriterOptions checkpoint_writer_options(const CheckpointOptions& o);

void add_output_options(OptionTable& table, OutputOptions& o, const char* help);
void add_checkpoint_options(OptionTable& table, CheckpointOptions& o);
void add_parallel_options(OptionTable& table, ParallelOptions& o);
// The "zero-stage" row alone (sft, whose grad-accum is a training setting of its own).
void add_zero_stage_option(OptionTable& table, int64_t& zero_stage);
void validate_zero_stage(int64_t zero_stage);
void add_memory_options(OptionTable& table, MemoryOptions& o);
void add_device_options(OptionTable& table, DeviceOptions& o);
void add_model_options(OptionTable& table, ModelOptions& o);
// The tokenizer.json to use: --tokenizer (a file, or a folder holding one; an error if missing),
// else the one beside the weights; "" when neither has one.
std::string model_tokenizer_path(const ModelOptions& o);
void add_adapter_options(OptionTable& table, AdapterOptions& o);
// The adapter folder `dir` read for `model` (load_adapter), after checking that it is a folder with
// both of PEFT's files (an error names the one missing); null when dir is "". `who` prefixes errors.
std::unique_ptr<LoraAdapter> load_adapter_option(const std::string& dir, const QwenModel& model, const char* who);
void add_lora_options(OptionTable& table, LoraOptions& o);
// The adapter a training command (train, sft) trains, base frozen: the one in `from.adapter`
// (its files set rank, alpha and targets; a lora-rank given too must agree), else a fresh one of
// the lora-* keys (PEFT's initialisation, A from Philox(seed)), else null (every weight trains).
// Its adapter_config.json will name `base` (base_model_name_or_path), as PEFT's does.
std::unique_ptr<LoraAdapter> training_adapter(const LoraOptions& lora, const AdapterOptions& from,
                                              const QwenModel& model, uint64_t seed, const std::string& base,
                                              const char* who);
// The adapter the options describe (alpha resolved, targets split, dropout 0); nullopt when
// lora-rank is 0. Checks them as validate(LoraOptions) does.
std::optional<LoraConfig> lora_config_from(const LoraOptions& o);
void add_template_options(OptionTable& table, TemplateOptions& o);
void add_thinking_option(OptionTable& table, bool& enable_thinking);  // the template group's second key alone
void add_protocol_options(OptionTable& table, ProtocolOptions& o);
void add_sampling_options(OptionTable& table, SamplingOptions& o);
void add_turn_options(OptionTable& table, TurnOptions& o);
void add_sql_options(OptionTable& table, SqlOptions& o);

// The keys every phase of a paper recipe shares (the template, protocol, turns and sql groups,
// and `compare`): what the agent sees and how its SQL runs. A recipe states them once at its top;
// sft, self-taught and eval take them from there (runtime/options.h ConfigSection).
std::vector<std::string> environment_keys();

// One-line errors naming the key ("max-turn-tokens must be positive, got 0").
void validate(const DeviceOptions& o);
void validate(const ProtocolOptions& o);
void validate(const SamplingOptions& o);
void validate(const TurnOptions& o);
void validate(const SqlOptions& o);
void validate(const MemoryOptions& o);
void validate(const ParallelOptions& o);
void validate(const LoraOptions& o);
void validate(const CheckpointOptions& o);

// Checks every shared group that `config` derives from; an error reads "<command>: <what>".
template <class Config>
void validate_groups(const Config& config, const char* command) {
  try {
    if constexpr (std::is_base_of_v<DeviceOptions, Config>) validate(static_cast<const DeviceOptions&>(config));
    if constexpr (std::is_base_of_v<ProtocolOptions, Config>) validate(static_cast<const ProtocolOptions&>(config));
    if constexpr (std::is_base_of_v<SamplingOptions, Config>) validate(static_cast<const SamplingOptions&>(config));
    if constexpr (std::is_base_of_v<TurnOptions, Config>) validate(static_cast<const TurnOptions&>(config));
    if constexpr (std::is_base_of_v<SqlOptions, Config>) validate(static_cast<const SqlOptions&>(config));
    if constexpr (std::is_base_of_v<MemoryOptions, Config>) validate(static_cast<const MemoryOptions&>(config));
    if constexpr (std::is_base_of_v<ParallelOptions, Config>) validate(static_cast<const ParallelOptions&>(config));
    if constexpr (std::is_base_of_v<LoraOptions, Config>) validate(static_cast<const LoraOptions&>(config));
    if constexpr (std::is_base_of_v<CheckpointOptions, Config>) validate(static_cast<const CheckpointOptions&>(config));
  } catch (const std::exception& e) {
    fail(command, ": ", e.what());
  }
}

// The groups' share of a rollout: sampling (seed given), turn caps, SQL limits.
void apply_to_rollout(RolloutOptions& ro, const SamplingOptions& s, uint64_t seed, const TurnOptions& t,
                      const SqlOptions& q);

}  // namespace sqlrl::rl
