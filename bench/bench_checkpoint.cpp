// Training time blocked per checkpoint (rl/checkpoint_writer.h) of a Qwen3-0.6B-shaped model on
// the CPU: f32 weights (written as the HF bf16 model.safetensors), f32 AdamW moments, the
// trainer state (no tokenizer files). background:0 writes in the caller's thread (what every save did
// before: training waits for the whole write); background:1 copies and writes on a thread
// (training waits for the copy). The timed region is save() alone; `write_s` is the whole write,
// which a background save overlaps with the next steps; `first_blocked_s` the run's first save
// (a background one allocates its copy then). The folder is
// $SQLRL_BENCH_CKPT_DIR (default /tmp/sqlrl_bench_ckpt), about 6 GB while it runs, removed after.
// Peer: bench/checkpoint_peer.py (PyTorch Distributed Checkpoint, save and async_save).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "model/model.h"
#include "rl/checkpoint_writer.h"
#include "rl/run_folder.h"
#include "weights/config.h"

namespace {

using namespace sqlrl;
using Clock = std::chrono::steady_clock;

struct World {
  QwenModel model;
  rl::OptimizerState optimizer;
};

World& world() {
  static World w = [] {
    World w{make_model(preset_config("qwen3-0.6b")), {}};
    // Any values: the write's cost does not depend on them (a cheap fill, not 0.6B Philox draws).
    for (size_t i = 0; i < w.model.params.size(); ++i) w.model.params[i] = static_cast<float>(i % 1021) * 1e-3f;
    w.optimizer = rl::make_optimizer_state(w.model.num_params);
    for (size_t i = 0; i < w.optimizer.m.size(); ++i) w.optimizer.m[i] = 1e-4f, w.optimizer.v[i] = 1e-8f;
    return w;
  }();
  return w;
}

void BM_CheckpointBlocked(benchmark::State& state) {
  const char* env = std::getenv("SQLRL_BENCH_CKPT_DIR");
  const std::string dir = env ? env : "/tmp/sqlrl_bench_ckpt";
  World& w = world();
  rl::CheckpointWriterOptions o;
  o.background = state.range(0) != 0 ? Choice::On : Choice::Off;
  o.keep = 1;
  double write_s = 0;
  int64_t step = 0;
  // One writer for the run, as train and sft have, its copy's memory prepared while the first
  // steps run; first_blocked_s is the run's first save, the timed ones the saves after it.
  rl::CheckpointWriter writer(dir, "", o);
  writer.prepare(w.model.num_params, w.model.num_params, false);  // as train and sft do when they start
  writer.finish();  // (training's first steps would run here)
  auto first = Clock::now();
  writer.save(++step, w.model, &w.optimizer, rl::trainer_state_head("grpo", w.optimizer));
  const double first_blocked = std::chrono::duration<double>(Clock::now() - first).count();
  writer.finish();
  for (auto _ : state) {
    const auto start = Clock::now();
    writer.save(++step, w.model, &w.optimizer, rl::trainer_state_head("grpo", w.optimizer));
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - start).count());
    writer.finish();  // (training would run its next steps here)
    write_s += writer.last_write_seconds();
  }
  state.counters["first_blocked_s"] = first_blocked;
  std::filesystem::remove_all(dir);
  state.counters["write_s"] = write_s / static_cast<double>(state.iterations());
  state.counters["params_M"] = static_cast<double>(w.model.num_params) / 1e6;
}
BENCHMARK(BM_CheckpointBlocked)->Arg(0)->Arg(1)->ArgName("background")->Iterations(3)->UseManualTime()->Unit(benchmark::kSecond);

}  // namespace

BENCHMARK_MAIN();
