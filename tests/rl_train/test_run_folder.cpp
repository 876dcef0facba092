// rl/run_folder.h: one owner of a run folder for every trainer. The lock refuses a second
// holder by pid, checkpoints carry every tokenizer file of the source folder and replace an
// older one of the same step atomically, trainer_state.json files from before the version field
// still read, and JSONL logs are cut back to a resumed step.
#include "rl/run_folder.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "rl/grpo/train.h"
#include "rl/options.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

namespace fs = std::filesystem;

std::string made_dir(const std::string& name) {
  const std::string dir = fresh_dir(name);
  fs::create_directories(dir);
  return dir;
}

using sqlrl::testing::error_of;

TEST(RunFolder, ASecondHolderIsRefusedNamingThePid) {
  const std::string dir = fresh_dir("lock");
  {
    RunLock first = lock_run_folder(dir);
    // flock belongs to the open file, so a second open in this very process conflicts as another
    // process's would.
    const std::string err = error_of([&] { lock_run_folder(dir); });
    EXPECT_NE(err.find("run folder " + dir + " is in use by process " + std::to_string(::getpid())),
              std::string::npos) << err;
    RunLock moved = std::move(first);  // still held after a move
    EXPECT_NE(error_of([&] { lock_run_folder(dir); }), "");
  }
  EXPECT_EQ(error_of([&] { RunLock again = lock_run_folder(dir); }), "") << "released when its holder went away";
}

TEST(RunFolder, AFreshRunRefusesAFolderHoldingOne) {
  const std::string dir = made_dir("fresh");
  EXPECT_EQ(error_of([&] { check_no_run_in(dir, "hint"); }), "");
  std::ofstream(dir + "/metrics.jsonl") << "{\"step\": 1}\n";
  const std::string err = error_of([&] { check_no_run_in(dir, "continue it with --resume"); });
  EXPECT_NE(err.find("already holds a run; continue it with --resume"), std::string::npos) << err;
}

TEST(RunFolder, CheckpointsCarryEveryTokenizerFileAndReplaceAtomically) {
  const std::string dir = fresh_dir("ckpt"), src = made_dir("ckpt_tokenizer");
  std::ofstream(src + "/tokenizer.json") << toy_tokenizer_json();
  std::ofstream(src + "/tokenizer_config.json") << "{\"chat_template\": \"{{ x }}\"}";
  std::ofstream(src + "/special_tokens_map.json") << "{}";
  std::ofstream(src + "/unrelated.txt") << "not a tokenizer file";
  TrainConfig c;
  c.tiny_hidden = 16, c.tiny_layers = 1, c.tiny_heads = 2, c.tiny_kv_heads = 1, c.tiny_head_dim = 8;
  c.tiny_intermediate = 16;
  QwenModel model = make_embedded_model(c, 400);
  OptimizerState opt = make_optimizer_state(model.num_params);
  opt.train_step = 3, opt.adam_step = 3;
  nlohmann::ordered_json state = trainer_state_head("grpo", opt);
  state["seed"] = 9;
  const std::string ckpt = save_checkpoint(dir, 3, model, &opt, src + "/tokenizer.json", state);
  EXPECT_EQ(ckpt, checkpoint_dir(dir, 3));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
    EXPECT_EQ(sql::testing::file_bytes(ckpt + "/" + f), sql::testing::file_bytes(src + "/" + f)) << f;
  EXPECT_FALSE(fs::exists(ckpt + "/unrelated.txt"));
  // The same step again (a resumed run re-saving): the new content, no leftovers.
  state["seed"] = 10;
  save_checkpoint(dir, 3, model, &opt, src, state);  // the folder form of the tokenizer path
  EXPECT_EQ(read_trainer_state(ckpt, "grpo")["seed"], 10);
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints"))
    EXPECT_EQ(e.path().filename().string(), "step-3") << "left behind: " << e.path();
  EXPECT_EQ(latest_checkpoint(dir), ckpt);
  EXPECT_EQ(resolve_checkpoint(dir), ckpt);
  EXPECT_EQ(resolve_checkpoint(ckpt + "/"), ckpt);
}

// Moments that differ everywhere (a misplaced slice cannot go unnoticed), counters set.
OptimizerState numbered_state(int64_t n) {
  OptimizerState s = make_optimizer_state(n);
  for (int64_t i = 0; i < n; ++i) s.m[i] = 0.5f + static_cast<float>(i), s.v[i] = -static_cast<float>(i) * 0.25f;
  s.adam_step = 7, s.train_step = 5;
  return s;
}

// `world` ranks' shards of `full` (world 1: the one file), as the trainers write them.
void write_optimizer_state(const std::string& dir, const OptimizerState& full, int world) {
  const int64_t n = moments_size(full);
  fs::create_directories(dir);
  if (world == 1) return save_optimizer(full, dir + "/optimizer.safetensors");
  const std::vector<int64_t> b = shard_bounds(n, world);
  for (int r = 0; r < world; ++r)
    save_optimizer_shard(optimizer_slice_of(full, b[r], b[r + 1]), dir + "/" + optimizer_shard_name(r, world), b[r], n);
}

// ZeRO checkpoints of any world size resume on any other: every rank's slice of every layout
// reads back as that slice of the whole, whatever shards it straddles, in either precision.
// The resume rule is each option row's `resumable` attribute (runtime/options.h): train's rows
// that may change on resume are how far the run goes, where and how it runs, how it logs and
// checkpoints; a changed value of any other row is named, a changed resumable one is not.
// trainer_state.json: a line per field, whatever it holds (an --async checkpoint's batches ahead
// hold every sampled token: one line each when indented), and it reads back as written.
TEST(RunFolder, TrainerStateIsALinePerFieldAndReadsBack) {
  nlohmann::ordered_json state;
  state["version"] = 1;
  state["data_cursor"] = {{"level", 0}, {"recent_ex", {0.25, 0.5}}};
  state["ahead"] = nlohmann::ordered_json::array({nlohmann::ordered_json::array({{{"tokens", {1, 2, 3}}}})});
  const std::string text = trainer_state_text(state);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 5) << text;
  EXPECT_NE(text.find("\n  \"ahead\": [[{\"tokens\":[1,2,3]}]]\n}"), std::string::npos) << text;
  EXPECT_EQ(nlohmann::ordered_json::parse(text), state);
}

TEST(ResumeRule, TheRowsResumableAttributeDecides) {
  TrainConfig saved_config, asked_config;
  const OptionTable saved = config_fields(saved_config);
  std::set<std::string> resumable;
  for (const Option& o : saved)
    if (o.resumable) resumable.insert(o.key);
  EXPECT_EQ(resumable, (std::set<std::string>{
                           "out", "resume", "max-steps", "save-every", "log-trajectories", "tensorboard", "device",
                           "memory-gb", "bf16-moments", "recompute", "offload-optimizer", "override-safety",
                           "max-batch-sequences", "sql-timeout-ms", "sql-memory-mb", "grad-accum", "zero-stage",
                           "deterministic-reduce", "eval-every", "kv-cache-blocks", "rollout-mean-tokens",
                           "checkpoint-background", "keep-checkpoints", "save-optimizer-every", "rollout-ranks",
                           "overlap-scoring"}));
  asked_config.max_steps = 99, asked_config.device = "cuda", asked_config.sql_timeout_ms = 1;  // resumable
  EXPECT_TRUE(fixed_settings_changed(saved, config_fields(asked_config)).empty());
  asked_config.lr = 5e-7, asked_config.protocol = "mtsql", asked_config.sql_max_rows = 3;  // not
  EXPECT_EQ(fixed_settings_changed(saved, config_fields(asked_config)),
            (std::vector<std::string>{"protocol", "sql-max-rows", "lr"}));
  std::vector<bool> given(saved.size(), false);
  for (size_t i = 0; i < saved.size(); ++i)
    given[i] = std::string(saved[i].key) == "lr" || std::string(saved[i].key) == "max-steps";
  EXPECT_EQ(fixed_settings_given(saved, given), std::vector<std::string>{"lr"});
}

TEST(OptimizerShards, AnySliceLoadsFromTheShardsOfAnyWorldSize) {
  const int64_t n = 1000;  // not a multiple of the 64-element slice alignment
  const OptimizerState full = numbered_state(n);
  for (int written : {1, 3, 4}) {
    const std::string dir = fresh_dir("opt_shards_" + std::to_string(written));
    write_optimizer_state(dir, full, written);
    EXPECT_TRUE(has_optimizer_state(dir));
    for (int world : {1, 2, 3, 4, 5}) {
      const std::vector<int64_t> b = shard_bounds(n, world);
      for (int r = 0; r < world; ++r) {
        const OptimizerState got = load_optimizer_range(dir, n, b[r], b[r + 1]);
        const OptimizerState want = optimizer_slice_of(full, b[r], b[r + 1]);
        EXPECT_EQ(got.m, want.m) << written << " -> rank " << r << " of " << world;
        EXPECT_EQ(got.v, want.v) << written << " -> rank " << r << " of " << world;
        EXPECT_EQ(got.adam_step, 7);
        EXPECT_EQ(got.train_step, 5);
      }
    }
    OptimizerState bf16 = optimizer_slice_of(full, 100, 900);
    set_moment_precision(bf16, true);
    const OptimizerState got16 = load_optimizer_range(dir, n, 100, 900, true);
    EXPECT_EQ(got16.m16, bf16.m16);
    EXPECT_EQ(got16.v16, bf16.v16);
  }
}

// A shard set that is not one whole state is refused naming the file, never half-loaded.
TEST(OptimizerShards, AMissingOrDisagreeingShardIsNamed) {
  const int64_t n = 1000;
  const OptimizerState full = numbered_state(n);
  const std::string dir = fresh_dir("opt_shards_bad");
  write_optimizer_state(dir, full, 3);
  EXPECT_NE(error_of([&] { load_optimizer_range(dir, n + 1, 0, 10); }).find("holds moments of 1000 parameters"),
            std::string::npos);
  const std::vector<int64_t> b = shard_bounds(n, 3);
  OptimizerState later = optimizer_slice_of(full, b[2], b[3]);
  later.adam_step = 8;
  save_optimizer_shard(later, dir + "/" + optimizer_shard_name(2, 3), b[2], n);
  EXPECT_NE(error_of([&] { load_optimizer_range(dir, n, 0, n); }).find("at adam step 8"), std::string::npos);
  fs::remove(dir + "/" + optimizer_shard_name(1, 3));
  const std::string err = error_of([&] { load_optimizer_range(dir, n, 0, 10); });
  EXPECT_NE(err.find("optimizer-00001-of-00003.safetensors is missing"), std::string::npos) << err;
  write_optimizer_state(dir, full, 3);
  save_optimizer_shard(optimizer_slice_of(full, 0, 10), dir + "/" + optimizer_shard_name(0, 4), 0, n);
  EXPECT_NE(error_of([&] { load_optimizer_range(dir, n, 0, 10); }).find("shards of two world sizes"), std::string::npos);
}

// Three ranks save one checkpoint (threads standing in for processes): each writes its shard, and
// the folder appears only once rank 0 holds every one; a wait that is cancelled leaves no folder.
// A later owner clears what a dead run left half written, restoring a step-N moved aside.
TEST(OptimizerShards, ACheckpointIsCompleteOnlyOnceEveryRankHasWrittenItsShard) {
  const std::string dir = fresh_dir("ckpt_sharded");
  TrainConfig c;
  c.tiny_hidden = 16, c.tiny_layers = 1, c.tiny_heads = 2, c.tiny_kv_heads = 1, c.tiny_head_dim = 8;
  c.tiny_intermediate = 16;
  QwenModel model = make_embedded_model(c, 400);
  const int64_t n = model.num_params;
  const OptimizerState full = numbered_state(n);
  const std::vector<int64_t> b = shard_bounds(n, 3);
  auto shard = [&](int r) { return OptimizerShard{r, 3, b[r], n}; };
  auto slice = [&](int r) { return optimizer_slice_of(full, b[r], b[r + 1]); };
  const nlohmann::ordered_json state = trainer_state_head("grpo", full);
  const OptimizerState s0 = slice(0), s1 = slice(1), s2 = slice(2);
  save_checkpoint(dir, 4, model, &s1, "", state, nullptr, shard(1));
  std::thread owner([&] { save_checkpoint(dir, 4, model, &s0, "", state, nullptr, shard(0)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(fs::exists(checkpoint_dir(dir, 4))) << "complete before rank 2 wrote its shard";
  save_checkpoint(dir, 4, model, &s2, "", state, nullptr, shard(2));
  owner.join();
  const std::string ckpt = checkpoint_dir(dir, 4);
  EXPECT_TRUE(is_resumable_checkpoint(ckpt));
  EXPECT_EQ(latest_checkpoint(dir), ckpt);
  const OptimizerState back = load_optimizer_range(ckpt, n, 0, n);
  EXPECT_EQ(back.m, full.m);
  EXPECT_EQ(back.v, full.v);
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints"))
    EXPECT_EQ(e.path().filename().string(), "step-4") << "left behind: " << e.path();

  std::atomic<bool> cancel{true};
  save_checkpoint(dir, 5, model, &s1, "", state, nullptr, shard(1));
  const std::string err = error_of([&] { save_checkpoint(dir, 5, model, &s0, "", state, nullptr, shard(0), &cancel); });
  EXPECT_NE(err.find("waiting for the optimizer shards of ranks 2"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(checkpoint_dir(dir, 5)));
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/.step-5.tmp"));
  save_checkpoint(dir, 5, model, &s1, "", state, nullptr, shard(1));  // a shard the dead run left
  EXPECT_TRUE(fs::exists(dir + "/checkpoints/.step-5.shards/" + optimizer_shard_name(1, 3)));
  fs::rename(ckpt, dir + "/checkpoints/.step-4.old");  // a crash between save_checkpoint's renames
  remove_unfinished_checkpoints(dir);
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/.step-5.shards"));
  EXPECT_TRUE(is_resumable_checkpoint(ckpt));
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/.step-4.old"));
}

TEST(RunFolder, TrainerStateOfEveryVersionReadsAndAWrongOneIsRefusedByName) {
  const std::string dir = made_dir("states");
  auto write = [&](const std::string& text) {
    std::ofstream(dir + "/trainer_state.json") << text;
    return dir;
  };
  // Before the version field: GRPO wrote no "format", SFT "format": "sqlrl-sft" and "train_step".
  nlohmann::json grpo = read_trainer_state(write("{\"step\": 4, \"seed\": 1, \"batch_size\": 2}"), "grpo");
  EXPECT_EQ(grpo["step"], 4);
  EXPECT_EQ(grpo["version"], kTrainerStateVersion);
  nlohmann::json sft = read_trainer_state(write("{\"format\": \"sqlrl-sft\", \"train_step\": 7}"), "sft");
  EXPECT_EQ(sft["step"], 7);
  std::string err = error_of([&] { read_trainer_state(write("{\"format\": \"sqlrl-sft\", \"train_step\": 7}"), "grpo"); });
  EXPECT_NE(err.find(dir + "/trainer_state.json: a checkpoint of sft, not of grpo"), std::string::npos) << err;
  err = error_of([&] { read_trainer_state(write("{\"version\": 99, \"trainer\": \"grpo\", \"step\": 1}"), "grpo"); });
  EXPECT_NE(err.find("version 99 is newer"), std::string::npos) << err;
  err = error_of([&] { read_trainer_state(write("{\"version\": 1, \"trainer\": \"grpo\"}"), "grpo"); });
  EXPECT_NE(err.find("field 'step'"), std::string::npos) << err;
}

TEST(RunFolder, JsonlIsCutBackToTheResumedStep) {
  const std::string path = made_dir("jsonl") + "/metrics.jsonl";
  {
    JsonlWriter w(path);
    for (int s = 1; s <= 5; ++s) w.append("{\"step\": " + std::to_string(s) + "}");
  }
  std::ofstream(path, std::ios::app) << "{\"step\": 6, \"half a li";  // a crash mid-line
  std::ofstream(path, std::ios::app) << "\n" << std::string(100000, '[') << "\n";  // absurd nesting
  truncate_jsonl(path, 3);
  EXPECT_EQ(sql::testing::file_bytes(path), "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3}\n");
  // A step that is not an integer is an error naming the file and the line (it was a bare
  // "[json.exception.type_error.302] ...").
  std::ofstream(path, std::ios::app) << "{\"step\": \"x\"}\n";
  const std::string err = error_of([&] { truncate_jsonl(path, 3); });
  EXPECT_EQ(err.rfind(path + ":4: \"step\" is not an integer: {\"step\": \"x\"}", 0), 0u) << err;
}

// Resumed bits depend on the CPU GEMMs' thread count (runtime/gemm.h): a checkpoint records it and
// a resume under another count says so, with the setting that reproduces the run.
TEST(RunFolder, ResumeUnderOtherBlasThreadsSaysSo) {
  OptimizerState optimizer;
  const nlohmann::ordered_json head = trainer_state_head("grpo", optimizer);
  ASSERT_TRUE(head.contains("blas_threads")) << head.dump();
  nlohmann::json saved = nlohmann::json::parse(head.dump());
  EXPECT_EQ(blas_threads_note(saved, "ck"), "");
  const int64_t now = saved["blas_threads"].get<int64_t>();
  saved["blas_threads"] = now + 3;
  EXPECT_EQ(blas_threads_note(saved, "ck"),
            str_cat("resume: ck was trained with ", now + 3, " OpenBLAS threads, this process has ",
                    now == 0 ? std::string("thread-independent GEMMs") : str_cat(now, " OpenBLAS threads"),
                    ": the CPU GEMMs sum in another order, so the steps from here differ in the last bits from a run "
                    "never interrupted (OPENBLAS_NUM_THREADS=", now + 3, " reproduces them)"));
  saved.erase("blas_threads");  // checkpoints from before the field
  EXPECT_EQ(blas_threads_note(saved, "ck"), "");
}

// Every command that takes --weights finds the tokenizer beside them, as --help says (generate
// demanded --tokenizer). Catches a resolver that ignores the weights folder, takes the folder
// of a weights file wrongly, or accepts a --tokenizer that does not exist.
TEST(ModelTokenizerPath, BesideTheWeightsUnlessGiven) {
  const std::string weights = made_dir("tok_beside_weights"), other = made_dir("tok_elsewhere");
  std::ofstream(weights + "/model.safetensors") << "x";
  ModelOptions o;
  o.weights = weights;
  EXPECT_EQ(model_tokenizer_path(o), "");  // none there yet
  std::ofstream(weights + "/tokenizer.json") << "{}";
  EXPECT_EQ(model_tokenizer_path(o), weights + "/tokenizer.json");
  o.weights = weights + "/model.safetensors";  // a file: its folder
  EXPECT_EQ(model_tokenizer_path(o), weights + "/tokenizer.json");
  std::ofstream(other + "/tokenizer.json") << "{}";
  o.tokenizer = other;  // a folder given: its tokenizer.json, not the weights'
  EXPECT_EQ(model_tokenizer_path(o), other + "/tokenizer.json");
  o.tokenizer = other + "/missing.json";
  EXPECT_NE(error_of([&] { model_tokenizer_path(o); }).find("tokenizer: no such file: " + other + "/missing.json"),
            std::string::npos);
}

}  // namespace
}  // namespace sqlrl::rl::testing
