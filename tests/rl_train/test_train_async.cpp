// --async one-step and full on one process (rl/grpo/async.h): each batch after the first is
// sampled by the weights one (full: max-staleness) update older than those it trains, on the
// synchronous run's data; the batches sampled ahead travel with a checkpoint, so a resumed run
// continues bit for bit.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>

#include "rl/grpo/train_config.h"
#include "runtime/error.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

namespace fs = std::filesystem;

struct Lines {
  std::vector<nlohmann::ordered_json> metrics;  // wall-clock figures and staleness removed
  std::vector<int64_t> staleness;               // -1: no field
  std::vector<int64_t> staleness_min;           // the same for the newest token's
  std::vector<double> staleness_mean;           // and the mean over tokens
  std::vector<std::string> trajectories;        // trajectories.jsonl, line by line
};

Lines read_run(const std::string& dir) {
  Lines out;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);
    out.staleness.push_back(j.contains("staleness") ? j["staleness"].get<int64_t>() : -1);
    out.staleness_min.push_back(j.contains("staleness_min") ? j["staleness_min"].get<int64_t>() : -1);
    out.staleness_mean.push_back(j.contains("staleness_mean") ? j["staleness_mean"].get<double>() : -1.0);
    j.erase("time"), j.erase("rollout"), j.erase("staleness"), j.erase("staleness_min"), j.erase("staleness_mean");
    out.metrics.push_back(j);
  }
  std::ifstream t(dir + "/trajectories.jsonl");
  while (std::getline(t, line)) out.trajectories.push_back(line);
  return out;
}

Lines run(const std::string& name, const std::string& async, double lr, int64_t steps, int64_t save_every = 0,
          int64_t max_staleness = 2) {
  TrainConfig c = toy_config(fresh_dir(name));
  c.async = async;
  c.max_staleness = max_staleness;
  c.lr = lr;
  c.max_steps = steps;
  c.save_every = save_every;
  TrainEnv env = toy_env(c);
  run_training(env, true);
  return read_run(c.out);
}

// The figures of a batch, not of its training: what the sampling weights and the draw decide.
nlohmann::ordered_json sampled(const nlohmann::ordered_json& m) {
  nlohmann::ordered_json s;
  for (const char* key : {"step", "data_position", "trajectories", "reward_mean", "reward_std", "ex",
                          "generated_tokens_mean"})
    if (m.contains(key)) s[key] = m[key];
  return s;
}

// With the weights frozen (lr 0) the lag changes nothing: the same draws, the same samples, the
// same losses. A batch paired with the wrong step, or drawn from the wrong cursor, fails here.
TEST(TrainAsync, OneStepWithFrozenWeightsIsTheSynchronousRun) {
  const Lines off = run("async_frozen_off", "off", 0.0, 3), one = run("async_frozen_one", "one-step", 0.0, 3);
  ASSERT_EQ(off.metrics.size(), 3u);
  EXPECT_EQ(off.staleness, (std::vector<int64_t>{-1, -1, -1})) << "the synchronous loop writes no staleness";
  EXPECT_EQ(one.staleness, (std::vector<int64_t>{0, 1, 1}));
  // Whole trajectories by one version: the newest token and the mean are as old as the oldest.
  EXPECT_EQ(one.staleness_min, one.staleness);
  EXPECT_EQ(one.staleness_mean, (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(off.staleness_min, (std::vector<int64_t>{-1, -1, -1}));
  for (size_t i = 0; i < off.metrics.size(); ++i) EXPECT_EQ(one.metrics[i], off.metrics[i]) << "step " << i + 1;
  EXPECT_EQ(one.trajectories, off.trajectories);
}

// Training for real: step 1 is the synchronous step (w0 samples and trains); step 2's batch was
// sampled by w0 too (the frozen run's step 2, sample for sample) but trains w1; step 3's by w1,
// not w0. Two runs write the same bytes.
TEST(TrainAsync, OneStepSamplesEachBatchWithTheWeightsBeforeTheLastUpdate) {
  const double lr = 1e-2;
  const Lines one = run("async_one", "one-step", lr, 3), again = run("async_one_again", "one-step", lr, 3);
  const Lines off = run("async_off", "off", lr, 3), frozen = run("async_frozen", "off", 0.0, 3);
  ASSERT_EQ(one.metrics.size(), 3u);
  EXPECT_EQ(one.metrics, again.metrics);
  EXPECT_EQ(one.trajectories, again.trajectories);
  EXPECT_EQ(one.metrics[0], off.metrics[0]);
  EXPECT_EQ(sampled(one.metrics[1]), sampled(frozen.metrics[1]));
  EXPECT_EQ(one.trajectories[1], frozen.trajectories[1]);
  EXPECT_NE(one.metrics[1], frozen.metrics[1]) << "step 2 trains w1, not w0: its loss differs";
  EXPECT_NE(one.trajectories[2], frozen.trajectories[2]) << "step 3's batch is sampled by w1";
  EXPECT_NE(one.trajectories[1], off.trajectories[1]) << "the synchronous step 2 samples with w1";
}

// Killed after the checkpoint of step 4 (steps 5-7 lost): the resumed run trains step 5 on the
// batch w3 sampled (kept in the checkpoint), not on one sampled again by w4, and ends on the
// uninterrupted run's bytes.
TEST(TrainAsync, ResumeTrainsOnTheBatchSampledAheadBitForBit) {
  using sql::testing::file_bytes;
  const int64_t total = 7;
  const Lines full = run("async_resume_full", "one-step", 1e-2, total, 2);
  const std::string full_dir = sql::testing::temp_dir() + "/async_resume_full";  // run()'s folder
  const std::string part = fresh_dir("async_resume_part");
  fs::copy(full_dir, part, fs::copy_options::recursive);
  for (int64_t s : {6, 7}) fs::remove_all(checkpoint_dir(part, s));
  const nlohmann::json state = nlohmann::json::parse(file_bytes(checkpoint_dir(part, 4) + "/trainer_state.json"));
  ASSERT_TRUE(state.contains("ahead"));
  ASSERT_EQ(state["ahead"].size(), 1u);     // one rank
  ASSERT_EQ(state["ahead"][0].size(), 1u);  // one batch ahead
  EXPECT_EQ(state["ahead"][0][0]["version"], 3);
  TrainConfig c = toy_config(part);
  c.async = "one-step", c.lr = 1e-2, c.max_steps = total, c.save_every = 2, c.resume = part;
  {
    TrainEnv env = toy_env(c);
    EXPECT_EQ(run_training(env, true).first_step, 4);
  }
  const Lines resumed = read_run(part);
  EXPECT_EQ(resumed.staleness, full.staleness);
  ASSERT_EQ(resumed.metrics.size(), full.metrics.size());
  for (size_t i = 0; i < full.metrics.size(); ++i) EXPECT_EQ(resumed.metrics[i], full.metrics[i]) << "step " << i + 1;
  EXPECT_EQ(resumed.trajectories, full.trajectories);
  EXPECT_TRUE(file_bytes(checkpoint_dir(part, total) + "/model.safetensors") ==
              file_bytes(checkpoint_dir(full_dir, total) + "/model.safetensors"))
      << "the final weights differ";
}

// --async full --max-staleness 2: two batches ahead, so the staleness climbs 0, 1, 2 and stays at
// the bound (batch t sampled by w(t-2)); with frozen weights that is the synchronous run. Killed
// after step 4's checkpoint (which keeps two batches, by w2 and w3), the run resumes onto the
// uninterrupted run's bytes.
TEST(TrainAsync, FullKeepsMaxStalenessBatchesAheadAndResumesBitForBit) {
  using sql::testing::file_bytes;
  const Lines frozen = run("async_full_frozen", "full", 0.0, 4), off = run("async_full_off", "off", 0.0, 4);
  EXPECT_EQ(frozen.staleness, (std::vector<int64_t>{0, 1, 2, 2}));
  EXPECT_EQ(frozen.metrics, off.metrics);
  EXPECT_EQ(frozen.trajectories, off.trajectories);
  const Lines three = run("async_full_k3", "full", 0.0, 5, 0, 3);
  EXPECT_EQ(three.staleness, (std::vector<int64_t>{0, 1, 2, 3, 3}));

  const int64_t total = 6;
  const Lines full = run("async_full", "full", 1e-2, total, 2);
  const Lines one = run("async_full_vs_one", "one-step", 1e-2, total);
  EXPECT_EQ(full.metrics[1], one.metrics[1]) << "step 2: w0 samples and w1 trains in both";
  EXPECT_NE(full.trajectories[2], one.trajectories[2]) << "step 3's batch: w0's, not w1's";
  const std::string full_dir = sql::testing::temp_dir() + "/async_full";
  const std::string part = fresh_dir("async_full_part");
  fs::copy(full_dir, part, fs::copy_options::recursive);
  fs::remove_all(checkpoint_dir(part, 6));
  const nlohmann::json state = nlohmann::json::parse(file_bytes(checkpoint_dir(part, 4) + "/trainer_state.json"));
  ASSERT_EQ(state["ahead"][0].size(), 2u);
  EXPECT_EQ(state["ahead"][0][0]["version"], 2);
  EXPECT_EQ(state["ahead"][0][1]["version"], 3);
  EXPECT_FALSE(state.contains("ahead_cursor")) << "two batches ahead have no one cursor before them";
  TrainConfig c = toy_config(part);
  c.async = "full", c.lr = 1e-2, c.max_steps = total, c.save_every = 2, c.resume = part;
  {
    TrainEnv env = toy_env(c);
    EXPECT_EQ(run_training(env, true).first_step, 4);
  }
  const Lines resumed = read_run(part);
  EXPECT_EQ(resumed.staleness, full.staleness);
  EXPECT_EQ(resumed.metrics, full.metrics);
  EXPECT_EQ(resumed.trajectories, full.trajectories);
  EXPECT_TRUE(file_bytes(checkpoint_dir(part, total) + "/model.safetensors") ==
              file_bytes(checkpoint_dir(full_dir, total) + "/model.safetensors"));

  // Another number of ranks could not take the batches: refused, not resumed with them skipped.
  fs::remove_all(checkpoint_dir(part, 6));
  const std::string path = checkpoint_dir(part, 4) + "/trainer_state.json";
  nlohmann::json two_ranks = state;
  two_ranks["ahead"].push_back(state["ahead"][0]);
  std::ofstream(path) << two_ranks.dump();
  TrainEnv env = toy_env(c);
  try {
    run_training(env, true);
    ADD_FAILURE() << "a full run's batches ahead of 2 ranks were skipped on 1";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("holds batches sampled ahead by 2 ranks; this run has 1"), std::string::npos)
        << e.what();
  }
}

// A damaged batch ahead in the checkpoint is refused naming the file and the field, before any step.
TEST(TrainAsync, ADamagedBatchAheadNamesItsField) {
  run("async_damaged", "one-step", 1e-2, 3, 2);
  const std::string dir = sql::testing::temp_dir() + "/async_damaged";
  fs::remove_all(checkpoint_dir(dir, 3));
  const std::string path = checkpoint_dir(dir, 2) + "/trainer_state.json";
  nlohmann::json state = nlohmann::json::parse(sql::testing::file_bytes(path));
  state["ahead"][0][0]["trajectories"][1].erase("turns");
  std::ofstream(path) << state.dump();
  TrainConfig c = toy_config(dir);
  c.async = "one-step", c.lr = 1e-2, c.max_steps = 3, c.save_every = 2, c.resume = dir;
  TrainEnv env = toy_env(c);
  try {
    run_training(env, true);
    ADD_FAILURE() << "a batch ahead without its turns was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("trainer_state.json: ahead[0][0].trajectories[1]: no field 'turns'"),
              std::string::npos) << e.what();
  }
}

TEST(TrainAsync, AnUnknownModeNamesTheRows) {
  TrainConfig c = toy_config(fresh_dir("async_bad"));
  c.async = "two-step";
  try {
    validate_config(c);
    ADD_FAILURE() << "async two-step was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("async 'two-step' is not one of off | one-step | full"), std::string::npos)
        << e.what();
  }
}

// time.overlap_s of each metrics line; -1: none.
std::vector<double> overlap_of(const std::string& dir) {
  std::vector<double> out;
  std::ifstream in(dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    out.push_back(j["time"].contains("overlap_s") ? j["time"]["overlap_s"].get<double>() : -1.0);
  }
  return out;
}

// --overlap-scoring scores the batches ahead on a thread of its own while the step trains; it
// changes no byte: metrics (wall-clock figures aside), trajectories, checkpoints (which hold
// those batches with their rewards) and final weights, for one-step and full alike. Scoring a
// batch after the step that needed it, or the wrong batch, or saving one unscored, fails here.
TEST(TrainAsync, OverlappedScoringChangesNoByte) {
  using sql::testing::file_bytes;
  for (const std::string async : {"one-step", "full"}) {
    std::string dirs[2];
    Lines lines[2];
    for (int on = 0; on < 2; ++on) {
      TrainConfig c = toy_config(fresh_dir(str_cat("async_overlap_", async, on)));
      c.async = async, c.lr = 1e-2, c.max_steps = 5, c.save_every = 2, c.overlap_scoring = on == 1;
      TrainEnv env = toy_env(c);
      run_training(env, true);
      dirs[on] = c.out, lines[on] = read_run(c.out);
    }
    ASSERT_EQ(lines[1].metrics.size(), 5u) << async;
    EXPECT_EQ(lines[1].metrics, lines[0].metrics) << async;
    EXPECT_EQ(lines[1].staleness, lines[0].staleness) << async;
    EXPECT_EQ(lines[1].trajectories, lines[0].trajectories) << async;
    // A checkpoint's batches ahead keep their wall-clock figures too (rollout seconds, score_seconds).
    auto state_of = [](const std::string& dir, int64_t s) {
      nlohmann::json j = nlohmann::json::parse(file_bytes(checkpoint_dir(dir, s) + "/trainer_state.json"));
      for (auto& rank : j["ahead"])
        for (auto& b : rank) {
          b.erase("rollout"), b.erase("score_seconds");
          for (auto& t : b["trajectories"]) {
            t.erase("decode_seconds"), t.erase("sql_seconds");
            for (auto& turn : t["turns"]) turn.erase("sql_seconds");
          }
        }
      return j;
    };
    for (int64_t s : {2, 4, 5}) {
      EXPECT_TRUE(state_of(dirs[1], s) == state_of(dirs[0], s)) << async << " step " << s;
      EXPECT_TRUE(file_bytes(checkpoint_dir(dirs[1], s) + "/model.safetensors") ==
                  file_bytes(checkpoint_dir(dirs[0], s) + "/model.safetensors"))
          << async << " step " << s;
    }
    const std::vector<double> off = overlap_of(dirs[0]), on = overlap_of(dirs[1]);
    EXPECT_EQ(off, std::vector<double>(5, -1.0)) << async << ": scored in turn, nothing overlapped";
    for (double x : on) EXPECT_GE(x, 0.0) << async << ": every step of an overlapped run reports its overlap";
  }
}

// The batch ahead is scored off the training thread, during the step: every env.score call of a
// batch sampled ahead comes from another thread, and it runs while the step trains. The two meet
// in a handshake, so that the thread scheduler cannot decide the outcome (a timed check flaked on
// a loaded 2-core CI machine, where the toy's millisecond step ended before the scoring thread
// first ran): step k's training waits at env.on_train_begin for batch k+1's scoring to start, and
// that scoring waits for step k's training to begin. Scoring joined before the step, or started
// after it, leaves one side waiting out its timeout, and the run reports no overlap. Off: every
// call on the training thread.
TEST(TrainAsync, TheBatchAheadIsScoredOnAnotherThreadWhileTheStepTrains) {
  constexpr auto kPatience = std::chrono::seconds(10);  // only a broken overlap waits this long
  for (int on = 0; on < 2; ++on) {
    TrainConfig c = toy_config(fresh_dir(str_cat("async_overlap_thread", on)));
    c.async = "one-step", c.lr = 1e-2, c.max_steps = 4, c.overlap_scoring = on == 1;
    TrainEnv env = toy_env(c);
    std::mutex mu;
    std::condition_variable cv;
    int64_t began = 0, scoring = 0;  // steps whose training began; batches ahead whose scoring began
    std::vector<std::string> missed;
    std::vector<bool> elsewhere;  // per env.score call: off the training thread
    const std::thread::id trainer = std::this_thread::get_id();
    env.score = [&, inner = env.score](const std::vector<sql::Example>& examples, std::vector<Trajectory>& trajs,
                                       std::vector<uint8_t>* ex) {
      const bool off_thread = std::this_thread::get_id() != trainer;
      elsewhere.push_back(off_thread);
      if (off_thread) {
        std::unique_lock lock(mu);
        const int64_t batch = ++scoring + 1;  // scored during step batch - 1
        cv.notify_all();
        if (!cv.wait_for(lock, kPatience, [&] { return began >= batch - 1; }))
          missed.push_back(str_cat("batch ", batch, "'s scoring never saw step ", batch - 1, " train"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // ends after the step began, by a margin
      inner(examples, trajs, ex);
    };
    if (on == 1)
      env.on_train_begin = [&] {
        std::unique_lock lock(mu);
        const int64_t step = ++began;
        cv.notify_all();
        if (step < c.max_steps && !cv.wait_for(lock, kPatience, [&] { return scoring >= step; }))
          missed.push_back(str_cat("step ", step, " trained without batch ", step + 1, "'s scoring"));
      };
    run_training(env, true);
    ASSERT_EQ(elsewhere.size(), 4u) << "one scoring per batch";
    EXPECT_FALSE(elsewhere[0]) << "step 1's own batch is needed at once";
    for (size_t i = 1; i < 4; ++i) EXPECT_EQ(elsewhere[i], on == 1) << "batch " << i + 1;
    EXPECT_EQ(missed, std::vector<std::string>{});
    const std::vector<double> overlap = overlap_of(c.out);
    ASSERT_EQ(overlap.size(), 4u);
    for (size_t i = 0; i < 3 && on == 1; ++i)
      EXPECT_GT(overlap[i], 0.0) << "step " << i + 1 << ": the batch ahead's scoring ran beside it";
  }
}

// --partial-rollout needs what it switches between: rollout ranks sampling ahead, one rollout per
// batch (no dynamic sampling); --partial-kv names its rows.
TEST(TrainAsync, PartialRolloutIsRefusedWhereNoUpdateArrivesMidRollout) {
  auto refusal = [](auto&& edit) {
    TrainConfig c = toy_config(fresh_dir("async_partial_bad"));
    c.partial_rollout = 8, c.rollout_ranks = 1, c.async = "full";
    edit(c);
    try {
      validate_config(c);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal([](TrainConfig&) {}), "accepted");
  EXPECT_NE(refusal([](TrainConfig& c) { c.rollout_ranks = 0; }).find("partial-rollout needs --rollout-ranks and --async "
                                                                     "one-step or full"), std::string::npos);
  EXPECT_NE(refusal([](TrainConfig& c) { c.async = "off"; }).find("got rollout-ranks 1, async off"), std::string::npos);
  EXPECT_NE(refusal([](TrainConfig& c) { c.dynamic_sampling = true; }).find("partial-rollout with --dynamic-sampling"),
            std::string::npos);
  EXPECT_NE(refusal([](TrainConfig& c) { c.partial_kv = "drop"; }).find("partial-kv 'drop' is not one of recompute | keep"),
            std::string::npos);
  EXPECT_NE(refusal([](TrainConfig& c) { c.partial_rollout = -1; }).find("partial-rollout must be >= 0"), std::string::npos);
}

}  // namespace
}  // namespace sqlrl::rl::testing
