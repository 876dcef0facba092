// The paper recipes (configs/*.toml) resolve for every phase they hold without a value a real
// run needs coming from the embedded demo's defaults (issue: configs/sqltrail.toml once ran at 48
// tokens per turn because it set no caps). Each phase is resolved by the real binary's
// `--show-config`, which prints every setting with where it came from.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace fs = std::filesystem;
using sqlrl::testing::run_command;

namespace {

const char* kPapers[] = {"mtir", "sqltrail", "skyrl", "mtsql", "arctic"};

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// key -> source of every `key = value  # source` line of a --show-config printout.
std::map<std::string, std::string> sources_of(const std::string& printout) {
  std::map<std::string, std::string> out;
  std::istringstream in(printout);
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find(" = "), hash = line.rfind("  # ");
    if (line.empty() || line[0] == '#' || eq == std::string::npos || hash == std::string::npos) continue;
    out[line.substr(0, eq)] = line.substr(hash + 4);
  }
  return out;
}

// The keys configs/tiny.toml sets (the embedded demo's values, TrainConfig's defaults), less the
// tiny model's shape: a paper recipe must set each of them itself.
std::vector<std::string> demo_keys() {
  std::vector<std::string> keys;
  std::istringstream in(read_text(fs::path(SQLRL_SOURCE_DIR) / "configs" / "tiny.toml"));
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find(" = ");
    if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
    std::string key = line.substr(0, eq);
    if (key.rfind("tiny-", 0) != 0) keys.push_back(key);
  }
  return keys;
}

// The settings of an SFT update: the CLI defaults (1 epoch, lr 5e-6, beta2 0.999, no decay, no
// warmup, 2,048 tokens) are nobody's paper.
const std::vector<std::string> kSftKeys = {"epochs",       "lr",           "beta1",         "beta2",
                                           "weight-decay", "warmup-ratio", "max-grad-norm", "decay",
                                           "min-lr-ratio", "micro-batch-tokens", "grad-accum"};
// What every phase that rolls out shares with the RL run, and eval's own decoding.
const std::vector<std::string> kRolloutKeys = {"protocol", "chat-template", "max-turns", "max-turn-tokens",
                                               "max-total-tokens", "temperature", "top-p"};

void expect_from_recipe(const std::string& paper, const std::string& command, const std::vector<std::string>& keys) {
  SCOPED_TRACE(command + " --config " + paper);
  sqlrl::testing::CommandResult r =
      run_command(std::string(SQLRL_BINARY) + " " + command + " --config " + paper + " --show-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, std::string> sources = sources_of(r.output);
  ASSERT_FALSE(sources.empty()) << r.output;
  for (const std::string& key : keys) {
    ASSERT_TRUE(sources.count(key)) << key << " missing from\n" << r.output;
    EXPECT_EQ(sources[key], "recipe " + paper) << key << " of `" << command << "` is not the recipe's\n" << r.output;
  }
}

bool has_section(const std::string& paper, const std::string& section) {
  return read_text(fs::path(SQLRL_SOURCE_DIR) / "configs" / (paper + ".toml")).find("\n[" + section + "]") !=
         std::string::npos;
}

TEST(Recipes, EveryPhaseResolvesWithNoDemoDefault) {
  const std::vector<std::string> train_keys = demo_keys();
  ASSERT_GE(train_keys.size(), 10u);  // max-steps, batch-size, lr, turn caps, ... (tiny.toml)
  for (const char* paper : kPapers) {
    expect_from_recipe(paper, "train", train_keys);
    std::vector<std::string> eval_keys = kRolloutKeys;
    eval_keys.insert(eval_keys.end(), {"mode", "samples"});
    ASSERT_TRUE(has_section(paper, "eval")) << paper << ": a paper recipe says how its tables were evaluated";
    expect_from_recipe(paper, "eval", eval_keys);
    if (has_section(paper, "sft")) expect_from_recipe(paper, "sft", kSftKeys);
    if (has_section(paper, "self-taught")) {
      std::vector<std::string> keys = kRolloutKeys;
      keys.insert(keys.end(), {"rounds", "samples", "require-em", "easy-keep", "hard-keep"});
      keys.insert(keys.end(), kSftKeys.begin(), kSftKeys.end());
      expect_from_recipe(paper, "sft self-taught", keys);
    }
  }
  // The two papers with a supervised stage have theirs.
  EXPECT_TRUE(has_section("sqltrail", "sft"));
  EXPECT_TRUE(has_section("mtsql", "self-taught"));
}

// Eval takes the RL run's caps from the top of a recipe and its decoding from [eval]; a flag still wins.
TEST(Recipes, EvalReadsTheRecipeCapsAndItsOwnSection) {
  sqlrl::testing::CommandResult r = run_command(std::string(SQLRL_BINARY) +
                                                " eval --config sqltrail --show-config --samples 6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("max-turn-tokens = 3000  # recipe sqltrail"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("mode = \"vote\"  # recipe sqltrail"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("samples = 6  # flag"), std::string::npos) << r.output;
  // The RL run's rollout temperature is not eval's: [eval] sets its own (1.0 for the vote), and
  // the top's other keys (batch-size, lr) are train's alone.
  r = run_command(std::string(SQLRL_BINARY) + " eval --config skyrl --show-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("temperature = 0.0  # recipe skyrl"), std::string::npos) << r.output;
  // Train reads the top only: [eval]'s temperature 0 is not the rollout's 0.6.
  r = run_command(std::string(SQLRL_BINARY) + " train --config skyrl --show-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("temperature = 0.59999999999999998  # recipe skyrl"), std::string::npos) << r.output;
  // --show-config alone is a question about the defaults, not the no-argument demo run.
  r = run_command(std::string(SQLRL_BINARY) + " train --show-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("# llm_sqlrl train: the resolved configuration", 0), 0u) << r.output;
}

// A section no command reads, or an unknown key inside one, is an error naming it; a flat file
// (a run's own config.toml) is read whole by the command given it.
TEST(Recipes, BadSectionsFailNamingThem) {
  fs::path dir = fs::temp_directory_path() / ("sqlrl_recipes_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "typo.toml") << "protocol = \"skyrl\"\n[evaluation]\nmode = \"vote\"\n";
  sqlrl::testing::CommandResult r =
      run_command(std::string(SQLRL_BINARY) + " train --show-config --config " + (dir / "typo.toml").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("section [evaluation] is read by no command"), std::string::npos) << r.output;
  std::ofstream(dir / "bad_key.toml") << "protocol = \"skyrl\"\n[eval]\nbatch-size = 3\n";
  r = run_command(std::string(SQLRL_BINARY) + " eval --show-config --config " + (dir / "bad_key.toml").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown config key 'batch-size' [eval]"), std::string::npos) << r.output;
  // Train does not read [eval]: the same file is fine for it.
  r = run_command(std::string(SQLRL_BINARY) + " train --show-config --config " + (dir / "bad_key.toml").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ofstream(dir / "flat.toml") << "mode = \"vote\"\nsamples = 4\n";
  r = run_command(std::string(SQLRL_BINARY) + " eval --show-config --config " + (dir / "flat.toml").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("samples = 4  # " + (dir / "flat.toml").string()), std::string::npos) << r.output;
  fs::remove_all(dir);
}

}  // namespace
