// Supervised fine-tuning on masked sequences (rl/sft/sft_data.h) with the GRPO trainer's pieces:
// next-token packing under a token budget (rl/grpo/grpo.h pack_micro_batches), AdamW and the
// warmup + cosine schedule (rl/optimizer.h), the fused masked log-prob forward/backward
// (model/train.h).
//
// Loss of one optimizer update: -sum(mask * log p) / (masked tokens of the update), the update
// being grad_accum consecutive micro-batches (token-mean over the update, as LlamaFactory /
// transformers average the masked cross-entropy). Each epoch visits the sequences in a seeded
// shuffled order (Fisher-Yates over splitmix64: the same bytes on every platform), packs them
// greedily, and every update advances the LR schedule by one.
//
// Output folder (rl/run_folder.h, as GRPO's):
//   OUT/metrics.jsonl           one line per update: step, epoch, loss, tokens, positions, lr,
//                               grad_norm, tokens_per_s (trained tokens), seconds
//   OUT/checkpoints/step-N/     every save_every updates and always after the last one (the
//                               highest N is final)
//
// Resume: trainer_state.json holds the whole SftConfig, the LR schedule, the data cursor (epoch
// and micro-batch of the next update) and a fingerprint of the data; run_sft given that cursor,
// the checkpoint's weights and optimizer makes the same following updates as the uninterrupted
// run, bit for bit (the epoch plans are recomputed from the seed and the data).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/train.h"
#include "rl/checkpoint_writer.h"
#include "rl/grpo/grpo.h"
#include "model/memory_plan.h"
#include "rl/optimizer.h"
#include "rl/options.h"
#include "rl/data_parallel.h"
#include "rl/policy.h"
#include "rl/run_folder.h"
#include "rl/sft/sft_data.h"

namespace sqlrl::rl {

struct SftConfig {
  int64_t epochs = 1;
  int64_t max_steps = 0;              // > 0: stop after this many updates (also sizes the cosine)
  int64_t micro_batch_tokens = 2048;  // packed positions per micro-batch (TrainState max_tokens)
  int64_t grad_accum = 1;             // micro-batches per optimizer update
  // MTSQL-R1 appendix B (LlamaFactory): lr 5e-6, cosine; LlamaFactory's default warmup 0 and
  // weight decay 0.
  float lr = 5e-6f;
  float warmup_ratio = 0.0f;          // of the total updates
  float min_lr_ratio = 0.0f;
  LrDecay decay = LrDecay::Cosine;
  AdamWConfig adamw{0.9f, 0.999f, 1e-8f, 0.0f};
  float max_grad_norm = 1.0f;         // <= 0: no clipping
  uint64_t seed = 1;                  // shuffle order
  bool shuffle = true;
  int64_t save_every = 0;             // updates between checkpoints; 0 = only OUT/final
  // > 0: visit sequences in runs of up to this many that share most of their untrained start
  // (demonstrations on one database: the schema prompt) and pack each run's common start once
  // (shared prefixes). 0: a plain shuffle, every sequence packed whole.
  int64_t share_group = 0;
};

// Sequences longer than micro_batch_tokens + 1 tokens are cut to that length (their tail is
// lost, like LlamaFactory's cutoff_len); a cut sequence left with no trained target is dropped.
struct ClipStats {
  int64_t cut = 0, dropped = 0;
};
ClipStats clip_sequences(std::vector<SftSequence>& data, int64_t micro_batch_tokens);

// The visiting order of one epoch: 0..n-1, shuffled by (seed, epoch) when asked. (GRPO's example
// order is rl/grpo/train_loop.cpp's Fisher-Yates over Philox draws. Making the two one function
// changes the order of one trainer and so every published demo figure: that belongs in a change
// that re-measures the demo, not in a refactor.)
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

// Sequences whose untrained starts (tokens before the first trained one) share at least half
// of their length form a family. The order of one epoch: each family shuffled by (seed, epoch)
// and cut into runs of up to `group`; the runs shuffled and laid end to end.
std::vector<int64_t> grouped_epoch_order(const std::vector<SftSequence>& data, uint64_t seed, int64_t epoch,
                                         int64_t group);

// Packs data[order[i]] in order into micro-batches (next-token targets, mask = the target's
// mask): rl/grpo/grpo.h's packing, so a sequence never spans two micro-batches. share_min_tokens > 0
// shares common starts (pack_micro_batches).
std::vector<MicroBatch> pack_sft(const std::vector<SftSequence>& data, const std::vector<int64_t>& order,
                                 int64_t max_tokens, int64_t share_min_tokens = 0);

struct SftUpdateStats {
  double loss = 0;        // mean NLL per trained token
  double grad_norm = 0;   // before clipping
  int64_t tokens = 0;     // trained tokens
  int64_t positions = 0;  // packed positions
  float lr = 0;
};

// One AdamW update over `micro` (their masked tokens form the denominator); the schedule's
// clock is optimizer.train_step. An update with no trained token changes nothing but the clock.
// On either device (rl/policy.h; policy_init_training first): CPU moments in optimizer.m/v,
// CUDA moments on the device (optimizer keeps the counters).
// Data parallel (rl/data_parallel.h): shard s of the update is micro[s] alone. N ranks with
// dp.grad_accum A: `micro` is the update's N x A micro-batches (every rank's), rank r trains
// micro[rA .. rA + A - 1] (none past the end), each one's gradient from zero, and the N x A are
// reduced in shard order: the bits of one process with dp.grad_accum N x A. dp.shards() == 1:
// every micro-batch accumulated into one gradient buffer (the CUDA way of --grad-accum).
SftUpdateStats sft_update(Policy& policy, OptimizerState& optimizer, PolicyActivations& acts,
                          const std::vector<const MicroBatch*>& micro, const LrSchedule& schedule, const SftConfig& config,
                          const DataParallel& dp = {});

// Mean NLL per trained token of `data` under `model` (no update); 0 trained tokens -> 0.
double sft_eval_loss(const QwenModel& model, TrainState& state, const std::vector<SftSequence>& data,
                     int64_t max_tokens);

// Where a run stands between two updates (trainer_state.json's cursor).
struct SftCursor {
  int64_t epoch = 0, micro = 0;  // the next update starts at micro-batch `micro` of epoch `epoch`
  int64_t updates = 0;           // updates the run has made
  int64_t planned = 0;           // updates the run makes in all
  int64_t total_steps = 0, warmup_steps = 0;  // the LR schedule (it spans the planned updates)
};

// A checkpoint's trainer_state.json, read back.
struct SftCheckpoint {
  std::string path;  // the checkpoint folder
  SftConfig config;
  SftCursor cursor;
  int64_t train_step = 0;        // the optimizer's clock at the save
  uint64_t data_fingerprint = 0;
  int64_t sequences = 0;         // training sequences (after clipping)
  nlohmann::ordered_json run;    // SftRunOptions::run_info as saved
};

struct SftRunOptions {
  std::string out_dir;         // "" = write nothing (tests)
  std::string tokenizer_path;  // tokenizer.json (or its folder) copied into checkpoints; "" = none
  // One line per update (its metrics.jsonl JSON) and per checkpoint; may be empty. With `progress`
  // the progress line shows the updates instead, and log gets the checkpoints and notices alone.
  std::function<void(const std::string&)> log;
  CheckpointOptions checkpoint = {};  // rl/checkpoint_writer.h: in the background by default
  // Continue the run of this checkpoint (its weights and optimizer already in model/optimizer,
  // the same data): its config replaces `config`, metrics.jsonl lines past its step are dropped.
  const SftCheckpoint* resume = nullptr;
  nlohmann::ordered_json run_info = nlohmann::ordered_json::object();  // saved as "run" (CLI: data paths)
  // Written as OUT/config.toml once the folder is locked and holds no other run ("" = none).
  std::string config_toml = "";
  // OUT/tb: TensorBoard event files of the metrics.jsonl lines and config_toml (rl/tb_log.h).
  bool tensorboard = true;
  std::string tb_dir = "";  // their folder when not OUT/tb
  // CUDA: train on the rank's GPU (bf16 weights, f32 master, moments on the device; `model`
  // receives the trained master weights at the end, checkpoints download them).
  DeviceType device = DeviceType::CPU;
  // The memory plan's budget and modes (rl/train_memory.h; no rollout phase): recomputed layers
  // and bf16 moments as the plan chooses; OUT/memory_plan.txt records it.
  MemoryOptions memory = {};
  // Several ranks (runtime/comm.h): each update is world-size x grad_accum micro-batches, grad_accum
  // per rank (CPU; on cuda grad_accum must then be 1); rank 0 alone writes out_dir and logs. Null:
  // one process.
  const Comm* comm = nullptr;
  // Several ranks: 1 (each keeps the AdamW moments of its slice), 2 (and its slice's reduced
  // gradient), 3 (and its slice's master; on the CPU as 2): rl/data_parallel.h. 0: every rank
  // keeps everything. The optimizer state given may hold every moment (a resumed checkpoint's):
  // the run keeps its rank's slice.
  int zero_stage = 0;
  // A progress line per update (runtime/progress.h; rank 0): epoch, loss, lr, tokens/s and the
  // ETA, redrawn in place on a terminal, else one line per update on stdout. Off: nothing drawn
  // (tests, the demo, self-taught's rounds unless asked).
  bool progress = false;
  std::string progress_label = "sft";
  // Not on a terminal: about this many progress lines over the run (evenly spaced, the last update
  // always); 0 = one per update. The demo asks for 20 so that its log shows SFT moving without
  // 2,000 lines.
  int64_t progress_plain_lines = 0;
  // A LoRA run (model/lora.h; either device): this adapter is trained and `model` stays frozen; the
  // optimizer's moments are the adapter's, and checkpoints hold it in PEFT's files instead of
  // the weights (rl/run_folder.h). Never owned; null: every weight is trained.
  LoraAdapter* adapter = nullptr;
};

struct SftRunStats {
  int64_t updates = 0, epochs_done = 0;
  ClipStats clipped;
  int64_t trained_tokens = 0;
  double first_loss = 0, last_loss = 0, seconds = 0;
  std::vector<std::string> checkpoints;
  TrainModes modes;  // the memory modes the run executed (executed_modes)
  bool interrupted = false;  // stopped by SIGINT/SIGTERM; the last checkpoint holds the last update
};

// Trains `model` (grads allocated here when missing) on `data` for config.epochs (or
// max_steps); `optimizer` continues from its counters (resume; on CUDA its m/v, when present,
// are uploaded).
SftRunStats run_sft(QwenModel& model, OptimizerState& optimizer, std::vector<SftSequence> data,
                    const SftConfig& config, const SftRunOptions& options);

// Order-sensitive hash of the sequences' tokens and masks (FNV-1a 64): resume refuses other data.
uint64_t sft_data_fingerprint(const std::vector<SftSequence>& data);
// trainer_state.json of an SFT checkpoint folder (rl/run_folder.h resolve_checkpoint finds it in
// a run folder); errors name the file and the field.
SftCheckpoint read_sft_checkpoint(const std::string& checkpoint);
nlohmann::ordered_json sft_config_json(const SftConfig& config);
SftConfig sft_config_from_json(const nlohmann::json& j);  // throws nlohmann errors on a missing key

}  // namespace sqlrl::rl
