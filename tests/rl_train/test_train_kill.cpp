// kill -9 fault injection (issue 24): `train` and `sft` are killed with SIGKILL at several moments
// (a delay drawn from a fixed seed after the run's next metrics line, or the instant a
// checkpoint's .tmp folder appears, i.e. inside a checkpoint write), then continued (--resume, or the same command when no checkpoint
// was complete yet) until they finish; the final weights, AdamW moments and metrics must be the
// bytes of an uninterrupted run. From the SFT-trained tiny fixture, so every step trains.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <functional>
#include <optional>
#include <random>

#include "rl/run_folder.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int64_t count_lines(const std::string& path) {
  std::ifstream in(path);
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// Every process of session `sid` (a job: mpirun and the ranks it forked, each in a process group
// of its own but all in mpirun's session), SIGKILLed at once, as a machine that loses power.
void kill_session(pid_t sid) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid != sid && getsid(pid) == sid) kill(pid, SIGKILL);
  }
  kill(sid, SIGKILL);
}

// Runs `args` (argv without the binary; under `launcher`, e.g. mpirun -np 2, when not empty) in a
// session of its own; kills the session with SIGKILL `delay_ms` after DIR/metrics.jsonl gained a
// line (progress, not wall time: a fixed delay measured on one machine lets a faster one finish
// first), or as soon as a checkpoint's .tmp (or, sharded, .shards) folder exists when
// `at_checkpoint`. Returns true when it was killed (false: it finished first, exit code 0 expected).
bool run_and_kill(const std::vector<std::string>& args, const std::string& dir, int delay_ms, bool at_checkpoint,
                  const std::vector<std::string>& launcher = {}) {
  const int64_t lines_at_start = dir.empty() ? 0 : count_lines(dir + "/metrics.jsonl");
  std::optional<Clock::time_point> progressed;
  // The run's errors, shown when it fails on its own (a kill leaves nothing worth reading).
  const std::string err = sqlrl::testing::process_temp_path("sqlrl_kill_stderr").string();
  pid_t pid = fork();
  if (pid == 0) {
    setsid();
    if (!freopen("/dev/null", "w", stdout) || !freopen(err.c_str(), "w", stderr)) _exit(126);
    std::vector<char*> argv;
    for (const std::string& a : launcher) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(const_cast<char*>(SQLRL_BINARY));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  for (;;) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "a run ended on its own with status " << status << ":\n" << sql::testing::file_bytes(err);
      return false;
    }
    if (!at_checkpoint && !dir.empty() && !progressed && count_lines(dir + "/metrics.jsonl") > lines_at_start)
      progressed = Clock::now();
    bool fire = progressed && Clock::now() - *progressed >= std::chrono::milliseconds(delay_ms);
    if (at_checkpoint && fs::exists(dir + "/checkpoints")) {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(dir + "/checkpoints", ec)) {
        const std::string f = e.path().filename().string();
        if (f.ends_with(".tmp") || f.ends_with(".shards")) fire = true;
      }
    }
    if (fire) {
      kill_session(pid);
      waitpid(pid, &status, 0);
      return true;
    }
    usleep(at_checkpoint ? 200 : 1000);
  }
}

std::vector<std::string> metric_lines(const std::string& path, const std::vector<std::string>& drop) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);
    for (const std::string& k : drop) j.erase(k);
    out.push_back(j.dump());
  }
  return out;
}

// The shortest time/step_s of a run's metrics.jsonl, in ms (INT64_MAX when no line has one).
int64_t fastest_step_ms(const std::string& run) {
  std::ifstream in(run + "/metrics.jsonl");
  int64_t best = INT64_MAX;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("time") && j["time"].contains("step_s"))
      best = std::min(best, static_cast<int64_t>(j["time"]["step_s"].get<double>() * 1000));
  }
  return best;
}

struct Job {
  std::function<std::vector<std::string>()> next;  // the command that starts or continues the run in DIR
  int64_t steps;
  std::vector<std::string> volatile_fields;        // wall-clock figures in metrics lines
  std::vector<std::string> launcher = {};          // mpirun and its flags; empty: one process
  int sharded_world = 1;                           // ZeRO 1-3 on N ranks: N optimizer shards
};

// Kills the job `kills` times (alternating a seeded delay after a step and a checkpoint write),
// continues it each time, and compares the end with an uninterrupted run in `ref`.
void kill_and_compare(const Job& job, const std::string& dir, const std::string& ref, int kills, int64_t full_ms) {
  std::mt19937 rng(20261124);
  int killed = 0, in_checkpoint = 0;
  for (int k = 0; k < kills + 20 && killed < kills; ++k) {
    std::vector<std::string> args = job.next();
    const bool at_checkpoint = k % 2 == 1;
    // Within a step of the one that was just logged: the uninterrupted run's fastest step where
    // its metrics time the steps (an average would count the start and a first step that samples
    // the batches ahead, and a kill that long after a later step may come after the run's end).
    const int64_t per_step = std::max<int64_t>(10, std::min(full_ms / job.steps, fastest_step_ms(ref)));
    const int delay = static_cast<int>(std::uniform_int_distribution<int64_t>(0, per_step)(rng));
    if (!run_and_kill(args, dir, delay, at_checkpoint, job.launcher)) break;  // it finished before the kill
    ++killed;
    in_checkpoint += at_checkpoint;
  }
  // Continue to the end without a kill.
  for (int k = 0; k < 3 && latest_checkpoint(dir) != checkpoint_dir(dir, job.steps); ++k) {
    run_and_kill(job.next(), dir, 1 << 30, false, job.launcher);
  }
  std::printf("kill -9: %d kills (%d while a checkpoint .tmp existed), then finished\n", killed, in_checkpoint);
  EXPECT_GE(killed, 2) << "the runs finished before most kills: the test did not test";
  const std::string a = checkpoint_dir(dir, job.steps), b = checkpoint_dir(ref, job.steps);
  ASSERT_TRUE(fs::exists(a)) << "the killed run never finished";
  EXPECT_TRUE(sql::testing::file_bytes(a + "/model.safetensors") == sql::testing::file_bytes(b + "/model.safetensors"));
  expect_same_optimizer(a, b, job.sharded_world, "the AdamW moments");
  EXPECT_EQ(metric_lines(dir + "/metrics.jsonl", job.volatile_fields),
            metric_lines(ref + "/metrics.jsonl", job.volatile_fields));
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints"))
    EXPECT_FALSE(e.path().filename().string().starts_with(".")) << "left behind: " << e.path().string();
}

int64_t timed_run_ms(const std::vector<std::string>& args, const std::vector<std::string>& launcher = {}) {
  const auto start = Clock::now();
  run_and_kill(args, "", 1 << 30, false, launcher);
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

TEST(KillNine, TrainResumesToTheBytesOfAnUninterruptedRun) {
  const std::string ref = fresh_dir("kill_train_ref"), dir = fresh_dir("kill_train");
  auto args = [](const std::string& out) {
    return std::vector<std::string>{"train", "--config", "tiny", "--weights",
                                    std::string(SQLRL_FIXTURES_DIR) + "/sft_tiny", "--max-steps", "6",
                                    "--batch-size", "2", "--group-size", "4", "--max-turn-tokens", "64",
                                    "--save-every", "1", "--out", out};
  };
  const int64_t full_ms = timed_run_ms(args(ref));
  ASSERT_TRUE(fs::exists(checkpoint_dir(ref, 6)));
  // Once its config.toml exists the folder is a run: --resume continues it (from step 0 when
  // no checkpoint was complete); before that the first command starts it again.
  Job job{[&] {
            return fs::exists(dir + "/config.toml") ? std::vector<std::string>{"train", "--resume", dir} : args(dir);
          },
          6, {"time", "rollout"}};
  kill_and_compare(job, dir, ref, 4, full_ms);
}

TEST(KillNine, SftResumesToTheBytesOfAnUninterruptedRun) {
  const std::string base = fresh_dir("kill_sft_data");
  fs::create_directories(base);
  const std::string demos = base + "/demos.jsonl";
  CliRun d = run_command(std::string(SQLRL_BINARY) + " sft synth-demos --protocol skyrl --out " + demos, "kill_demos");
  ASSERT_EQ(d.rc, 0) << d.err;
  const std::string ref = fresh_dir("kill_sft_ref"), dir = fresh_dir("kill_sft");
  auto args = [&](const std::string& out) {
    return std::vector<std::string>{"sft", "--weights", std::string(SQLRL_FIXTURES_DIR) + "/sft_tiny", "--data", demos,
                                    "--lr", "1e-3", "--max-steps", "8", "--micro-batch-tokens", "4096",
                                    "--save-every", "1", "--out", out};
  };
  const int64_t full_ms = timed_run_ms(args(ref));
  ASSERT_TRUE(fs::exists(checkpoint_dir(ref, 8)));
  // With a complete checkpoint --resume continues; before one, the same command starts again
  // from update 0 (sft's rule for a folder whose run stopped before its first checkpoint).
  Job job{[&] {
            return latest_checkpoint(dir).empty() ? args(dir) : std::vector<std::string>{"sft", "--resume", dir};
          },
          8, {"seconds", "tokens_per_s"}};
  kill_and_compare(job, dir, ref, 4, full_ms);
}

// A ZeRO-3 job of two ranks (mpirun), killed whole (mpirun and both ranks at once) after steps
// and while a sharded checkpoint is being written (rank 1's shard in .step-N.shards, rank 0's
// folder in .step-N.tmp, on their background writers), then resumed by the same job: the run
// must end on the bytes of the uninterrupted job, moments shard by shard. Catches a resume that
// takes a half-written shard set for a checkpoint, a stale shard left from the killed write read
// into the next, and a .step-N.old lost between save_checkpoint's two renames.
TEST(KillNine, ShardedTrainJobResumesToTheBytesOfAnUninterruptedJob) {
  if (std::string(SQLRL_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  const std::vector<std::string> mpirun{SQLRL_MPIEXEC, "-np", "2", "--oversubscribe"};
  const std::string ref = fresh_dir("kill_zero3_ref"), dir = fresh_dir("kill_zero3");
  auto args = [](const std::string& out) {
    return std::vector<std::string>{"train", "--config", "tiny", "--weights",
                                    std::string(SQLRL_FIXTURES_DIR) + "/sft_tiny", "--max-steps", "4",
                                    "--batch-size", "4", "--group-size", "4", "--max-turn-tokens", "64",
                                    "--zero-stage", "3", "--save-every", "1", "--out", out};
  };
  const int64_t full_ms = timed_run_ms(args(ref), mpirun);
  ASSERT_TRUE(fs::exists(checkpoint_dir(ref, 4)));
  ASSERT_TRUE(fs::exists(checkpoint_dir(ref, 4) + "/" + optimizer_shard_name(1, 2))) << "not a sharded checkpoint";
  Job job{[&] {
            return fs::exists(dir + "/config.toml") ? std::vector<std::string>{"train", "--resume", dir} : args(dir);
          },
          4, {"time", "rollout"}, mpirun, 2};
  kill_and_compare(job, dir, ref, 3, full_ms);
}

// A job of one trainer and one rollout rank (--rollout-ranks 1) two batches ahead (--async full
// --max-staleness 2), killed whole after steps and inside checkpoint writes, then resumed: the
// checkpoint must carry both batches sampled ahead (the trainer's), and the rollout rank must
// take up sampling where the trainer's checkpoint says, or the run leaves the uninterrupted
// job's bytes.
TEST(KillNine, RolloutRanksJobTwoBatchesAheadResumesToTheBytesOfAnUninterruptedJob) {
  if (std::string(SQLRL_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  const std::vector<std::string> mpirun{SQLRL_MPIEXEC, "-np", "2", "--oversubscribe"};
  const std::string ref = fresh_dir("kill_rollout_ref"), dir = fresh_dir("kill_rollout");
  auto args = [](const std::string& out) {
    return std::vector<std::string>{"train", "--config", "tiny", "--weights",
                                    std::string(SQLRL_FIXTURES_DIR) + "/sft_tiny", "--max-steps", "5",
                                    "--batch-size", "4", "--group-size", "4", "--max-turn-tokens", "64",
                                    "--rollout-ranks", "1", "--async", "full", "--max-staleness", "2",
                                    "--save-every", "1", "--out", out};
  };
  const int64_t full_ms = timed_run_ms(args(ref), mpirun);
  ASSERT_TRUE(fs::exists(checkpoint_dir(ref, 5)));
  Job job{[&] {
            return fs::exists(dir + "/config.toml") ? std::vector<std::string>{"train", "--resume", dir} : args(dir);
          },
          5, {"time", "rollout"}, mpirun};
  kill_and_compare(job, dir, ref, 3, full_ms);
}

}  // namespace
}  // namespace sqlrl::rl::testing
