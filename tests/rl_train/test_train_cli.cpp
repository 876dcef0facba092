// `llm_sqlrl train` as a user runs it: the embedded default end to end, resume through the CLI,
// the recipes, and bad input (one-line error naming the thing, exit code != 0, no run folder).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "weights/config.h"
#include "rl/grpo/train.h"
#include "rl/grpo/train_log.h"
#include "tests/rl_train/train_fixture.h"
#include "tests/test_util.h"

namespace sqlrl::rl::testing {
namespace {

namespace fs = std::filesystem;

CliRun run_train(const std::string& args) { return run_command(std::string(SQLRL_BINARY) + " train " + args, "cli"); }

size_t count_lines(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  std::string line;
  while (std::getline(in, line)) n += !line.empty();
  return n;
}

// The error is one line, names `thing`, the exit code is not 0 and the run folder was not made.
void expect_clean_failure(const std::string& args, const std::string& thing, const std::string& out_dir) {
  CliRun r = run_train(args + " --out " + out_dir);
  EXPECT_NE(r.rc, 0) << args;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(thing), std::string::npos) << "error does not name " << thing << ": " << r.err;
  EXPECT_FALSE(fs::exists(out_dir)) << args << " left " << out_dir;
}

TEST(TrainCli, EmbeddedDefaultTwoStepsThenResume) {
  std::string dir = fresh_dir("cli_default");
  CliRun r = run_train("--max-steps 2 --out " + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir + "/config.toml"));
  EXPECT_EQ(count_lines(dir + "/metrics.jsonl"), 2u);
  EXPECT_EQ(count_lines(dir + "/trajectories.jsonl"), 4u);  // log-trajectories = 2 per step
  std::string ckpt = checkpoint_dir(dir, 2);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "optimizer.safetensors", "trainer_state.json"})
    EXPECT_TRUE(fs::exists(ckpt + "/" + f)) << f;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints"))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  QwenModel m = load_model(ckpt);
  std::unique_ptr<Tokenizer> tok = load_tokenizer(ckpt + "/tokenizer.json");
  EXPECT_EQ(m.config.vocab_size, static_cast<int64_t>(tok->size()));
  for (const char* special : {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "<tool_call>"})
    EXPECT_GE(tok->token_id(special), 0) << special;
  std::string line;
  std::ifstream metrics(dir + "/metrics.jsonl");
  std::getline(metrics, line);
  nlohmann::json first = nlohmann::json::parse(line);
  for (const char* key : {"reward_mean", "reward_std", "reward_terms", "ex", "format_rate", "turns_mean", "filtered",
                          "loss", "grad_norm", "clip_fraction", "entropy", "sql_calls", "lr", "time"})
    EXPECT_TRUE(first.contains(key)) << key;
  // The optimizer's share of the train time on every line; the save's time on the step that saved
  // (step 2, the last) only.
  EXPECT_TRUE(first["time"].contains("optimizer_s")) << line;
  EXPECT_LE(first["time"]["optimizer_s"].get<double>(), first["time"]["train_s"].get<double>()) << line;
  EXPECT_FALSE(first["time"].contains("checkpoint_s")) << line;
  std::getline(metrics, line);
  EXPECT_GT(nlohmann::json::parse(line)["time"].value("checkpoint_s", 0.0), 0.0) << line;

  // A setting that changes what is trained cannot change on resume (metrics.jsonl would mix two
  // runs): refused, naming each, before anything is written.
  CliRun changed = run_train("--resume " + dir + " --max-steps 3 --protocol mtir --lr 0.5");
  EXPECT_NE(changed.rc, 0);
  EXPECT_NE(changed.err.find("other values of protocol, lr"), std::string::npos) << changed.err;
  EXPECT_EQ(count_lines(dir + "/metrics.jsonl"), 2u);
  // --out elsewhere was printed as the run folder while the run wrote into the resumed one.
  CliRun elsewhere = run_train("--resume " + dir + " --max-steps 3 --out " + dir + "_other");
  EXPECT_NE(elsewhere.rc, 0);
  EXPECT_NE(elsewhere.err.find("resume: --out " + dir + "_other is not the resumed run's folder"), std::string::npos)
      << elsewhere.err;
  EXPECT_FALSE(fs::exists(dir + "_other"));
  EXPECT_EQ(count_lines(dir + "/metrics.jsonl"), 2u);
  // A negative seed ran as seed 2^64 - 1.
  CliRun negative = run_train("--seed -1 --max-steps 1 --out " + dir + "_seed");
  EXPECT_NE(negative.rc, 0);
  EXPECT_NE(negative.err.find("must be >= 0, got -1"), std::string::npos) << negative.err;
  EXPECT_FALSE(fs::exists(dir + "_seed"));

  // --resume takes the run's own config; only --max-steps is given again.
  CliRun again = run_train("--resume " + dir + " --max-steps 3");
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(count_lines(dir + "/metrics.jsonl"), 3u);
  EXPECT_TRUE(fs::exists(checkpoint_dir(dir, 3) + "/model.safetensors"));
  EXPECT_EQ(again.out.find("summed each step's gradient"), std::string::npos) << again.out;
  // Another shard count (ranks x grad-accum) is a valid run but not the saved one's bits: said.
  CliRun regrouped = run_train("--resume " + dir + " --max-steps 4 --grad-accum 2");
  ASSERT_EQ(regrouped.rc, 0) << regrouped.err;
  EXPECT_NE(regrouped.out.find("summed each step's gradient over 1 shards, this run over 2"), std::string::npos)
      << regrouped.out;
  EXPECT_NE(regrouped.out.find("(--grad-accum 1 on 1 ranks keeps them)"), std::string::npos) << regrouped.out;
}

// --lora-rank reaches the trainer: the checkpoint holds PEFT's adapter files and no weights, the
// run's line names the adapter, resume continues it, a changed rank is refused on resume, and
// LoRA on cuda meets the device checks full fine-tuning does (here: no GPU, or the embedded model's
// head_dim) in one line before anything is written; no LoRA refusal of its own.
TEST(TrainCli, LoraRankTrainsAnAdapterAndResumesIt) {
  const std::string dir = fresh_dir("cli_lora");
  CliRun r = run_train("--max-steps 1 --lora-rank 4 --lora-target-modules q_proj,v_proj --out " + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("LoRA rank 4 alpha 8"), std::string::npos) << r.out;
  const std::string ckpt = checkpoint_dir(dir, 1);
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "optimizer.safetensors"})
    EXPECT_TRUE(fs::exists(ckpt + "/" + f)) << f;
  EXPECT_FALSE(fs::exists(ckpt + "/model.safetensors"));
  const nlohmann::json cfg = nlohmann::json::parse(sql::testing::file_bytes(ckpt + "/adapter_config.json"));
  EXPECT_EQ(cfg["r"], 4);
  EXPECT_EQ(cfg["target_modules"], nlohmann::json({"q_proj", "v_proj"})) << cfg.dump();
  CliRun changed = run_train("--resume " + dir + " --max-steps 2 --lora-rank 8");
  EXPECT_NE(changed.rc, 0);
  EXPECT_NE(changed.err.find("lora-rank"), std::string::npos) << changed.err;
  CliRun again = run_train("--resume " + dir + " --max-steps 2");
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(count_lines(dir + "/metrics.jsonl"), 2u);
  EXPECT_TRUE(fs::exists(checkpoint_dir(dir, 2) + "/adapter_model.safetensors"));
  expect_clean_failure("--max-steps 1 --lora-rank 4 --device cuda", "cuda", fresh_dir("cli_lora_cuda"));
}

// --overlong-buffer reaches the reward: with the buffer the whole cap, every trajectory of L
// tokens pays -L / cap, logged as the panel's "overlong" term, and the step's reward is the
// outcome plus it. Catches the term computed but not added, or the cap/buffer never set.
TEST(TrainCli, OverlongBufferAddsDaposLengthPenaltyToTheReward) {
  const std::string dir = fresh_dir("cli_overlong");
  CliRun r = run_train("--max-steps 1 --batch-size 2 --group-size 2 --max-total-tokens 4096 --overlong-buffer 4096 "
                       "--overlong-penalty 0.5 --out " + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const nlohmann::json m = nlohmann::json::parse(line);
  ASSERT_TRUE(m["reward_terms"].contains("overlong")) << line;
  const double overlong = m["reward_terms"]["overlong"], outcome = m["reward_terms"]["outcome"];
  // Each trajectory (at most the cap): 0.5 * -(tokens / 4096); over the batch, of the mean token count.
  EXPECT_NEAR(overlong, -0.5 * m["tokens_mean"].get<double>() / 4096.0, 1e-9) << line;
  EXPECT_NEAR(m["reward_mean"].get<double>(), outcome + overlong, 1e-9) << line;
}

// --executed-reward reaches the reward as the panel's "executed" term, in the step's reward sum
// (catches the key parsed but the term never added, e.g. a trainer that builds its own panel),
// and a single-turn run, where nothing is executed, refuses it naming the key.
TEST(TrainCli, ExecutedRewardAddsItsTermAndNeedsMultiTurn) {
  const std::string dir = fresh_dir("cli_executed");
  CliRun r = run_train("--max-steps 1 --batch-size 2 --group-size 2 --executed-reward 0.5 --out " + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const nlohmann::json m = nlohmann::json::parse(line);
  ASSERT_TRUE(m["reward_terms"].contains("executed")) << line;
  const double executed = m["reward_terms"]["executed"], outcome = m["reward_terms"]["outcome"];
  EXPECT_LE(std::abs(executed), 0.5) << line;
  EXPECT_NEAR(m["reward_mean"].get<double>(), outcome + executed, 1e-9) << line;
  CliRun single = run_train("--max-steps 1 --single-turn --executed-reward 0.5 --out " + fresh_dir("cli_executed_1"));
  EXPECT_NE(single.rc, 0);
  EXPECT_NE(single.err.find("executed-reward"), std::string::npos) << single.err;
}

// --single-turn reaches the rollout: one assistant turn per trajectory (the untrained embedded
// model's malformed turns otherwise run to the protocol's 5), and the run records the setting.
TEST(TrainCli, SingleTurnTrainsOneTurnPerTrajectory) {
  const std::string dir = fresh_dir("cli_single_turn");
  CliRun r = run_train("--max-steps 1 --batch-size 2 --group-size 2 --single-turn --out " + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const nlohmann::json m = nlohmann::json::parse(line);
  EXPECT_EQ(m["turns_mean"].get<double>(), 1.0) << line;
  EXPECT_EQ(m["sql_calls"].get<int64_t>(), 0) << line;
  std::ifstream config(dir + "/config.toml");
  std::stringstream ss;
  ss << config.rdbuf();
  EXPECT_NE(ss.str().find("single-turn = true"), std::string::npos) << ss.str();
}

// KL in the reward through the CLI: a reference is held (the initial weights), step 1's policy is
// that reference (the penalty is exactly 0), and step 2's has moved (a non-zero penalty, logged
// next to ref_kl). The untrained embedded model's turns are all malformed with equal rewards, so
// the filters are off and the entropy bonus (run beside it) moves the weights at step 1.
TEST(TrainCli, KlInTheRewardIsLoggedAndNeedsNoKlLoss) {
  const std::string dir = fresh_dir("cli_kl_reward");
  CliRun r = run_train("--max-steps 2 --batch-size 1 --group-size 2 --kl-reward-coef 0.1 --kl-reward-estimator k1 "
                       "--entropy-coef 0.01 "
                       "--filter-malformed=false --filter-no-valid-action=false --filter-zero-variance=false "
                       "--out " + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  std::vector<nlohmann::json> steps;
  while (std::getline(in, line)) steps.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(steps.size(), 2u);
  for (const auto& m : steps) ASSERT_TRUE(m.contains("kl_penalty")) << m.dump();
  EXPECT_EQ(steps[0]["kl_penalty"].get<double>(), 0.0) << steps[0].dump();
  EXPECT_NE(steps[1]["kl_penalty"].get<double>(), 0.0) << steps[1].dump();
  EXPECT_EQ(steps[0]["updates"].get<int64_t>(), 1) << steps[0].dump();
  EXPECT_EQ(steps[1]["ref_kl"].get<double>(), 0.0) << "kl-coef is 0: no KL loss term";
}

// A run whose tokenizer folder holds tokenizer_config.json (here Qwen2.5's chat template) carries
// it into every checkpoint, so `eval --weights RUN/checkpoints/step-N` renders with the template
// the run used (eval's config.toml records the one it detected).
TEST(TrainCli, CheckpointsKeepTheTokenizerConfigAndEvalUsesItsTemplate) {
  const std::string seed_run = fresh_dir("cli_tpl_seed"), weights = fresh_dir("cli_tpl_weights");
  CliRun r = run_train("--max-steps 1 --out " + seed_run);
  ASSERT_EQ(r.rc, 0) << r.err;
  // An HF-style folder: the seed run's weights and tokenizer, plus a Qwen2.5 tokenizer_config.json.
  fs::create_directories(weights);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    fs::copy_file(checkpoint_dir(seed_run, 1) + "/" + f, weights + "/" + f);
  nlohmann::json tokenizer_config;
  tokenizer_config["chat_template"] =
      sql::testing::file_bytes(std::string(SQLRL_FIXTURES_DIR) + "/chat_template/qwen2_5_chat_template.jinja");
  std::ofstream(weights + "/tokenizer_config.json") << tokenizer_config.dump();
  const std::string run = fresh_dir("cli_tpl_run");
  // --weights without --config: the SkyRL-SQL recipe's values, shrunk by flags for a test.
  r = run_train("--weights " + weights + " --dataset spider:" + seed_run +
                "/cache/synth --max-steps 1 --batch-size 2 --group-size 2 --max-turn-tokens 16 --out " + run);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string config = sql::testing::file_bytes(run + "/config.toml");
  EXPECT_NE(config.find("chat-template = \"\"  # default"), std::string::npos)
      << "the run detects the template itself (the recipe's is its paper's model's): " << config;
  EXPECT_NE(config.find("top-p = 0.94999999999999996  # recipe skyrl (the default with --weights)"), std::string::npos)
      << config;
  EXPECT_NE(config.find("max-grad-norm = 0.5  # recipe skyrl"), std::string::npos) << config;
  EXPECT_NE(config.find("batch-size = 2  # flag"), std::string::npos) << config;
  EXPECT_NE(r.out.find("  temperature = 0.59999999999999998  (recipe skyrl (the default with --weights))"),
            std::string::npos) << "the settings and their sources are printed at the start: " << r.out;
  const std::string ckpt = checkpoint_dir(run, 1);
  EXPECT_EQ(sql::testing::file_bytes(ckpt + "/tokenizer_config.json"),
            sql::testing::file_bytes(weights + "/tokenizer_config.json"));
  const std::string eval_out = fresh_dir("cli_tpl_eval");
  const std::string cmd = std::string(SQLRL_BINARY) + " eval --quiet --weights " + ckpt + " --dataset spider:" +
                          seed_run + "/cache/synth --limit 1 --max-turns 1 --max-turn-tokens 4 --out " + eval_out +
                          " > " + eval_out + ".log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << sql::testing::file_bytes(eval_out + ".log");
  const std::string eval_config = sql::testing::file_bytes(eval_out + "/config.toml");
  EXPECT_NE(eval_config.find("chat-template = \"qwen2.5\""), std::string::npos) << eval_config;
}

// Settings that would harm a pretrained model are refused from its config.json alone (here a
// Qwen3-4B shape with no tensors), before anything is read or written; the recipe a real
// checkpoint gets by default passes, and --override-safety lets a harmful one through.
TEST(TrainCli, HarmfulSettingsForARealModelAreRefused) {
  const std::string weights = fresh_dir("cli_real_shape"), out = fresh_dir("cli_real_out");
  fs::create_directories(weights);
  std::ofstream(weights + "/config.json") << config_to_json(preset_config("qwen3-4b"));
  std::ofstream(weights + "/tokenizer.json") << toy_tokenizer_json();
  auto refused = [&](const std::string& flags, const std::string& reason) {
    CliRun r = run_train("--weights " + weights + " " + flags + " --out " + out);
    EXPECT_NE(r.rc, 0) << flags;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(reason), std::string::npos) << flags << ": " << r.err;
    EXPECT_NE(r.err.find("--override-safety"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out)) << flags;
  };
  refused("--lr 1e-3", "lr 0.001 would wreck a pretrained model of 4.02");
  refused("--max-turn-tokens 48", "max-turn-tokens 48 cannot hold a reasoned SQL turn");
  refused("--max-turn-tokens 512", "max-turn-tokens 512 cannot hold a Qwen3 thought");
  // The tiny values a run gets without --weights, given through the tiny recipe.
  refused("--config tiny", "lr 0.001");
  // Past the check: the recipe's values, and a harmful value with --override-safety, reach the
  // weights (which this folder does not have).
  for (const std::string flags : {"", "--max-turn-tokens 512 --enable-thinking=false", "--lr 1e-3 --override-safety"}) {
    CliRun r = run_train("--weights " + weights + " " + flags + " --out " + out);
    EXPECT_NE(r.rc, 0);
    EXPECT_EQ(r.err.find("--override-safety"), std::string::npos) << flags << ": " << r.err;
    EXPECT_NE(r.err.find("safetensors"), std::string::npos) << flags << ": " << r.err;
  }
}

TEST(TrainCli, BadInputFailsCleanly) {
  std::string out = sql::testing::temp_dir() + "/cli_bad_run";
  fs::remove_all(out);
  expect_clean_failure("--weights /no/such/weights", "/no/such/weights", out);
  expect_clean_failure("--tokenizer /no/such/tokenizer.json", "/no/such/tokenizer.json", out);
  expect_clean_failure("--dataset spider:/no/such/dataset", "/no/such/dataset", out);
  expect_clean_failure("--dataset nosuchformat:/tmp", "nosuchformat", out);
  expect_clean_failure("--protocol nosuchprotocol", "nosuchprotocol", out);
  expect_clean_failure("--device cuda", "cuda", out);
  expect_clean_failure("--config /no/such/recipe.toml", "/no/such/recipe.toml", out);
  std::string recipe = sql::testing::temp_dir() + "/bad_recipe.toml";
  std::ofstream(recipe) << "lr = 1e-5\nno-such-key = 3\n";
  expect_clean_failure("--config " + recipe, "no-such-key", out);

  // Vocabulary sizes that do not fit: a 300-id model, the toy tokenizer's 360 ids.
  std::string model_dir = sql::testing::temp_dir() + "/small_vocab_model";
  fs::remove_all(model_dir);
  TrainConfig c;
  c.tiny_hidden = 16, c.tiny_layers = 1, c.tiny_heads = 2, c.tiny_kv_heads = 1, c.tiny_head_dim = 8;
  c.tiny_intermediate = 16;
  save_model(make_embedded_model(c, 300), model_dir);
  std::string tok = sql::testing::temp_dir() + "/toy_tokenizer.json";
  std::ofstream(tok) << toy_tokenizer_json();
  size_t ids = load_tokenizer(tok)->size();
  ASSERT_GT(ids, 300u);
  CliRun r = run_train("--weights " + model_dir + " --tokenizer " + tok + " --out " + out);
  EXPECT_NE(r.rc, 0);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(std::to_string(ids) + " ids"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("vocab_size 300"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

// SIGINT stops a run cleanly: the step in flight finishes and is checkpointed, the run says where
// and how to continue, exits 128 + 2, and --resume continues from that step.
TEST(TrainCli, SigintSavesTheStepAndSaysWhere) {
  std::string dir = fresh_dir("cli_sigint");
  std::string base = sql::testing::temp_dir() + "/sigint";
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen((base + ".out").c_str(), "w", stdout)) _exit(127);
    if (!freopen((base + ".err").c_str(), "w", stderr)) _exit(127);
    execl(SQLRL_BINARY, SQLRL_BINARY, "train", "--max-steps", "200", "--save-every", "0", "--out", dir.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for the first logged step (the run is under way), then interrupt it.
  for (int i = 0; i < 1200 && count_lines(dir + "/metrics.jsonl") < 1; ++i) usleep(50'000);
  ASSERT_GE(count_lines(dir + "/metrics.jsonl"), 1u) << sql::testing::file_bytes(base + ".err");
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
  const size_t steps = count_lines(dir + "/metrics.jsonl");
  EXPECT_LT(steps, 200u);
  EXPECT_EQ(latest_checkpoint(dir), checkpoint_dir(dir, static_cast<int64_t>(steps)));
  const std::string out = sql::testing::file_bytes(base + ".out"), err = sql::testing::file_bytes(base + ".err");
  EXPECT_NE(err.find("interrupted: finishing the step in flight"), std::string::npos) << err;
  EXPECT_NE(out.find("continue with --resume " + dir), std::string::npos) << out;
  CliRun again = run_train("--resume " + dir + " --max-steps " + std::to_string(steps + 1));
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(count_lines(dir + "/metrics.jsonl"), steps + 1);
}

// Past `ulimit -f` (a file-size limit), writes fail instead of the process dying by SIGXFSZ with
// no message: a one-line error naming the file and the reason, exit code 1, no half-written
// checkpoint left, and the folder resumes once the limit is lifted.
TEST(TrainCli, FileSizeLimitGivesAnErrorNotASilentDeath) {
  std::string dir = fresh_dir("cli_ulimit");
  // 700 KiB: the cache (benchmark, tokenizer) fits, the first checkpoint's optimizer (~3 MB) does not.
  CliRun r = run_command("ulimit -f 1400; " + std::string(SQLRL_BINARY) + " train --max-steps 1 --out " + dir, "ulimit");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints"))
    ADD_FAILURE() << "left behind: " << e.path().string();
  CliRun again = run_train("--resume " + dir + " --max-steps 1");
  EXPECT_EQ(again.rc, 0) << again.err;
  EXPECT_TRUE(fs::exists(checkpoint_dir(dir, 1) + "/model.safetensors"));
}

// Every recipe reads without error and passes validation; tiny.toml is the built-in default.
TEST(TrainCli, RecipesParse) {
  for (const char* name : {"mtir", "sqltrail", "skyrl", "mtsql", "tiny"}) {
    std::string path = std::string(SQLRL_SOURCE_DIR) + "/configs/" + name + ".toml";
    TrainConfig c = read_config_toml(path);
    EXPECT_NO_THROW(validate_config(c)) << name;
    if (std::string(name) != "tiny") {
      EXPECT_EQ(c.protocol, name);
    }
  }
  TrainConfig tiny = read_config_toml(std::string(SQLRL_SOURCE_DIR) + "/configs/tiny.toml");
  EXPECT_EQ(config_to_toml(tiny), config_to_toml(TrainConfig{}));
  TrainConfig sky = read_config_toml(std::string(SQLRL_SOURCE_DIR) + "/configs/skyrl.toml");
  EXPECT_EQ(sky.batch_size, 256);  // SkyRL-SQL §5
  EXPECT_EQ(sky.top_p, 0.95);
}

// Settings under which GRPO silently does nothing or the model's SQL runs unbounded are refused,
// naming the key: greedy rollouts (every group zero-variance) and no SQL time limit.
TEST(TrainCli, GreedyRolloutsAndUnlimitedSqlAreRefused) {
  auto refused = [](TrainConfig c, const char* key) {
    try {
      validate_config(c);
      ADD_FAILURE() << key << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  TrainConfig c;
  c.temperature = 0;
  refused(c, "temperature must be > 0 for GRPO");
  c = TrainConfig{};
  c.sql_timeout_ms = 0;
  refused(c, "sql-timeout-ms must be positive");
  c.sql_timeout_ms = -5;
  refused(c, "sql-timeout-ms must be");
  // The loss knobs (rl/grpo/algos.h, rl/grpo/rollout_is.h): a bad value names its key.
  c = TrainConfig{};
  c.kl_estimator = "k4";
  refused(c, "kl-estimator 'k4'");
  c = TrainConfig{};
  c.policy_loss = "gsop";
  refused(c, "policy-loss 'gsop' is not one of grpo");  // the rows follow (rl/grpo/algos.h)
  c = TrainConfig{};
  c.dual_clip = 0.5;
  refused(c, "dual-clip must be 0 (off) or above 1");
  c = TrainConfig{};
  c.entropy_coef = -0.01;
  refused(c, "entropy-coef must be a finite number >= 0");
  c.entropy_coef = INFINITY;
  refused(c, "entropy-coef must be a finite number >= 0");
  c = TrainConfig{};
  c.kl_reward_coef = -1;
  refused(c, "kl-reward-coef must be a finite number >= 0");
  c.kl_reward_coef = NAN;
  refused(c, "kl-reward-coef must be a finite number >= 0");
  c = TrainConfig{};
  c.kl_reward_estimator = "low_var_kl";
  refused(c, "kl-reward-estimator 'low_var_kl' is not one of k1 | k2 | k3");
  c = TrainConfig{};
  c.rollout_is = "clip";
  refused(c, "rollout-is: 'clip'");
  c = TrainConfig{};
  c.rollout_is = "truncate";
  c.rollout_is_upper = 0.9;
  refused(c, "rollout-is-upper must be");
  c.rollout_is_upper = 2;
  c.sampler_logprobs = true;
  refused(c, "sampler-logprobs makes them the same");
}

// The run's panel: the protocol's terms, the optional ones the config turns on, then the
// reward-weight overrides, which reach an optional term too (catches overrides applied before the
// terms exist, or not at all); a bad override names itself.
TEST(TrainCli, RewardPanelTakesOptionalTermsThenOverrides) {
  TrainConfig c;
  c.protocol = "skyrl";
  c.executed_reward = 0.1;
  c.reward_weights = {"outcome=2", "reward.skyrl.executed=0.3"};
  RewardPanel p = train_reward_panel(c);
  ASSERT_EQ(p.terms.size(), 2u);
  EXPECT_EQ(p.terms[0].name, "outcome");
  EXPECT_EQ(p.terms[0].weight, 2.0);
  EXPECT_EQ(p.terms[1].name, "executed");
  EXPECT_EQ(p.terms[1].weight, 0.3);
  c.reward_weights = {"outcome=two"};
  try {
    train_reward_panel(c);
    ADD_FAILURE() << "a weight that is not a number was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outcome=two"), std::string::npos) << e.what();
  }
}

// config_to_toml -> read_config_toml gives back every field (strings with quotes, arrays).
TEST(TrainCli, ConfigRoundTrip) {
  TrainConfig c;
  c.out = "runs/a \"quoted\" # not a comment";
  c.reward_weights = {"exec=5", "turns=2.5"};
  c.lr = 1.25e-6;
  c.seed = 18446744073709551615ull;
  c.adv_std = false;
  std::string path = sql::testing::temp_dir() + "/roundtrip.toml";
  std::ofstream(path) << config_to_toml(c);
  EXPECT_EQ(config_to_toml(read_config_toml(path)), config_to_toml(c));
}

}  // namespace
}  // namespace sqlrl::rl::testing
