// SFT resume: a run continued from its step-k checkpoint (weights, optimizer, trainer state,
// data cursor) makes the same following updates as the uninterrupted run, bit for bit; a
// checkpoint refuses other data naming its trainer_state.json. Also through `llm_sqlrl sft
// --resume`.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "rl/sft/sft.h"
#include "tests/rl_sft/sft_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl {
namespace {
namespace fs = std::filesystem;

using testing::sft_model;
using testing::sft_temp_dir;
using testing::sft_tokenizer;

// Seven short sequences of different lengths: with a 48-token budget and grad_accum 2 an epoch
// is several micro-batches and an odd last update, so checkpoints fall mid-epoch and on epoch
// boundaries, and max_steps runs past the configured epochs (the plan cycles).
std::vector<SftSequence> resume_data() {
  std::vector<SftSequence> out;
  const char* sqls[] = {"SELECT count(*) FROM city", "SELECT name FROM city", "SELECT id FROM city ORDER BY id",
                        "SELECT name FROM city WHERE population > 1000", "SELECT count(*) FROM city WHERE id > 3",
                        "SELECT population FROM city", "SELECT name, id FROM city"};
  for (const char* sql : sqls)
    out.push_back(tokenize_segments(
        sft_tokenizer(), {{"<|im_start|>user\nHow many cities are there?<|im_end|>\n<|im_start|>assistant\n", false},
                          {std::string("<sql>") + sql + "</sql><|im_end|>", true}}));
  return out;
}

SftConfig resume_config() {
  SftConfig c;
  c.lr = 3e-3f;
  c.epochs = 2;
  c.max_steps = 11;
  c.micro_batch_tokens = 48;
  c.grad_accum = 2;
  c.warmup_ratio = 0.2f;
  c.save_every = 2;  // an epoch is 3 updates here: checkpoints mid-epoch and at an epoch's end
  c.adamw.weight_decay = 0.01f;
  return c;
}

std::vector<nlohmann::json> metrics(const std::string& run) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The update's numbers, without the timings.
void expect_same_updates(const std::vector<nlohmann::json>& got, const std::vector<nlohmann::json>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    for (const char* k : {"step", "epoch", "loss", "tokens", "positions", "lr", "grad_norm"})
      EXPECT_EQ(got[i][k], want[i][k]) << "line " << i + 1 << " key " << k;
}

TEST(SftResume, ContinuingFromEachCheckpointEqualsTheUninterruptedRunBitForBit) {
  const std::string root = sft_temp_dir() + "/resume";
  const std::string tok_path = sft_temp_dir() + "/resume_tokenizer.json";
  fs::create_directories(root);
  std::ofstream(tok_path, std::ios::binary) << testing::sft_tokenizer_json();
  const int64_t vocab = static_cast<int64_t>(sft_tokenizer().size());

  QwenModel full = sft_model(vocab);
  OptimizerState full_opt;
  SftRunStats fs_stats = run_sft(full, full_opt, resume_data(), resume_config(), SftRunOptions{root + "/full", tok_path, {}});
  ASSERT_EQ(fs_stats.updates, 11);
  const std::vector<nlohmann::json> want = metrics(root + "/full");
  ASSERT_EQ(want.size(), 11u);
  ASSERT_GT(want.back()["epoch"].get<int64_t>(), 1) << "the run should cycle past the configured 2 epochs";
  ASSERT_EQ(want[1]["epoch"], want[2]["epoch"]) << "step 2 should be mid-epoch";
  ASSERT_NE(want[5]["epoch"], want[6]["epoch"]) << "step 6 should end an epoch";

  for (int64_t k : {2, 6, 8}) {  // mid-epoch 0, end of epoch 1, mid-epoch 2 (cycled)
    SCOPED_TRACE("resume after update " + std::to_string(k));
    const std::string run = root + "/from" + std::to_string(k);
    fs::remove_all(run);
    fs::copy(root + "/full", run, fs::copy_options::recursive);
    for (int64_t later = k + 2; later <= 11; later += 2) fs::remove_all(run + "/checkpoints/step-" + std::to_string(later));
    fs::remove_all(run + "/checkpoints/step-11");
    const std::string ckpt = resolve_checkpoint(run);  // the run folder: its latest, step-k
    ASSERT_EQ(fs::path(ckpt).filename().string(), "step-" + std::to_string(k));
    EXPECT_EQ(resolve_checkpoint(ckpt + "/"), ckpt);  // the checkpoint itself, however written
    SftCheckpoint ck = read_sft_checkpoint(ckpt);
    EXPECT_EQ(ck.cursor.updates, k);
    QwenModel model = load_model(ckpt);
    OptimizerState opt = load_optimizer(ckpt + "/optimizer.safetensors", model.num_params);
    SftRunOptions ro;
    ro.out_dir = run, ro.tokenizer_path = tok_path;
    ro.resume = &ck;
    SftConfig ignored;  // the checkpoint's config is used
    ignored.lr = 1.0f;
    SftRunStats st = run_sft(model, opt, resume_data(), ignored, ro);
    EXPECT_EQ(st.updates, 11 - k);
    EXPECT_EQ(model.params, full.params);
    EXPECT_EQ(opt.m, full_opt.m);
    EXPECT_EQ(opt.v, full_opt.v);
    EXPECT_EQ(opt.adam_step, full_opt.adam_step);
    expect_same_updates(metrics(run), want);  // lines after step k were dropped and written again
    EXPECT_TRUE(fs::exists(run + "/checkpoints/step-11/model.safetensors"));
  }
}

TEST(SftResume, OtherDataOrAnotherOptimizerIsRefusedNamingTheCheckpointFile) {
  const std::string root = sft_temp_dir() + "/resume_bad";
  fs::create_directories(root);
  QwenModel model = sft_model(static_cast<int64_t>(sft_tokenizer().size()));
  OptimizerState opt;
  SftConfig cfg = resume_config();
  cfg.max_steps = 3;
  run_sft(model, opt, resume_data(), cfg, SftRunOptions{root, "", {}});
  const std::string ckpt = root + "/checkpoints/step-3";  // the last update's checkpoint
  SftCheckpoint ck = read_sft_checkpoint(ckpt);
  std::vector<SftSequence> other = resume_data();
  other.pop_back();
  SftRunOptions ro;
  ro.out_dir = root, ro.tokenizer_path = "";
  ro.resume = &ck;
  OptimizerState loaded = load_optimizer(ckpt + "/optimizer.safetensors", model.num_params);
  EXPECT_THROW(
      {
        try {
          run_sft(model, loaded, other, cfg, ro);
        } catch (const std::exception& e) {
          EXPECT_NE(std::string(e.what()).find(ckpt + "/trainer_state.json"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("fingerprint"), std::string::npos) << e.what();
          throw;
        }
      },
      std::exception);
  OptimizerState fresh;
  fresh = make_optimizer_state(model.num_params);
  EXPECT_THROW(run_sft(model, fresh, resume_data(), cfg, ro), std::exception);
  std::ofstream(ckpt + "/trainer_state.json") << "{\"format\": \"sqlrl-sft\", \"train_step\": 3}";
  try {
    read_sft_checkpoint(ckpt);
    ADD_FAILURE() << "a trainer_state.json without a config was read";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(ckpt + "/trainer_state.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'config'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_checkpoint(root + "/checkpoints"), std::exception);
}

// A fresh folder holding what `sft` reads (tokenizer.json, model/, data.jsonl of resume_data()),
// and the command line that trains on it for `steps` updates, up to its --out.
std::string sft_cli_inputs(const std::string& dir, int steps) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json", std::ios::binary) << testing::sft_tokenizer_json();
  save_model(sft_model(static_cast<int64_t>(sft_tokenizer().size())), dir + "/model");
  std::ofstream data(dir + "/data.jsonl");
  for (const SftSequence& s : resume_data())
    data << nlohmann::json{{"tokens", s.tokens}, {"mask", s.mask}}.dump() << "\n";
  return std::string(SQLRL_BINARY) + " sft --data " + dir + "/data.jsonl --weights " + dir + "/model --tokenizer " +
         dir + "/tokenizer.json --max-steps " + std::to_string(steps) +
         " --micro-batch-tokens 48 --grad-accum 2 --lr 3e-3 --save-every 2 --out ";
}

TEST(SftResume, CliResumeFromTheRunFolderEqualsTheUninterruptedRun) {
  const std::string dir = sft_temp_dir() + "/resume_cli";
  const std::string common = sft_cli_inputs(dir, 5);
  auto run = testing::run_command(common + dir + "/full");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  run = testing::run_command(common + dir + "/cut");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  fs::remove_all(dir + "/cut/checkpoints/step-4");
  fs::remove_all(dir + "/cut/checkpoints/step-5");
  run = testing::run_command(std::string(SQLRL_BINARY) + " sft --resume " + dir + "/cut");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  expect_same_updates(metrics(dir + "/cut"), metrics(dir + "/full"));
  EXPECT_EQ(load_model(dir + "/cut/checkpoints/step-5").params, load_model(dir + "/full/checkpoints/step-5").params);

  // A training flag with --resume would silently change the run: refused in one line.
  run = testing::run_command(std::string(SQLRL_BINARY) + " sft --resume " + dir + "/cut --lr 1");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("--lr"), std::string::npos) << run.output;
  run = testing::run_command(std::string(SQLRL_BINARY) + " sft --resume " + dir + "/model");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find(dir + "/model"), std::string::npos) << run.output;
}

// An sft killed before its first checkpoint left config.toml and some metrics lines: --resume
// has nothing to continue and --out refused the folder ("already holds a run"), so the run was
// stuck. Now --resume says how to start it again, and that command (its own config.toml, the
// same --out) runs from update 0 to the uninterrupted run's result. Catches: the stuck folder,
// stale metrics lines kept ahead of the new ones, a restart that lets another command's run be
// overwritten.
TEST(SftResume, ARunStoppedBeforeItsFirstCheckpointStartsAgainFromItsConfig) {
  const std::string dir = sft_temp_dir() + "/restart_cli";
  const std::string common = sft_cli_inputs(dir, 3);
  auto run = testing::run_command(common + dir + "/full");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  run = testing::run_command(common + dir + "/cut");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  fs::remove_all(dir + "/cut/checkpoints");  // as if killed after logging, before the first save
  run = testing::run_command(std::string(SQLRL_BINARY) + " sft --resume " + dir + "/cut");
  EXPECT_NE(run.exit_code, 0);
  const std::string again = "llm_sqlrl sft --config " + dir + "/cut/config.toml --out " + dir + "/cut";
  ASSERT_NE(run.output.find("has no complete checkpoint"), std::string::npos) << run.output;
  ASSERT_NE(run.output.find(again), std::string::npos) << run.output;
  run = testing::run_command(std::string(SQLRL_BINARY) + again.substr(std::string("llm_sqlrl").size()));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("starting it again from update 0"), std::string::npos) << run.output;
  expect_same_updates(metrics(dir + "/cut"), metrics(dir + "/full"));
  EXPECT_EQ(load_model(dir + "/cut/checkpoints/step-3").params, load_model(dir + "/full/checkpoints/step-3").params);

  // A folder holding another command's run is still refused.
  fs::create_directories(dir + "/grpo");
  std::ofstream(dir + "/grpo/config.toml") << "# llm_sqlrl train: the resolved configuration\n";
  std::ofstream(dir + "/grpo/metrics.jsonl") << "{\"step\": 1}\n";
  run = testing::run_command(common + dir + "/grpo");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("already holds a run"), std::string::npos) << run.output;
}

// The OpenBLAS kernels fix a CPU run's bits (runtime/blas_core.h): a checkpoint records its
// core, and a resume on another core is refused with the ways out, unless --cpu-kernels inherit
// (then a note, and the run goes on). Catches: a core left out of trainer_state.json, a resume
// that silently continues with other bits, an inherit that still refuses. (The same core resumes
// quietly: CliResumeFromTheRunFolderEqualsTheUninterruptedRun.)
TEST(SftResume, AnotherBlasCoreIsRefusedUnlessInherited) {
  const std::string dir = sft_temp_dir() + "/core_cli";
  const std::string common = sft_cli_inputs(dir, 3);
  auto run = testing::run_command(common + dir + "/cut");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  fs::remove_all(dir + "/cut/checkpoints/step-3");
  const std::string state_file = dir + "/cut/checkpoints/step-2/trainer_state.json";
  nlohmann::json state = nlohmann::json::parse(std::ifstream(state_file));
  ASSERT_TRUE(state.contains("blas_core") && state["blas_core"].is_string()) << state.dump();
  EXPECT_EQ(state["cpu_kernels"], "fast");
  const std::string other = state["blas_core"] == "Prescott" ? "Nehalem" : "Prescott";
  state["blas_core"] = other;
  std::ofstream(state_file) << state.dump(2);
  run = testing::run_command(std::string(SQLRL_BINARY) + " sft --resume " + dir + "/cut");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("OpenBLAS's " + other + " kernels"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("--cpu-kernels inherit"), std::string::npos) << run.output;
  run = testing::run_command(std::string(SQLRL_BINARY) + " sft --resume " + dir + "/cut --cpu-kernels inherit");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("differ in the last bits"), std::string::npos) << run.output;
  EXPECT_TRUE(fs::exists(dir + "/cut/checkpoints/step-3"));
}

}  // namespace
}  // namespace sqlrl::rl
