// rl/checkpoint_writer.h: checkpoints written on a thread from a copy. The folder holds what was
// saved even when training changes the model right after save() returns, it equals the folder a
// write in the caller's thread makes, a failed write is raised at the next save or at finish(),
// best.json is written only once its checkpoint is in place, and keep-checkpoints deletes the
// oldest complete checkpoints but best.json's.
#include "rl/checkpoint_writer.h"

#include <filesystem>
#include <fstream>
#include <future>

#include "rl/grpo/train.h"
#include "rl/grpo/train_log.h"
#include "rl/run_folder.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

namespace fs = std::filesystem;

CheckpointWriterOptions writer_options(bool background, int64_t keep) {
  CheckpointWriterOptions o;
  o.background = background ? Choice::On : Choice::Off, o.keep = keep;
  return o;
}

QwenModel small_model() {
  TrainConfig c;
  c.tiny_hidden = 16, c.tiny_layers = 1, c.tiny_heads = 2, c.tiny_kv_heads = 1, c.tiny_head_dim = 8;
  c.tiny_intermediate = 16;
  return make_embedded_model(c, 400);
}

std::string tokenizer_dir(const std::string& name) {
  const std::string dir = fresh_dir(name);
  fs::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << toy_tokenizer_json();
  return dir;
}

// Every file of a checkpoint folder, by name.
std::map<std::string, std::string> folder_bytes(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    files[e.path().filename().string()] = sql::testing::file_bytes(e.path().string());
  return files;
}

// Catches a writer that writes from the live model or optimizer instead of its copy: training
// goes on (here: every weight and moment changed) the moment save() returns.
TEST(CheckpointWriter, TheBackgroundWriteHoldsWhatWasSavedAndEqualsAWriteInPlace) {
  const std::string tok = tokenizer_dir("cw_tok");
  QwenModel model = small_model();
  OptimizerState opt = make_optimizer_state(model.num_params);
  for (int64_t i = 0; i < model.num_params; ++i) opt.m[i] = 0.001f * static_cast<float>(i % 97), opt.v[i] = 1e-6f;
  opt.train_step = opt.adam_step = 2;
  const nlohmann::ordered_json state = trainer_state_head("grpo", opt);

  const std::string in_place = fresh_dir("cw_in_place"), background = fresh_dir("cw_background");
  {
    CheckpointWriter w(in_place, tok, writer_options(false, 0));
    w.save(2, model, &opt, state);
    w.finish();
  }
  // The write waits until training has moved on, so a writer reading the live model must fail.
  std::promise<void> moved_on;
  std::shared_future<void> moved = moved_on.get_future().share();
  CheckpointWriter w(background, tok, writer_options(true, 0));
  w.prepare(model.num_params, model.num_params, false);  // as train does: the copy's memory first
  w.set_before_write([moved] { moved.wait(); });
  bool after_saw_the_folder = false;
  const std::string folder = w.save(2, model, &opt, state, nullptr, [&](const std::string& f) {
    after_saw_the_folder = fs::exists(f + "/trainer_state.json") && fs::exists(f + "/model.safetensors");
  });
  for (float& p : model.params) p += 1.0f;  // the next steps, while the write goes on
  for (float& m : opt.m) m = -1.0f;
  moved_on.set_value();
  w.finish();
  EXPECT_TRUE(after_saw_the_folder) << "`after` ran before the checkpoint was in place";
  EXPECT_EQ(folder, checkpoint_dir(background, 2));
  EXPECT_EQ(folder_bytes(folder), folder_bytes(checkpoint_dir(in_place, 2)));
  EXPECT_GT(w.last_write_seconds(), 0.0);
}

// staged_optimizer: the caller fills the writer's own buffers (CUDA downloads the moments there),
// and the checkpoint holds them with the counters given, the same bytes as a save that copied
// them. Catches a staged_optimizer that hands the buffers out while the previous write still reads
// them (the caller would overwrite a checkpoint being written: the second fill lands in step 2's
// file here), and a save that drops or re-copies the staged state over itself.
TEST(CheckpointWriter, AStagedOptimizerIsWrittenWithoutACopyAndOnlyOnceThePreviousWriteEnded) {
  const std::string tok = tokenizer_dir("cw_staged_tok");
  QwenModel model = small_model();
  OptimizerState opt = make_optimizer_state(model.num_params);
  for (int64_t i = 0; i < model.num_params; ++i) opt.m[i] = 0.001f * static_cast<float>(i % 89), opt.v[i] = 2e-6f;
  opt.train_step = opt.adam_step = 2;
  const nlohmann::ordered_json state = trainer_state_head("grpo", opt);
  const std::string copied = fresh_dir("cw_copied"), staged = fresh_dir("cw_staged");
  {
    CheckpointWriter w(copied, tok, writer_options(true, 0));
    w.save(2, model, &opt, state);
    w.finish();
  }
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  CheckpointWriter w(staged, tok, writer_options(true, 0));
  OptimizerState& first = w.staged_optimizer(opt);
  first.m = opt.m, first.v = opt.v;
  EXPECT_EQ(first.adam_step, 2);
  w.set_before_write([released] { released.wait(); });
  w.save(2, model, &first, state);
  // The write of step 2 is held back; the next fill must wait for it to end.
  auto next = std::async(std::launch::async, [&] {
    OptimizerState& again = w.staged_optimizer(opt);
    for (float& m : again.m) m = -1.0f;  // step 3's moments
    return &again;
  });
  EXPECT_EQ(next.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "staged_optimizer returned while the previous write was still reading its buffers";
  release.set_value();
  EXPECT_EQ(next.get(), &first) << "the same buffers, reused";
  w.set_before_write({});
  w.finish();
  EXPECT_EQ(folder_bytes(checkpoint_dir(staged, 2)), folder_bytes(checkpoint_dir(copied, 2)));
}

// A write that fails (here "checkpoints" is a file, so no folder can be made in it) stops the run
// at the next save, naming the step and the run folder; the caller's thread never sees it
// otherwise.
TEST(CheckpointWriter, AFailedBackgroundWriteIsRaisedAtTheNextSave) {
  const std::string dir = fresh_dir("cw_fail");
  fs::create_directories(dir);
  std::ofstream(dir + "/checkpoints") << "not a folder";
  QwenModel model = small_model();
  OptimizerState opt = make_optimizer_state(model.num_params);
  CheckpointWriter w(dir, "", writer_options(true, 0));
  w.save(1, model, &opt, trainer_state_head("grpo", opt));  // returns: the write fails on the thread
  const std::string error = sqlrl::testing::error_of([&] { w.save(2, model, &opt, trainer_state_head("grpo", opt)); });
  EXPECT_NE(error.find("checkpoint step 1 of " + dir), std::string::npos) << error;
  EXPECT_NO_THROW(w.finish()) << "the error is raised once";
}

// keep-checkpoints 2: the two newest complete checkpoints stay, and the one best.json names
// (written from `after`, so it names a folder that exists); a folder without trainer_state.json
// (a crash's leftover of another kind) is not counted nor touched.
TEST(CheckpointWriter, KeepCheckpointsSparesTheNewestAndTheBest) {
  const std::string dir = fresh_dir("cw_keep");
  QwenModel model = small_model();
  OptimizerState opt = make_optimizer_state(model.num_params);
  CheckpointWriter w(dir, "", writer_options(true, 2));
  fs::create_directories(dir + "/checkpoints/step-0");  // incomplete: no trainer_state.json
  for (int64_t step = 1; step <= 5; ++step) {
    std::function<void(const std::string&)> after;
    if (step == 2) after = [dir](const std::string&) { write_best_json(dir, BestEval{2, 0.5}); };
    w.save(step, model, &opt, trainer_state_head("grpo", opt), nullptr, after);
  }
  w.finish();
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints")) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step-0", "step-2", "step-4", "step-5"}));
  EXPECT_TRUE(prune_checkpoints(dir, 0).empty()) << "0 keeps all";
}

// With weights-only checkpoints (save-optimizer-every), keep-checkpoints 1 still spares the newest
// resumable one: a run whose newest checkpoints hold weights only must stay resumable.
TEST(CheckpointWriter, KeepCheckpointsSparesTheNewestResumableOne) {
  const std::string dir = fresh_dir("cw_keep_resumable");
  QwenModel model = small_model();
  OptimizerState opt = make_optimizer_state(model.num_params);
  CheckpointWriter w(dir, "", writer_options(true, 1));
  for (int64_t step = 1; step <= 4; ++step)
    w.save(step, model, step == 2 ? &opt : nullptr, trainer_state_head("grpo", opt));
  w.finish();
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints")) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step-2", "step-4"}));
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/step-4/optimizer.safetensors"));
  EXPECT_EQ(latest_checkpoint(dir), checkpoint_dir(dir, 2));
}

}  // namespace
}  // namespace sqlrl::rl::testing
