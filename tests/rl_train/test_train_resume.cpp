// Resume: k steps, stop, resume, and steps k+1.. equal an uninterrupted run bit for bit (metrics
// apart from wall-clock times, trajectories, final weights and optimizer bytes). A crash's
// leftovers (a metrics line past the checkpoint, a half-written .tmp checkpoint) are dropped.
#include <fstream>
#include <nlohmann/json.hpp>

#include "rl/grpo/train_log.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

std::vector<std::string> metric_lines(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);
    j.erase("time"), j.erase("rollout");  // wall-clock figures (and decode_ms_per_step) differ from run to run
    out.push_back(j.dump());
  }
  return out;
}

TEST(TrainResume, ContinuesBitForBit) {
  const int64_t k = 3, total = 7;
  TrainConfig full = toy_config(fresh_dir("resume_full"));
  full.max_steps = total;
  full.save_every = 2;
  {
    TrainEnv env = toy_env(full);
    run_training(env, true);
  }
  TrainConfig part = toy_config(fresh_dir("resume_part"));
  part.max_steps = k;
  part.save_every = 2;
  {
    TrainEnv env = toy_env(part);
    run_training(env, true);
  }
  // A crash after step k: a metrics line of step k+1 without its checkpoint, a half checkpoint.
  {
    std::ofstream(part.out + "/metrics.jsonl", std::ios::app) << "{\"step\":" << k + 1 << ",\"reward_mean\":9}\n";
    std::filesystem::create_directories(part.out + "/checkpoints/.step-" + std::to_string(k + 1) + ".tmp");
  }
  EXPECT_EQ(latest_checkpoint(part.out), checkpoint_dir(part.out, k));
  TrainConfig again = part;
  again.resume = part.out;
  again.max_steps = total;
  {
    TrainEnv env = toy_env(again);
    TrainSummary s = run_training(env, true);
    EXPECT_EQ(s.first_step, k);
    EXPECT_EQ(s.last_step, total);
  }
  std::vector<std::string> a = metric_lines(full.out), b = metric_lines(part.out);
  ASSERT_EQ(a.size(), static_cast<size_t>(total));
  ASSERT_EQ(b.size(), static_cast<size_t>(total));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
  using sql::testing::file_bytes;
  EXPECT_EQ(file_bytes(full.out + "/trajectories.jsonl"), file_bytes(part.out + "/trajectories.jsonl"));
  std::string ca = checkpoint_dir(full.out, total), cb = checkpoint_dir(part.out, total);
  EXPECT_EQ(file_bytes(ca + "/model.safetensors"), file_bytes(cb + "/model.safetensors"));
  EXPECT_EQ(file_bytes(ca + "/optimizer.safetensors"), file_bytes(cb + "/optimizer.safetensors"));
  EXPECT_EQ(file_bytes(ca + "/trainer_state.json"), file_bytes(cb + "/trainer_state.json"));
  // The weights changed at all (else equality would prove nothing).
  EXPECT_NE(file_bytes(checkpoint_dir(full.out, 2) + "/model.safetensors"), file_bytes(ca + "/model.safetensors"));
}

// A run killed before its first checkpoint (config.toml and a logged step, no checkpoint) is not
// stuck: --resume starts it again from step 0 in its folder and ends where a fresh run does.
TEST(TrainResume, ARunWithoutACheckpointStartsAgainFromStepZero) {
  TrainConfig fresh = toy_config(fresh_dir("resume_nockpt_fresh"));
  fresh.max_steps = 2;
  {
    TrainEnv env = toy_env(fresh);
    run_training(env, true);
  }
  TrainConfig killed = toy_config(fresh_dir("resume_nockpt_killed"));
  killed.max_steps = 1;
  {
    TrainEnv env = toy_env(killed);
    run_training(env, true);
  }
  std::filesystem::remove_all(killed.out + "/checkpoints");  // the kill came before the save
  ASSERT_EQ(metric_lines(killed.out).size(), 1u);
  TrainConfig again = killed;
  again.resume = killed.out;
  again.max_steps = 2;
  {
    TrainEnv env = toy_env(again);
    TrainSummary s = run_training(env, true);
    EXPECT_EQ(s.first_step, 0);
    EXPECT_EQ(s.last_step, 2);
  }
  EXPECT_EQ(metric_lines(killed.out), metric_lines(fresh.out));  // the lost step's line is not kept twice
  using sql::testing::file_bytes;
  EXPECT_EQ(file_bytes(checkpoint_dir(killed.out, 2) + "/model.safetensors"),
            file_bytes(checkpoint_dir(fresh.out, 2) + "/model.safetensors"));
}

// --save-optimizer-every 2 with a checkpoint every step: steps 1 and 3 hold the weights only (the
// bytes a full checkpoint of that step holds), 2, 4 and the last carry the optimizer. A crash after
// step 3 (4 and 5 lost) resumes from step 2, the newest resumable one, not from the weights-only
// step 3, and ends on the uninterrupted run's bytes; resuming from step 3 itself is refused,
// naming step 2.
TEST(TrainResume, WeightsOnlyCheckpointsBetweenOptimizerSavesAreSkippedByResume) {
  using sql::testing::file_bytes;
  const int64_t total = 5;
  TrainConfig every = toy_config(fresh_dir("resume_optevery_all"));
  every.max_steps = total, every.save_every = 1;
  {
    TrainEnv env = toy_env(every);
    run_training(env, true);
  }
  TrainConfig c = toy_config(fresh_dir("resume_optevery"));
  c.max_steps = total, c.save_every = 1, c.save_optimizer_every = 2;
  {
    TrainEnv env = toy_env(c);
    run_training(env, true);
  }
  for (int64_t step = 1; step <= total; ++step) {
    const std::string dir = checkpoint_dir(c.out, step);
    EXPECT_EQ(std::filesystem::exists(dir + "/optimizer.safetensors"), step % 2 == 0 || step == total) << step;
    EXPECT_EQ(file_bytes(dir + "/model.safetensors"), file_bytes(checkpoint_dir(every.out, step) + "/model.safetensors"))
        << step;
  }
  const std::vector<std::string> whole = metric_lines(c.out);
  const std::string final_optimizer = file_bytes(checkpoint_dir(c.out, total) + "/optimizer.safetensors");
  std::filesystem::remove_all(checkpoint_dir(c.out, 4));
  std::filesystem::remove_all(checkpoint_dir(c.out, 5));
  EXPECT_EQ(latest_checkpoint(c.out), checkpoint_dir(c.out, 2));
  const std::string refused = sqlrl::testing::error_of([&] { resolve_checkpoint(checkpoint_dir(c.out, 3)); });
  EXPECT_NE(refused.find("weights only"), std::string::npos) << refused;
  EXPECT_NE(refused.find(checkpoint_dir(c.out, 2)), std::string::npos) << refused;
  TrainConfig again = c;
  again.resume = c.out;
  {
    TrainEnv env = toy_env(again);
    EXPECT_EQ(run_training(env, true).first_step, 2);
  }
  EXPECT_EQ(metric_lines(c.out), whole);
  EXPECT_EQ(file_bytes(checkpoint_dir(c.out, total) + "/optimizer.safetensors"), final_optimizer);
}

TEST(TrainResume, RefusesAnotherBatchSize) {
  TrainConfig c = toy_config(fresh_dir("resume_bs"));
  c.max_steps = 1;
  {
    TrainEnv env = toy_env(c);
    run_training(env, true);
  }
  c.resume = c.out;
  c.max_steps = 2;
  c.batch_size = 3;
  TrainEnv env = toy_env(c);
  try {
    run_training(env, true);
    FAIL() << "resumed with another batch size";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch-size 4"), std::string::npos) << e.what();
  }
}

TEST(TrainResume, RefusesAFolderThatHoldsARun) {
  TrainConfig c = toy_config(fresh_dir("resume_twice"));
  c.max_steps = 1;
  {
    TrainEnv env = toy_env(c);
    run_training(env, true);
  }
  TrainEnv env = toy_env(c);
  EXPECT_THROW(run_training(env, true), Error);
}

}  // namespace
}  // namespace sqlrl::rl::testing
