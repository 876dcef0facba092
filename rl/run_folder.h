// The run folder: the one owner of what every trainer (GRPO, SFT, self-taught rounds) writes.
//
//   RUN/.lock                 held (flock) by the one process writing RUN, which wrote its pid in
//                             it; the kernel releases it when the process ends, even by kill -9
//   RUN/config.toml           the resolved configuration (the command's options table)
//   RUN/metrics.jsonl         one JSON object per optimizer step, "step" first
//   RUN/trajectories.jsonl    GRPO: sampled trajectories of each step, "step" first
//   RUN/tb/                   TensorBoard event files of the same (rl/tb_log.h owns them)
//   RUN/checkpoints/step-N/   config.json + model.safetensors (HF layout), every tokenizer file of
//                             the source folder (tokenizer.json, tokenizer_config.json with the
//                             chat template, ...), optimizer.safetensors, trainer_state.json; a
//                             LoRA run: adapter_config.json + adapter_model.safetensors (PEFT's)
//                             instead of the weights, the optimizer holding the adapter's moments
//
// A checkpoint is written as checkpoints/.step-N.tmp and renamed into place; a step-N already
// there is moved aside first and removed only after the rename, so some complete step-N exists at
// every instant. ZeRO 1-3 over several ranks: each rank writes its slice of the optimizer state
// (rl/optimizer.h optimizer_shard_name) into checkpoints/.step-N.shards/, and rank 0, which writes
// everything else, moves every rank's shard into its .step-N.tmp before the rename: a checkpoint
// is complete only once every shard is. Such runs need the run folder on a filesystem every rank
// sees (check_run_folder_shared). trainer_state.json has one schema for every trainer:
//   {"version": 1, "trainer": "grpo" | "sft", "step": N, "adam_step": A, ...the trainer's fields}
// where N is the optimizer's train_step (the schedule's clock). Files from before the version
// field still load: GRPO's had no "format", SFT's had "format": "sqlrl-sft" and "train_step".
#pragma once
#include <cstdint>
#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/lora.h"
#include "model/model.h"
#include "rl/optimizer.h"
#include "runtime/comm.h"
#include "runtime/options.h"

namespace sqlrl::rl {

constexpr int64_t kTrainerStateVersion = 1;

// Resuming: a key whose row is not resumable (runtime/options.h Option::resumable) keeps the run's
// own value. The keys of two tables of one layout (the run's settings, the ones asked for) that
// differ where that holds, in table order (train).
std::vector<std::string> fixed_settings_changed(const OptionTable& saved, const OptionTable& asked);
// The keys given (given[i] for table[i]) whose rows are not resumable, in table order (sft, whose
// settings come from its checkpoint rather than a config.toml).
std::vector<std::string> fixed_settings_given(const OptionTable& table, const std::vector<bool>& given);

// Exclusive use of a run folder (created if missing) while the returned value lives. A second
// process gets an error naming the folder and the holder's pid.
struct RunLock {
  int fd = -1;
  std::string path;
  RunLock() = default;
  RunLock(RunLock&& o) noexcept : fd(o.fd), path(std::move(o.path)) { o.fd = -1; }
  RunLock& operator=(RunLock&& o) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();
};
RunLock lock_run_folder(const std::string& dir);

// A fresh run refuses a folder that already holds one (metrics.jsonl or a checkpoint), naming
// the way to continue it.
void check_no_run_in(const std::string& dir, const std::string& resume_hint);
// Whether `dir` holds an sft run (its config.toml says so) with no complete checkpoint: a run
// killed before its first save, which sft restarts from update 0 and sft --resume cannot continue.
bool sft_run_without_checkpoint(const std::string& dir);

std::string checkpoint_dir(const std::string& run_dir, int64_t step);

// The files a Hugging Face tokenizer folder may hold beside tokenizer.json; each one present is
// copied into checkpoints (tokenizer_config.json carries the chat template).
const std::vector<std::string>& tokenizer_file_names();
// tokenizer_path: tokenizer.json or its folder; "" copies nothing.
void copy_tokenizer_files(const std::string& tokenizer_path, const std::string& dest_dir);

// Sharded optimizer state: `optimizer` is rank `rank`'s slice [offset, offset + its size) of
// `total` moments, one of world_size (world_size 1: one file of every moment).
struct OptimizerShard {
  int rank = 0, world_size = 1;
  int64_t offset = 0, total = 0;
  bool sharded() const { return world_size > 1; }
};

// trainer_state.json's text: a field per line, each value on its line (compact: --async's batches
// ahead hold every token, and an indented array puts each on a line of its own, 3.6x the bytes).
std::string trainer_state_text(const nlohmann::ordered_json& state);
// The common head of trainer_state.json; the trainer adds its own fields after it.
nlohmann::ordered_json trainer_state_head(const char* trainer, const OptimizerState& optimizer);
// Writes checkpoints/step-<step>/ of run_dir atomically (see above); returns the folder.
// adapter (a LoRA run): the adapter in PEFT's two files (adapter_config.json,
// adapter_model.safetensors) instead of the model's weights, which the run never changed; the
// folder then loads with `--weights BASE --adapter FOLDER`, or in PEFT as
// PeftModel.from_pretrained(base, FOLDER).
// optimizer null: a weights-only checkpoint (no optimizer.safetensors), which evaluates and loads
// as weights but cannot be resumed (--save-optimizer-every).
// shard (sharded()): `optimizer` is this rank's slice. Rank r > 0 writes its shard alone (model,
// tokenizer and trainer state are not read); rank 0 writes the rest and its own shard, waits for
// every other rank's (until *cancel turns true, or an hour without a new one), and renames the
// folder into place last.
std::string save_checkpoint(const std::string& run_dir, int64_t step, const QwenModel& model,
                            const OptimizerState* optimizer, const std::string& tokenizer_path,
                            const nlohmann::ordered_json& trainer_state, const LoraAdapter* adapter = nullptr,
                            const OptimizerShard& shard = {}, const std::atomic<bool>* cancel = nullptr);
// Removes what an earlier process left unfinished in RUN/checkpoints (.step-N.tmp, .step-N.old
// beside a complete step-N, .step-N.shards): called by the run folder's owner before its first
// save, so that no stale shard is taken for a new one.
void remove_unfinished_checkpoints(const std::string& run_dir);
// Every rank of a job that writes sharded checkpoints calls it once the owner (rank 0) holds the
// run folder's lock: a rank that does not see that folder (a path local to its node) fails naming
// it, before any training.
void check_run_folder_shared(const Comm& comm, const std::string& run_dir);
// Whether a checkpoint folder holds a LoRA adapter (adapter_config.json) rather than weights.
bool is_adapter_checkpoint(const std::string& checkpoint);
// What resume reads of a checkpoint: its weights into `model`, or, for a LoRA run (adapter not
// null), its adapter's A and B into `adapter`. A checkpoint of the other kind, or an adapter of
// another rank, alpha or target set, is an error naming the folder and both values.
void load_checkpoint_weights(const std::string& checkpoint, QwenModel& model, LoraAdapter* adapter);

// trainer_state.json of a checkpoint, checked to be `trainer`'s and of a known version, with the
// pre-version files brought to version 1 ("step" set). Errors name the file.
nlohmann::json read_trainer_state(const std::string& checkpoint, const char* trainer);
// "" when the state's blas_threads (the CPU GEMMs' thread count when it was saved; 0 =
// thread-independent) is this process's or absent; otherwise one line saying that the resumed
// steps will differ in their last bits and how to reproduce them. Resumes print it.
std::string blas_threads_note(const nlohmann::json& saved, const std::string& checkpoint);
// The state's blas_core (the OpenBLAS kernels of the run that saved it) against this process's
// (runtime/blas_core.h): "" when the same or not recorded; when they differ, an error saying how
// to resume with the same bits, or under --cpu-kernels inherit a note. For CPU training only (a
// CUDA run's steps use no CPU GEMM).
std::string check_blas_core(const nlohmann::json& saved, const std::string& checkpoint);

// Whether a checkpoint folder can be resumed: trainer_state.json and optimizer state (one file
// or a shard set; a weights-only checkpoint of --save-optimizer-every has none).
bool is_resumable_checkpoint(const std::string& checkpoint);
// N of a checkpoint folder's name "step-N", -1 for any other name.
int64_t checkpoint_step(const std::string& folder_name);
// The highest resumable checkpoints/step-N, "" when none.
std::string latest_checkpoint(const std::string& run_dir);
// `dir` is a resumable checkpoint folder or a run folder (its latest resumable checkpoint);
// errors name the folder (a weights-only checkpoint names the one to resume from instead).
std::string resolve_checkpoint(const std::string& dir);

// Keeps the lines of a .jsonl file whose "step" is <= step (drops a crash's leftovers).
void truncate_jsonl(const std::string& path, int64_t step);

// An append-only JSON-lines file, flushed per line so a crash loses at most the line in flight.
struct JsonlWriter {
  std::string path;
  std::ofstream out;
  explicit JsonlWriter(std::string file);
  void append(const std::string& json_line);
};

}  // namespace sqlrl::rl
