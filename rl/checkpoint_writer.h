// Checkpoints that do not stop training. A save copies what the checkpoint holds (the weights or
// the LoRA adapter, the optimizer's moments, the trainer state) into host memory the writer owns,
// and a background thread writes the folder from that copy (rl/run_folder.h save_checkpoint: a
// temporary folder renamed into place, so kill -9 mid-write leaves the previous checkpoint the
// latest complete one). Training blocks for the copy only, and for the previous write when the
// next save comes before it has finished (one write in flight). A write's error is raised at the
// next save or at finish(): the run stops there, as it would have at the save itself.
//
// After each write (background or not), `keep` > 0 deletes the oldest complete checkpoints but the
// newest `keep`, sparing the newest resumable one and the one RUN/best.json names; then the save's `after` runs (best.json is
// written only once the checkpoint it names exists).
//
// Memory: the copy is as large as the checkpoint's tensors (a 0.6B model with fp32 moments: 7.2
// GB), kept from the first save to the end of the run (later saves copy into it, without the page
// faults of a fresh allocation). checkpoint-background auto (the default) writes in place when
// the host lacks room for it; off always does, without a copy.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "model/lora.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "rl/optimizer.h"
#include "rl/run_folder.h"

namespace sqlrl::rl {

struct CheckpointWriterOptions {
  // On: every save in the background. Off: in place. Auto: in the background while the copy's
  // memory not yet held is at most half of what the host has available (MemAvailable), else in
  // place with a note once (a Qwen3-8B CUDA run's copy would be 96 GB of host memory).
  Choice background = Choice::Auto;
  int64_t keep = 0;  // complete checkpoints kept (the newest, plus best.json's); 0 = all
  // ZeRO 1-3 over several ranks: every rank has a writer, and the optimizer state each save gets
  // is its slice (rl/run_folder.h save_checkpoint). A rank other than 0 writes its shard alone:
  // no weights are copied or written, nothing is pruned, `after` is not run.
  OptimizerShard shard = {};
};

class CheckpointWriter {
 public:
  CheckpointWriter(std::string run_dir, std::string tokenizer_path, CheckpointWriterOptions options);
  ~CheckpointWriter();  // waits for the write in flight; an error nobody collected goes to stderr
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Background: allocates the copy's memory for checkpoints of `weights` floats (0: a LoRA run,
  // whose adapter is copied instead) and two moments of `moments` entries (bf16 or f32), on the
  // writing thread, so
  // the first save copies into memory already touched (a fresh 7 GB costs ~9 s of page faults on
  // a 2-core VM). Training goes on meanwhile; the first save waits for it. No-op in place.
  void prepare(int64_t weights, int64_t moments, bool bf16_moments);
  // Checkpoint `step` of `model` (its params; not read when `adapter` is given), `optimizer` (null:
  // a weights-only checkpoint, which cannot be resumed) and `trainer_state`: waits for the
  // previous write (raising its error), then writes (background: starts writing a copy).
  // `after(folder)` runs once the folder is in place, on the writer's thread when in the
  // background. Returns the folder the checkpoint will have.
  std::string save(int64_t step, const QwenModel& model, const OptimizerState* optimizer,
                   const nlohmann::ordered_json& trainer_state, const LoraAdapter* adapter = nullptr,
                   std::function<void(const std::string&)> after = {});
  // The buffers the next save copies the optimizer state into, to be filled by the caller instead
  // (waits for the write in flight first), with `counters`' step counters and precision: a
  // caller whose host moments are only ever the checkpoint's (CUDA with the moments resident on
  // the device) downloads them straight here, and save() given this state copies nothing: no
  // second host copy of the moments, and no fresh allocation (page faults) per save.
  OptimizerState& staged_optimizer(const OptimizerState& counters);
  // Waits for the write in flight and raises its error, if any.
  void finish();
  // Called on the writing thread before each write (tests hold a write back with it).
  void set_before_write(std::function<void()> hook) { before_write_ = std::move(hook); }
  // Seconds the last finished write took (0 before the first).
  double last_write_seconds() const { return last_write_seconds_; }

 private:
  struct Job;
  void write(Job& job);  // the write, the pruning, `after`; errors into error_
  // Whether a save whose copy holds `bytes` goes to the background (options_.background).
  bool in_background(int64_t bytes, bool note);
  bool owner() const { return options_.shard.rank == 0; }  // writes the folder, prunes, runs `after`

  std::string run_dir_, tokenizer_path_;
  CheckpointWriterOptions options_;
  std::function<void()> before_write_;
  std::shared_ptr<Job> job_;  // the copy's buffers, kept between saves
  std::thread thread_;
  std::string error_;  // of the last write; read after joining
  std::atomic<bool> cancel_{false};  // the destructor stops a wait for other ranks' shards
  double last_write_seconds_ = 0;
  bool noted_ = false;  // the auto mode's note printed
};

// Deletes the complete checkpoints of run_dir but the newest `keep`, the newest resumable one (a
// run must stay resumable when its newest are weights-only) and the one RUN/best.json names (keep
// <= 0: none deleted). Returns the folders deleted.
std::vector<std::string> prune_checkpoints(const std::string& run_dir, int64_t keep);

}  // namespace sqlrl::rl
