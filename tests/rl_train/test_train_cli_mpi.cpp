// `mpirun -np N llm_sqlrl train` as a user runs it (issue 23): from a briefly SFT-trained tiny
// checkpoint (tests/fixtures/sft_tiny, tools/make_sft_tiny_fixture.sh; its groups have reward
// variance, so the updates are real), two ranks write the bytes one process writes with
// --grad-accum 2; only rank 0 writes the run folder; a failing or killed rank ends the job with
// its rank named, in bounded time. Skipped when the build has no MPI.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/model_cuda/model_cuda_util.h"
#include "weights/safetensors.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

namespace fs = std::filesystem;

#define SQLRL_REQUIRE_MPI()                                                     \
  do {                                                                          \
    if (std::string(SQLRL_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI"; \
  } while (0)

// As root (CI containers) Open MPI needs the two ALLOW variables; --oversubscribe: 2 ranks on
// whatever cores the machine has; no single-copy (containers forbid its ptrace); no leak check
// in the sanitizer build (Open MPI keeps allocations until exit: tests/CMakeLists.txt).
std::string mpirun(int np) {
  return str_cat("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none ",
                 "ASAN_OPTIONS=detect_leaks=0 ", SQLRL_MPIEXEC, " -np ", np, " --oversubscribe ");
}

std::string fixture_args(int steps = 2, const std::string& weights = std::string(SQLRL_FIXTURES_DIR) + "/sft_tiny") {
  return str_cat("--config tiny --weights ", weights, " --max-steps ", steps, " --batch-size 4 ",
                 "--group-size 6 --max-turn-tokens 96 ");
}

std::string bytes(const std::string& path) { return sql::testing::file_bytes(path); }

// Checkpoint `step` of two run folders holds the same weights, byte for byte, and AdamW moments
// (`a` written as ZeRO shards by `sharded_world` ranks, or the same file bytes).
void expect_same_checkpoint(const std::string& a, const std::string& b, int step, int sharded_world = 1) {
  const std::string ck = "/checkpoints/step-" + std::to_string(step);
  EXPECT_TRUE(bytes(a + ck + "/model.safetensors") == bytes(b + ck + "/model.safetensors")) << "weights, step " << step;
  expect_same_optimizer(a + ck, b + ck, sharded_world, str_cat("moments, step ", step));
}

std::vector<nlohmann::json> metric_lines(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(TrainCliMpi, TwoRanksWriteTheBytesOfGradAccumTwo) {
  SQLRL_REQUIRE_MPI();
  const std::string dp = fresh_dir("cli_mpi_np2"), one = fresh_dir("cli_mpi_accum2");
  CliRun a = run_command(mpirun(2) + SQLRL_BINARY + " train " + fixture_args() + "--save-every 1 --zero-stage 1 --out " + dp, "np2");
  ASSERT_EQ(a.rc, 0) << a.err;
  CliRun b = run_command(std::string(SQLRL_BINARY) + " train " + fixture_args() + "--save-every 1 --grad-accum 2 --out " + one, "acc2");
  ASSERT_EQ(b.rc, 0) << b.err;
  for (int step = 1; step <= 2; ++step) expect_same_checkpoint(dp, one, step, 2);
  // Real updates, logged once (rank 0), for the whole job's trajectories.
  std::vector<nlohmann::json> m = metric_lines(dp);
  ASSERT_EQ(m.size(), 2u);
  int64_t kept = 0;
  for (const auto& j : m) {
    kept += j["filtered"]["kept"].get<int64_t>();
    EXPECT_EQ(j["trajectories"], 24);
  }
  EXPECT_GT(kept, 0) << "no trajectory trained: the comparison would be vacuous";
  EXPECT_GT(m[0]["grad_norm"].get<double>() + m[1]["grad_norm"].get<double>(), 0.0);
  EXPECT_EQ(m[0]["filtered"], metric_lines(one)[0]["filtered"]);
  // Progress lines come from rank 0 only.
  size_t lines = 0;
  for (size_t at = 0; (at = a.out.find("step 1/2", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 1u) << a.out;
  EXPECT_NE(a.out.find("rank 0 of 2 (mpirun)"), std::string::npos) << a.out;
}

// --async one-step (rl/grpo/async.h) on 2 ranks: each rank samples its share of the next batch
// ahead and keeps it in the checkpoint; the job writes what one process with --grad-accum 2
// writes, and a job killed after step 2 resumes onto the same step 3 (each rank takes its own
// batch ahead back).
TEST(TrainCliMpi, AsyncOneStepOnTwoRanksWritesTheBytesOfGradAccumTwoAndResumes) {
  SQLRL_REQUIRE_MPI();
  const std::string dp = fresh_dir("cli_mpi_async_np2"), one = fresh_dir("cli_mpi_async_accum2");
  const std::string args = fixture_args(3) + "--async one-step --save-every 1 --out ";
  CliRun a = run_command(mpirun(2) + SQLRL_BINARY + " train " + args + dp, "async_np2");
  ASSERT_EQ(a.rc, 0) << a.err;
  CliRun b = run_command(std::string(SQLRL_BINARY) + " train " + args + one + " --grad-accum 2", "async_acc2");
  ASSERT_EQ(b.rc, 0) << b.err;
  for (int step = 1; step <= 3; ++step) expect_same_checkpoint(dp, one, step);
  const std::vector<nlohmann::json> m = metric_lines(dp);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0]["staleness"], 0);
  EXPECT_EQ(m[2]["staleness"], 1);
  const nlohmann::json state = nlohmann::json::parse(bytes(dp + "/checkpoints/step-2/trainer_state.json"));
  ASSERT_EQ(state["ahead"].size(), 2u) << "one list of batches ahead per rank";
  const std::string killed = fresh_dir("cli_mpi_async_killed");
  fs::copy(dp, killed, fs::copy_options::recursive);
  fs::remove_all(killed + "/checkpoints/step-3");
  CliRun r = run_command(mpirun(2) + SQLRL_BINARY + " train --resume " + killed, "async_resume");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(bytes(killed + "/checkpoints/step-3/model.safetensors") == bytes(dp + "/checkpoints/step-3/model.safetensors"))
      << "the resumed step 3 did not train on the batches sampled ahead";
}

// metrics.jsonl without its wall-clock figures ("time", the rollout's rates): what two runs of one
// seed and layout must log alike. Without "mismatch" too (trained): the sampler-vs-trainer figures
// of one process with --grad-accum 2 differ from 2 ranks' in their last bits (their sums are
// grouped by process), the weights and every other figure do not.
std::vector<nlohmann::json> untimed_metrics(const std::string& dir, bool trained = false) {
  std::vector<nlohmann::json> m = metric_lines(dir);
  for (nlohmann::json& j : m) {
    j.erase("time"), j.erase("rollout");
    if (trained) j.erase("mismatch");
  }
  return m;
}

// Run `a` without its checkpoint of step `last`, as a job killed after the one before, resumed by
// `np` ranks: it must write that checkpoint and `a`'s metrics again (the batches sampled ahead
// taken back from the checkpoint, bit for bit).
void expect_resume_rewrites(const std::string& a, const std::string& killed, int last, int np, const std::string& name) {
  fs::copy(a, killed, fs::copy_options::recursive);
  fs::remove_all(str_cat(killed, "/checkpoints/step-", last));
  CliRun r = run_command(mpirun(np) + SQLRL_BINARY + " train --resume " + killed, name);
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_same_checkpoint(killed, a, last);
  EXPECT_EQ(untimed_metrics(killed), untimed_metrics(a));
}

// --rollout-ranks (rl/grpo/rollout_ranks.h): of 3 ranks the last only rolls out and the first two
// only train; it samples each trainer's share as that trainer would, so the job writes the bytes
// of the two trainers run alone (mpirun -np 2, which writes those of --grad-accum 2: above), and
// logs how long each side waited.
TEST(TrainCliMpi, RolloutRanksWriteTheBytesOfTheTrainersAlone) {
  SQLRL_REQUIRE_MPI();
  const std::string split = fresh_dir("cli_mpi_rollout_off"), two = fresh_dir("cli_mpi_rollout_off_np2");
  const std::string args = fixture_args(2) + "--save-every 1 --out ";
  CliRun a = run_command(mpirun(3) + SQLRL_BINARY + " train --rollout-ranks 1 " + args + split, "rollout_off");
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_NE(a.out.find("ranks 0-1 train 4/2 of every step's prompts each, rank 2 rolls them out"), std::string::npos)
      << a.out;
  CliRun b = run_command(mpirun(2) + SQLRL_BINARY + " train " + args + two, "rollout_off_np2");
  ASSERT_EQ(b.rc, 0) << b.err;
  for (int step = 1; step <= 2; ++step) expect_same_checkpoint(split, two, step);
  EXPECT_EQ(untimed_metrics(split), untimed_metrics(two));
  EXPECT_EQ(bytes(split + "/trajectories.jsonl"), bytes(two + "/trajectories.jsonl"));
  const std::vector<nlohmann::json> m = metric_lines(split);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[1]["trajectories"], 24);
  for (const char* key : {"trainer_idle_s", "trainer_idle_fraction", "rollout_idle_s", "rollout_idle_fraction", "weight_sync_s"})
    EXPECT_TRUE(m[0]["time"].contains(key)) << key;
  // Synchronous: the trainers wait for every batch, the rollout rank for every update.
  EXPECT_GT(m[1]["time"]["trainer_idle_fraction"].get<double>(), 0.0);
  EXPECT_GT(m[1]["time"]["rollout_idle_s"].get<double>(), 0.0);
  EXPECT_FALSE(metric_lines(two)[0]["time"].contains("trainer_idle_s"));
}

// --async one-step with a rollout rank: step s+1 is sampled while step s trains, by the weights
// step s started from, which is what one process with --async one-step computes; a second run
// writes the same bytes, and a job killed after step 2 resumes onto the same step 3 (the
// checkpoint holds the trainers' batches sampled ahead; the rollout rank reads nothing of it).
TEST(TrainCliMpi, RolloutRanksOneStepAheadRepeatAndResumeBitForBit) {
  SQLRL_REQUIRE_MPI();
  const std::string root = fresh_dir("cli_mpi_rollout_async");
  const std::string a = root + "/a", again = root + "/again", one = root + "/one", killed = root + "/killed";
  const std::string args = fixture_args(3) + "--async one-step --save-every 1 --out ";
  const std::string split = mpirun(3) + SQLRL_BINARY + " train --rollout-ranks 1 " + args;
  CliRun r1 = run_command(split + a, "rollout_async");
  ASSERT_EQ(r1.rc, 0) << r1.err;
  CliRun r2 = run_command(split + again, "rollout_async_again");
  ASSERT_EQ(r2.rc, 0) << r2.err;
  CliRun r3 = run_command(std::string(SQLRL_BINARY) + " train --grad-accum 2 " + args + one, "rollout_async_one");
  ASSERT_EQ(r3.rc, 0) << r3.err;
  for (int step = 1; step <= 3; ++step) {
    expect_same_checkpoint(a, again, step);
    expect_same_checkpoint(a, one, step);
  }
  EXPECT_EQ(untimed_metrics(a), untimed_metrics(again));
  EXPECT_EQ(untimed_metrics(a, true), untimed_metrics(one, true));
  const std::vector<nlohmann::json> m = metric_lines(a);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0]["staleness"], 0);
  EXPECT_EQ(m[2]["staleness"], 1);
  expect_resume_rewrites(a, killed, 3, 3, "rollout_async_resume");
}

// --async full --max-staleness 2 with a rollout rank: two batches ahead of the trainers, the bytes
// of the two trainers run alone (not quite one process's with --grad-accum 2: its rollouts hold
// all 24 samples at once, the ranks' 12, and without --batch-invariant that may change a sampled
// token, as it does here at step 3); a job killed after step 2 resumes with both batches kept.
TEST(TrainCliMpi, RolloutRanksTwoStepsAheadResumeBitForBit) {
  SQLRL_REQUIRE_MPI();
  const std::string root = fresh_dir("cli_mpi_rollout_full");
  const std::string a = root + "/a", two = root + "/two", killed = root + "/killed";
  const std::string args = fixture_args(4) + "--async full --max-staleness 2 --save-every 2 --out ";
  CliRun r1 = run_command(mpirun(3) + SQLRL_BINARY + " train --rollout-ranks 1 " + args + a, "rollout_full");
  ASSERT_EQ(r1.rc, 0) << r1.err;
  CliRun r2 = run_command(mpirun(2) + SQLRL_BINARY + " train " + args + two, "rollout_full_np2");
  ASSERT_EQ(r2.rc, 0) << r2.err;
  for (int step : {2, 4}) expect_same_checkpoint(a, two, step);
  EXPECT_EQ(untimed_metrics(a), untimed_metrics(two));
  std::vector<int64_t> staleness;
  for (const nlohmann::json& j : metric_lines(a)) staleness.push_back(j["staleness"].get<int64_t>());
  EXPECT_EQ(staleness, (std::vector<int64_t>{0, 1, 2, 2}));
  expect_resume_rewrites(a, killed, 4, 3, "rollout_full_resume");
}

// More rollout ranks than trainers: each batch is sampled in max(T, R) units (prompt ranges), each
// by one rollout rank, and a trainer merges the pieces of its share in order, splitting a unit
// that straddles two trainers. Under --batch-invariant the smaller rollouts change no token, so
// one trainer with two rollout ranks writes one process's bytes (both with --grad-accum 2: the
// data-parallel GEMMs), and two trainers with three rollout ranks, whose middle unit of a batch of
// 5 holds prompts of both, write the bytes of the two trainers alone.
TEST(TrainCliMpi, MoreRolloutRanksThanTrainersSplitTheShares) {
  SQLRL_REQUIRE_MPI();
  const std::string root = fresh_dir("cli_mpi_rollout_more");
  const std::string args = "--config tiny --weights " + std::string(SQLRL_FIXTURES_DIR) + "/sft_tiny --max-steps 2 "
                           "--group-size 4 --max-turn-tokens 64 --batch-invariant --save-every 2 --out ";
  CliRun a = run_command(mpirun(3) + SQLRL_BINARY + " train --rollout-ranks 2 --batch-size 4 --grad-accum 2 " + args +
                             root + "/r2", "rollout_more_r2");
  ASSERT_EQ(a.rc, 0) << a.err;
  CliRun b = run_command(std::string(SQLRL_BINARY) + " train --batch-size 4 --grad-accum 2 " + args + root + "/one",
                         "rollout_more_one");
  ASSERT_EQ(b.rc, 0) << b.err;
  expect_same_checkpoint(root + "/r2", root + "/one", 2);
  EXPECT_EQ(untimed_metrics(root + "/r2"), untimed_metrics(root + "/one"));

  CliRun c = run_command(mpirun(5) + SQLRL_BINARY + " train --rollout-ranks 3 --batch-size 5 " + args + root + "/r3",
                         "rollout_more_r3");
  ASSERT_EQ(c.rc, 0) << c.err;
  CliRun d = run_command(mpirun(2) + SQLRL_BINARY + " train --batch-size 5 " + args + root + "/two", "rollout_more_two");
  ASSERT_EQ(d.rc, 0) << d.err;
  expect_same_checkpoint(root + "/r3", root + "/two", 2);
  EXPECT_EQ(untimed_metrics(root + "/r3"), untimed_metrics(root + "/two"));
  EXPECT_EQ(metric_lines(root + "/r3")[1]["trajectories"], 20);
}

// --dynamic-sampling with rollout ranks: two rollout ranks, one unit each, count every try's
// informative groups together (an all-reduce in their group) and keep the groups the two trainers
// alone keep. With more rollout ranks than trainers it is refused on every rank.
TEST(TrainCliMpi, RolloutRanksKeepTheDynamicSamplingGroupsOfTheTrainersAlone) {
  SQLRL_REQUIRE_MPI();
  const std::string root = fresh_dir("cli_mpi_rollout_dynamic");
  // Groups of 2 are often all wrong: 3 tries per step, and 5 informative groups for a batch of 4
  // in step 1, so the quota cuts across the units.
  const std::string args = "--config tiny --weights " + std::string(SQLRL_FIXTURES_DIR) + "/sft_tiny --max-steps 2 "
                           "--batch-size 4 --group-size 2 --max-turn-tokens 96 --dynamic-sampling "
                           "--dynamic-sampling-max-tries 3 --save-every 2 --out ";
  CliRun a = run_command(mpirun(4) + SQLRL_BINARY + " train --rollout-ranks 2 " + args + root + "/r2", "rollout_dyn");
  ASSERT_EQ(a.rc, 0) << a.err;
  CliRun b = run_command(mpirun(2) + SQLRL_BINARY + " train " + args + root + "/two", "rollout_dyn_two");
  ASSERT_EQ(b.rc, 0) << b.err;
  expect_same_checkpoint(root + "/r2", root + "/two", 2);
  const std::vector<nlohmann::json> m = untimed_metrics(root + "/r2");
  EXPECT_EQ(m, untimed_metrics(root + "/two"));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_GT(m[0]["dynamic_sampling"]["tries"].get<int64_t>(), 1)
      << "step 1 filled its batch in one try: the exchange of counts went untested";
  EXPECT_GT(m[0]["dynamic_sampling"]["informative_groups"].get<int64_t>(), 4) << "no group left out by the quota";
  CliRun c = run_command(mpirun(3) + SQLRL_BINARY + " train --rollout-ranks 2 " + args + root + "/refused", "rollout_dyn_no");
  EXPECT_NE(c.rc, 0);
  EXPECT_NE(c.err.find("--dynamic-sampling with --rollout-ranks 2 and 1 trainers"), std::string::npos) << c.err;
  CliRun d = run_command(mpirun(3) + SQLRL_BINARY + " train --rollout-ranks 1 --config tiny --weights " +
                             std::string(SQLRL_FIXTURES_DIR) + "/sft_tiny --max-steps 1 --batch-size 1 --out " + root +
                             "/small", "rollout_small_batch");
  EXPECT_NE(d.rc, 0);
  EXPECT_NE(d.err.find("batch-size 1 with 2 trainers and 1 rollout ranks leaves a rank without a prompt"),
            std::string::npos) << d.err;
}

// A LoRA run with a rollout rank: the adapter is what travels after each update (the base stays
// as loaded on every rank), and the rollout rank samples with it attached: np 3 writes the adapter
// and moments of the two trainers alone.
TEST(TrainCliMpi, RolloutRanksSampleWithTheTrainedAdapter) {
  SQLRL_REQUIRE_MPI();
  const std::string root = fresh_dir("cli_mpi_rollout_lora");
  const std::string args = fixture_args(3) + "--lora-rank 4 --async one-step --save-every 3 --out ";
  CliRun a = run_command(mpirun(3) + SQLRL_BINARY + " train --rollout-ranks 1 " + args + root + "/split", "rollout_lora");
  ASSERT_EQ(a.rc, 0) << a.err;
  CliRun b = run_command(mpirun(2) + SQLRL_BINARY + " train " + args + root + "/two", "rollout_lora_two");
  ASSERT_EQ(b.rc, 0) << b.err;
  const std::string ck = "/checkpoints/step-3/";
  EXPECT_TRUE(bytes(root + "/split" + ck + "adapter_model.safetensors") == bytes(root + "/two" + ck + "adapter_model.safetensors"));
  expect_same_optimizer(root + "/split" + ck, root + "/two" + ck, 1, "the adapter's moments");
  EXPECT_EQ(untimed_metrics(root + "/split"), untimed_metrics(root + "/two"));
}

// --partial-rollout with a rollout rank (1 trainer, 1 rollout rank; --async full K = 2): the newest
// batch ahead takes the weights of the update in progress at its decode step 8, so batches 3 and 4
// hold tokens of two versions: their staleness is still the bound (2: the oldest token's) and the
// mean over their sampled tokens less. A second run writes the same bytes; a job killed after
// step 2 resumes onto the same step 4 (the checkpoint keeps the batches ahead with their switch
// points). Kept caches recompute nothing; the layout with more trainers than rollout ranks is
// refused.
TEST(TrainCliMpi, PartialRolloutSwitchesTheNewestBatchAheadAndResumesBitForBit) {
  SQLRL_REQUIRE_MPI();
  const std::string root = fresh_dir("cli_mpi_partial");
  const std::string a = root + "/a", again = root + "/again", killed = root + "/killed", keep = root + "/keep";
  const std::string args = fixture_args(4) + "--async full --max-staleness 2 --partial-rollout 8 --save-every 2 --out ";
  const std::string split = mpirun(2) + SQLRL_BINARY + " train --rollout-ranks 1 " + args;
  CliRun r1 = run_command(split + a, "partial");
  ASSERT_EQ(r1.rc, 0) << r1.err;
  CliRun r2 = run_command(split + again, "partial_again");
  ASSERT_EQ(r2.rc, 0) << r2.err;
  for (int step : {2, 4}) expect_same_checkpoint(a, again, step);
  EXPECT_EQ(untimed_metrics(a), untimed_metrics(again));
  EXPECT_EQ(bytes(a + "/trajectories.jsonl"), bytes(again + "/trajectories.jsonl"));
  const std::vector<nlohmann::json> m = metric_lines(a);
  ASSERT_EQ(m.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(m[i]["staleness"], std::min(i, 2));
    const double mean = m[i]["staleness_mean"].get<double>();
    if (i < 2) {
      EXPECT_EQ(mean, i);  // sampled whole before any update
      EXPECT_EQ(m[i]["staleness_min"], i);
      EXPECT_FALSE(m[i]["rollout"].contains("weight_switches"));
    } else {
      EXPECT_EQ(m[i]["staleness_min"], 1) << "the tokens after the switch are one update fresher";
      EXPECT_LT(mean, 2.0) << "no token of the next weights";
      EXPECT_GT(mean, 1.0) << "no token of the old weights: the switch came before decode step 8";
      EXPECT_EQ(m[i]["rollout"]["weight_switches"], 1);
      EXPECT_GT(m[i]["rollout"]["switch_recomputed_tokens"].get<int64_t>(), 0);
    }
  }
  EXPECT_NE(bytes(a + "/trajectories.jsonl").find("\"tokens_after_switch\""), std::string::npos);
  expect_resume_rewrites(a, killed, 4, 2, "partial_resume");

  CliRun k = run_command(split + keep + " --partial-kv keep", "partial_keep");
  ASSERT_EQ(k.rc, 0) << k.err;
  const std::vector<nlohmann::json> mk = metric_lines(keep);
  ASSERT_EQ(mk.size(), 4u);
  EXPECT_EQ(mk[3]["rollout"]["weight_switches"], 1);
  EXPECT_EQ(mk[3]["rollout"]["switch_recomputed_tokens"], 0);
  CliRun no = run_command(mpirun(3) + SQLRL_BINARY + " train --rollout-ranks 1 " + args + root + "/refused", "partial_no");
  EXPECT_NE(no.rc, 0);
  EXPECT_NE(no.err.find("--partial-rollout with --rollout-ranks 1 and 2 trainers"), std::string::npos) << no.err;
}

// --rollout-ranks on --device cuda, every rank on the one GPU (ranks sharing it exchange through
// host memory over MPI): the trainers send their bf16 device weights after each update and the
// rollout rank samples with them, so the job trains as the two trainers alone do: step 1's
// trajectories (sampled by the loaded weights, before any update travelled) equal theirs byte for
// byte, and the last checkpoint's weights agree within 1e-5 relative L2 (the bound the CUDA train
// tests give two runs that should agree: tests/rl_cuda/test_train_cuda.cpp). A rollout rank
// left on stale weights, or given the fp32 master rounded elsewhere, samples other tokens from
// step 2 on, and the entropy bonus (the random embedded model's groups have no reward variance)
// then moves the weights apart far beyond that. Off, one-step and a LoRA run.
TEST(TrainCliMpiCuda, RolloutRankSharesTheGpuAndSamplesWhatTheTrainersWould) {
  SQLRL_REQUIRE_MPI();
  SQLRL_REQUIRE_CUDA();
  const std::string root = fresh_dir("cli_mpi_rollout_cuda");
  auto load = [](const std::string& dir, bool lora) {  // every tensor of the checkpoint's weights, in file order
    const SafetensorsFile f = open_safetensors(dir + (lora ? "/adapter_model.safetensors" : "/model.safetensors"));
    std::vector<float> out;
    for (const TensorEntry& e : f.tensors) {
      const Tensor t = load_tensor(f, e, DType::F32, cpu_device());
      out.insert(out.end(), t.data_as<float>(), t.data_as<float>() + t.numel());
    }
    return out;
  };
  auto lines = [](const std::string& path, size_t n) {
    std::ifstream in(path);
    std::vector<std::string> out;
    for (std::string line; out.size() < n && std::getline(in, line);) out.push_back(line);
    return out;
  };
  struct Case {
    const char* name;
    std::string flags;
    std::vector<int64_t> staleness;
    bool lora;
  };
  for (const Case& k : {Case{"off", "--async off", {-1, -1, -1}, false},
                        Case{"one_step", "--async one-step", {0, 1, 1}, false},
                        Case{"lora", "--async off --lora-rank 4", {-1, -1, -1}, true}}) {
    SCOPED_TRACE(k.name);
    const std::string args = str_cat(" train --config tiny --tiny-head-dim 64 --device cuda --max-steps 3 --batch-size 4 "
                                     "--group-size 4 --max-turn-tokens 64 --entropy-coef 0.01 "
                                     "--filter-zero-variance=false --save-every 3 ", k.flags, " --out ");
    const std::string split = str_cat(root, "/", k.name, "_split"), two = str_cat(root, "/", k.name, "_two");
    CliRun a = run_command(mpirun(3) + SQLRL_BINARY + " " + args + split + " --rollout-ranks 1", str_cat("cuda_split_", k.name));
    ASSERT_EQ(a.rc, 0) << a.err;
    CliRun b = run_command(mpirun(2) + SQLRL_BINARY + " " + args + two, str_cat("cuda_two_", k.name));
    ASSERT_EQ(b.rc, 0) << b.err;
    EXPECT_EQ(lines(split + "/trajectories.jsonl", 16), lines(two + "/trajectories.jsonl", 16));
    const std::string ck = "/checkpoints/step-3";
    const std::vector<float> ws = load(split + ck, k.lora), wt = load(two + ck, k.lora);
    const double diff = sqlrl::testing::relative_l2(ws, wt);
    std::printf("%s: rollout rank vs trainers alone, step 3 %s relative L2 %.3g\n", k.name, k.lora ? "adapter" : "weights",
                diff);
    EXPECT_LE(diff, 1e-5);
    std::vector<int64_t> staleness;  // -1: not logged (a synchronous run)
    const std::vector<nlohmann::json> m = metric_lines(split);
    for (const nlohmann::json& j : m) staleness.push_back(j.value("staleness", int64_t{-1}));
    EXPECT_EQ(staleness, k.staleness);
    ASSERT_EQ(m.size(), 3u);
    EXPECT_GT(m[1]["time"]["weight_sync_s"].get<double>(), 0.0);
    EXPECT_GT(m[2]["grad_norm"].get<double>(), 0.0) << "no update: the comparison would be vacuous";
  }
}

// --partial-rollout on the GPU (1 trainer, 1 rollout rank, both on the one device): the switch
// writes the next bf16 weights in place under the decode graphs mid-batch; a second run writes
// the same bytes (the switch point is a step count, and the device kernels are deterministic),
// and batches 3 and 4 hold tokens of both versions.
TEST(TrainCliMpiCuda, PartialRolloutOnTheGpuRepeatsBitForBit) {
  SQLRL_REQUIRE_MPI();
  SQLRL_REQUIRE_CUDA();
  const std::string root = fresh_dir("cli_mpi_partial_cuda");
  const std::string args = " train --rollout-ranks 1 --config tiny --tiny-head-dim 64 --device cuda --max-steps 4 "
                           "--batch-size 4 --group-size 4 --max-turn-tokens 64 --entropy-coef 0.01 "
                           "--filter-zero-variance=false --async full --max-staleness 2 --partial-rollout 8 "
                           "--save-every 4 --out ";
  CliRun a = run_command(mpirun(2) + SQLRL_BINARY + args + root + "/a", "cuda_partial");
  ASSERT_EQ(a.rc, 0) << a.err;
  CliRun b = run_command(mpirun(2) + SQLRL_BINARY + args + root + "/b", "cuda_partial_again");
  ASSERT_EQ(b.rc, 0) << b.err;
  expect_same_checkpoint(root + "/a", root + "/b", 4);
  EXPECT_EQ(untimed_metrics(root + "/a"), untimed_metrics(root + "/b"));
  EXPECT_EQ(bytes(root + "/a/trajectories.jsonl"), bytes(root + "/b/trajectories.jsonl"));
  const std::vector<nlohmann::json> m = metric_lines(root + "/a");
  ASSERT_EQ(m.size(), 4u);
  for (int i : {2, 3}) {
    EXPECT_LT(m[i]["staleness_mean"].get<double>(), 2.0) << i;
    EXPECT_EQ(m[i]["rollout"]["weight_switches"], 1) << i;
  }
}

TEST(TrainCliMpi, RolloutRanksNeedATrainer) {
  CliRun r = run_command(std::string(SQLRL_BINARY) + " train --rollout-ranks 1 " + fixture_args(1) + "--out " +
                             fresh_dir("cli_rollout_alone"), "rollout_alone");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--rollout-ranks 1 in a job of 1 ranks leaves 0 to train"), std::string::npos) << r.err;
}

// ZeRO 3 checkpoints are written by every rank (its slice of the moments, no gather) and resume on
// another world size bit for bit, keeping the step's 4 shards: 4 ranks' step 2 continued by one
// process with --grad-accum 4, or by 2 ranks with --grad-accum 2 (each rank's new slice read
// across the 4 old ones), gives the uninterrupted 4-rank run's step 3.
TEST(TrainCliMpi, AZero3CheckpointOfFourRanksResumesOnOneAndOnTwo) {
  SQLRL_REQUIRE_MPI();
  const std::string root = fresh_dir("cli_mpi_zero3");
  const std::string sharded = root + "/np4", straight = root + "/np4_straight", two = root + "/np2";
  const std::string args = std::string(SQLRL_BINARY) + " train " + fixture_args(3) + "--save-every 1 ";
  CliRun u = run_command(mpirun(4) + args + "--zero-stage 3 --out " + straight, "zero3_straight");
  ASSERT_EQ(u.rc, 0) << u.err;
  CliRun a = run_command(mpirun(4) + SQLRL_BINARY + " train " + fixture_args(2) + "--save-every 1 --zero-stage 3 --out " +
                             sharded, "zero3_np4");
  ASSERT_EQ(a.rc, 0) << a.err;
  for (int step = 1; step <= 2; ++step) expect_same_checkpoint(sharded, straight, step, 4);
  fs::copy(sharded, two, fs::copy_options::recursive);

  CliRun one = run_command(args + "--grad-accum 4 --resume " + sharded, "zero3_resume_one");
  ASSERT_EQ(one.rc, 0) << one.err;
  expect_same_checkpoint(straight, sharded, 3, 4);
  CliRun b = run_command(mpirun(2) + args + "--zero-stage 3 --grad-accum 2 --resume " + two, "zero3_resume_two");
  ASSERT_EQ(b.rc, 0) << b.err;
  expect_same_checkpoint(two, straight, 3, 2);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(fs::exists(two + "/checkpoints/step-3/" + optimizer_shard_name(r, 2))) << r;
  // Not vacuous: the third step moved the weights.
  EXPECT_FALSE(bytes(two + "/checkpoints/step-3/model.safetensors") ==
               bytes(two + "/checkpoints/step-2/model.safetensors"));
}

// SFT: N ranks, one micro-batch each per update == one process with --grad-accum N (CPU: each
// micro-batch's gradient from zero, added in order).
TEST(TrainCliMpi, SftTwoRanksWriteTheBytesOfGradAccumTwo) {
  SQLRL_REQUIRE_MPI();
  const std::string dir = fresh_dir("cli_mpi_sft");
  std::filesystem::create_directories(dir);
  const std::string demos = dir + "/demos.jsonl";
  CliRun d = run_command(std::string(SQLRL_BINARY) + " sft synth-demos --protocol skyrl --out " + demos, "demos");
  ASSERT_EQ(d.rc, 0) << d.err;
  const std::string args = str_cat(" sft --weights ", SQLRL_FIXTURES_DIR, "/sft_tiny --data ", demos,
                                   " --lr 1e-3 --max-steps 4 --micro-batch-tokens 4096 --save-every 2 --out ");
  CliRun a = run_command(mpirun(2) + SQLRL_BINARY + args + dir + "/np2", "sft_np2");
  ASSERT_EQ(a.rc, 0) << a.err;
  CliRun b = run_command(std::string(SQLRL_BINARY) + args + dir + "/accum2 --grad-accum 2", "sft_acc2");
  ASSERT_EQ(b.rc, 0) << b.err;
  for (int step : {2, 4}) expect_same_checkpoint(dir + "/np2", dir + "/accum2", step);
  std::vector<nlohmann::json> m = metric_lines(dir + "/np2"), n = metric_lines(dir + "/accum2");
  ASSERT_EQ(m.size(), 4u);
  ASSERT_EQ(n.size(), 4u);
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(m[i]["loss"], n[i]["loss"]) << i;
    EXPECT_EQ(m[i]["tokens"], n[i]["tokens"]) << i;
    EXPECT_GT(m[i]["grad_norm"].get<double>(), 0.0);
  }
}

// eval: the questions shared among the ranks and gathered in order give the summary one process
// writes (everything but wall-clock times) and the same examples.jsonl answers.
TEST(TrainCliMpi, EvalTwoRanksWriteTheSummaryOfOneProcess) {
  SQLRL_REQUIRE_MPI();
  const std::string dir = fresh_dir("cli_mpi_eval");
  CliRun d = run_command(std::string(SQLRL_BINARY) + " data synth --out " + dir + "/synth", "synth");
  ASSERT_EQ(d.rc, 0) << d.err;
  const std::string args = str_cat(" eval --quiet --weights ", SQLRL_FIXTURES_DIR, "/sft_tiny --dataset spider:", dir,
                                   "/synth --split dev --limit 21 --max-turn-tokens 96 --mode vote --samples 2 --out ");
  CliRun a = run_command(mpirun(2) + SQLRL_BINARY + args + dir + "/np2", "eval_np2");
  ASSERT_EQ(a.rc, 0) << a.err;
  CliRun b = run_command(std::string(SQLRL_BINARY) + args + dir + "/one", "eval_one");
  ASSERT_EQ(b.rc, 0) << b.err;
  auto summary = [](const std::string& path) {
    nlohmann::json j = nlohmann::json::parse(bytes(path));
    j.erase("time");
    return j;
  };
  nlohmann::json sa = summary(dir + "/np2/summary.json"), sb = summary(dir + "/one/summary.json");
  EXPECT_EQ(sa, sb);
  EXPECT_EQ(sa["questions"], 21) << sa.dump();
  auto answers = [](const std::string& path) {
    std::vector<nlohmann::json> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      j.erase("seconds");
      out.push_back(j);
    }
    return out;
  };
  std::vector<nlohmann::json> ea = answers(dir + "/np2/examples.jsonl"), eb = answers(dir + "/one/examples.jsonl");
  ASSERT_EQ(ea.size(), 21u);
  EXPECT_EQ(ea, eb);
  int64_t sql_calls = 0;
  for (const auto& e : ea) sql_calls += e["sql_calls"].get<int64_t>();
  EXPECT_GT(sql_calls, 0) << "the fixture never ran SQL: the comparison would be weak";
}

// train --eval-every with two ranks (each evaluates its share of the questions, rank 0 writes):
// the evaluations, the metrics "eval" fields and best.json of one process with --grad-accum 2
// (which trains the same bits).
TEST(TrainCliMpi, TwoRanksEvaluateAsOneProcess) {
  SQLRL_REQUIRE_MPI();
  const std::string dp = fresh_dir("cli_mpi_eval_np2"), one = fresh_dir("cli_mpi_eval_one");
  const std::string args = fixture_args() + "--save-every 0 --eval-every 1 --eval-limit 7 --out ";
  CliRun a = run_command(mpirun(2) + SQLRL_BINARY + " train " + args + dp, "eval_np2");
  ASSERT_EQ(a.rc, 0) << a.err;
  CliRun b = run_command(std::string(SQLRL_BINARY) + " train " + args + one + " --grad-accum 2", "eval_acc2");
  ASSERT_EQ(b.rc, 0) << b.err;
  std::vector<nlohmann::json> m = metric_lines(dp), n = metric_lines(one);
  ASSERT_EQ(m.size(), 2u);
  ASSERT_EQ(n.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(m[i].contains("eval")) << i;
    EXPECT_EQ(m[i]["eval"], n[i]["eval"]) << i;
    EXPECT_EQ(m[i]["eval"]["n"], 7) << i;  // every question, not rank 0's share
    const std::string step = "/eval/step-" + std::to_string(i + 1);
    nlohmann::json sa = nlohmann::json::parse(bytes(dp + step + "/summary.json")),
                   sb = nlohmann::json::parse(bytes(one + step + "/summary.json"));
    sa.erase("time"), sb.erase("time"), sa.erase("weights"), sb.erase("weights");
    EXPECT_EQ(sa, sb) << i;
  }
  EXPECT_EQ(bytes(dp + "/best.json"), bytes(one + "/best.json"));
}

// A rank that fails names itself, and the job ends (the other rank is waiting for it in a
// barrier): MPMD launch, rank 1 given weights that do not exist.
TEST(TrainCliMpi, AFailingRankNamesItselfAndEndsTheJob) {
  SQLRL_REQUIRE_MPI();
  const std::string dir = fresh_dir("cli_mpi_fail");
  const std::string good = std::string(SQLRL_BINARY) + " train " + fixture_args() + "--out " + dir;
  const std::string bad =
      std::string(SQLRL_BINARY) + " train " + fixture_args(2, "/nonexistent/weights") + "--out " + dir;
  const auto start = std::chrono::steady_clock::now();
  std::string launch = mpirun(1) + good + " : -np 1 " + bad;
  CliRun r = run_command(launch, "fail");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("error (rank 1 of 2)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/weights"), std::string::npos) << r.err;
  EXPECT_LT(seconds, 60.0);
}

// A rank killed by SIGKILL in the middle of training (no error message, no MPI_Abort of its
// own): mpirun sees it and ends the others within seconds, never a hang.
// `mpirun -np 2 ... train ARGS --out DIR` started in a process group of its own, its output in
// BASE.out / BASE.err; returns the shell's pid once DIR/metrics.jsonl exists (training under way).
pid_t start_job(const std::string& args, const std::string& dir, const std::string& base) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    std::string cmd = mpirun(2) + SQLRL_BINARY + " train " + args + "--out " + dir + " > " + base + ".out 2> " + base +
                      ".err";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 1200 && !fs::exists(dir + "/metrics.jsonl"); ++i) usleep(50'000);
  usleep(500'000);
  return pid;
}

// The pid of the job's rank `rank` (an llm_sqlrl writing DIR, found by its environment); -1: none.
pid_t rank_process(const std::string& dir, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream env(e.path() / "environ", std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    std::ifstream cmdline(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    if (cmd.find("llm_sqlrl") != std::string::npos && cmd.find(dir) != std::string::npos &&
        text.find(str_cat("OMPI_COMM_WORLD_RANK=", rank) + '\0') != std::string::npos)
      return std::stoi(name);
  }
  return -1;
}

// Waits up to `limit_s` for the job started by start_job (killing its group past that); returns
// the seconds it took and its status.
double wait_job(pid_t pid, int& status, double limit_s) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < limit_s * 10 && waitpid(pid, &status, WNOHANG) == 0; ++i) usleep(100'000);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (seconds >= limit_s) kill(-pid, SIGKILL), waitpid(pid, &status, 0);
  return seconds;
}

TEST(TrainCliMpi, AKilledRankEndsTheJobInBoundedTime) {
  SQLRL_REQUIRE_MPI();
  const std::string dir = fresh_dir("cli_mpi_kill");
  const std::string base = sql::testing::temp_dir() + "/kill";
  const pid_t pid = start_job(fixture_args(500) + "--save-every 0 ", dir, base);
  // Training under way: kill -9 the rank-1 process.
  const pid_t victim = rank_process(dir, 1);
  ASSERT_GT(victim, 0) << "rank 1 not found; " << sql::testing::file_bytes(base + ".err");
  kill(victim, SIGKILL);
  int status = 0;
  EXPECT_LT(wait_job(pid, status, 60), 60.0) << "the job did not end after its rank 1 was killed";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  const std::string err = sql::testing::file_bytes(base + ".err");
  EXPECT_NE(err.find("signal 9"), std::string::npos) << err;  // mpirun's report names the killed process
}

// SIGINT to trainer rank 0 of a job with a rollout rank two batches ahead, switching weights
// mid-batch (--partial-rollout): the trainer finishes its step, takes the batch in flight, saves,
// tells the rollout rank to stop (in place of the next EX) and both end: no rank waits, and rank 0
// leaves MPI before std::exit (its watchdog thread, joinable at exit, once made it abort). Then
// SIGTERM to both ranks of a one-step job, as a scheduler sends it.
TEST(TrainCliMpi, AnInterruptedJobSavesItsStepAndEndsCleanly) {
  SQLRL_REQUIRE_MPI();
  const std::string dir = fresh_dir("cli_mpi_sigint");
  const std::string base = sql::testing::temp_dir() + "/sigint_mpi";
  const pid_t pid = start_job(fixture_args(500) + "--save-every 0 --rollout-ranks 1 --async full --max-staleness 2 "
                              "--partial-rollout 8 ", dir, base);
  const pid_t trainer = rank_process(dir, 0);
  ASSERT_GT(trainer, 0) << "rank 0 not found; " << sql::testing::file_bytes(base + ".err");
  kill(trainer, SIGINT);
  int status = 0;
  EXPECT_LT(wait_job(pid, status, 120), 120.0) << "the job did not end after SIGINT";
  const std::string out = sql::testing::file_bytes(base + ".out"), err = sql::testing::file_bytes(base + ".err");
  const size_t at = out.find("train: interrupted after step ");
  ASSERT_NE(at, std::string::npos) << out << err;
  EXPECT_EQ(err.find("terminate called"), std::string::npos) << err;
  EXPECT_EQ(err.find("Aborted"), std::string::npos) << err;
  const int64_t step = std::stoll(out.substr(at + std::string("train: interrupted after step ").size()));
  const nlohmann::json state = nlohmann::json::parse(bytes(checkpoint_dir(dir, step) + "/trainer_state.json"));
  ASSERT_EQ(state["ahead"].size(), 1u);
  EXPECT_EQ(state["ahead"][0].size(), 2u) << "the checkpoint lacks a batch ahead (the one switching weights)";

  // A scheduler's SIGTERM reaches every rank: the rollout rank leaves it to the trainer (without
  // a handler it died at once and mpirun ended the job before the save).
  const std::string dir2 = fresh_dir("cli_mpi_sigterm");
  const pid_t job = start_job(fixture_args(500) + "--save-every 0 --rollout-ranks 1 --async one-step ", dir2, base);
  const pid_t r0 = rank_process(dir2, 0), r1 = rank_process(dir2, 1);
  ASSERT_GT(r0, 0);
  ASSERT_GT(r1, 0);
  kill(r1, SIGTERM);
  kill(r0, SIGTERM);
  EXPECT_LT(wait_job(job, status, 120), 120.0) << "the job did not end after SIGTERM";
  const std::string out2 = sql::testing::file_bytes(base + ".out"), err2 = sql::testing::file_bytes(base + ".err");
  EXPECT_NE(out2.find("train: interrupted after step "), std::string::npos) << out2 << err2;
  EXPECT_EQ(err2.find("signal 15"), std::string::npos) << err2;
}

}  // namespace
}  // namespace sqlrl::rl::testing
