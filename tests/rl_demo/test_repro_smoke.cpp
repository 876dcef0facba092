// scripts/repro_<paper>.sh in smoke mode (SQLRL_SMOKE=1: synthetic benchmark, tiny model, two GRPO
// steps): each script runs its paper's recipe end to end with the real binary (SFT or self-taught
// rounds where the paper has them, RL, single-turn RL where the paper's table has it, evaluations)
// and prints every table of the paper's TSV (scripts/paper_tables/) with a paper, an ours and a
// diff column per paper column.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int count_lines(const fs::path& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

// Runs the script and checks what every paper shares: the two RL steps, a table per paper table
// with "paper | ours | diff" for each of its columns, and no row of ours left empty where the
// script ran the row's model.
std::string run_script(const std::string& paper, const fs::path& dir) {
  fs::remove_all(dir);
  sqlrl::testing::CommandResult r = sqlrl::testing::run_command(
      std::string("SQLRL_SMOKE=1 SQLRL_BIN=") + SQLRL_BINARY + " bash " + SQLRL_SOURCE_DIR + "/scripts/repro_" + paper +
      ".sh --out " + dir.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines(dir / "rl" / "metrics.jsonl"), 2) << "two GRPO steps, as the smoke mode asks";
  std::string table = read_text(dir / "table.md");
  // Every table of the TSV appears, each column as paper | ours | diff.
  std::string tsv = read_text(fs::path(SQLRL_SOURCE_DIR) / "scripts" / "paper_tables" / (paper + ".tsv"));
  std::istringstream in(tsv);
  bool header = true;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cells;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, '\t');) cells.push_back(c);
    if (header) {
      for (size_t i = 3; i < cells.size(); ++i)
        EXPECT_NE(table.find(" " + cells[i] + " paper | ours | diff |"), std::string::npos) << cells[i] << "\n" << table;
      header = false;
      continue;
    }
    EXPECT_NE(table.find("## " + cells[0] + "\n"), std::string::npos) << cells[0];
    EXPECT_NE(table.find("| " + cells[1] + " | "), std::string::npos) << "row " << cells[1];
  }
  return table;
}

// The cells of the table.md row whose name is `row` (the first one).
std::vector<std::string> row_cells(const std::string& table, const std::string& row) {
  size_t at = table.find("| " + row + " | ");
  std::vector<std::string> cells;
  if (at == std::string::npos) return cells;
  std::stringstream ls(table.substr(at + 2, table.find('\n', at) - at - 2));
  for (std::string c; std::getline(ls, c, '|');) cells.push_back(c.substr(c.find_first_not_of(' ') == std::string::npos ? 0 : c.find_first_not_of(' ')));
  return cells;
}

TEST(ReproSmoke, SkyrlTrainsBothWaysAndFillsTable1) {
  fs::path dir = sqlrl::testing::process_temp_path("sqlrl_test_repro_skyrl");
  std::string table = run_script("skyrl", dir);
  // Table 1's 2x2: single-turn RL was trained, and each cell's evaluation ran its way.
  EXPECT_EQ(count_lines(dir / "rl-single-turn" / "metrics.jsonl"), 2);
  EXPECT_NE(read_text(dir / "rl-single-turn" / "config.toml").find("single-turn = true"), std::string::npos);
  EXPECT_NE(read_text(dir / "eval" / "rl-single-turn-single-turn" / "spider-dev" / "config.toml").find("single-turn = true"),
            std::string::npos);
  EXPECT_NE(read_text(dir / "eval" / "rl" / "spider-dev" / "config.toml").find("single-turn = false"), std::string::npos);
  // The paper's greedy evaluation with the recipe's caps ([eval] and its top).
  const std::string eval_config = read_text(dir / "eval" / "base" / "spider-dev" / "config.toml");
  EXPECT_NE(eval_config.find("mode = \"greedy\""), std::string::npos) << eval_config;
  // Row "SkyRL-SQL-7B" of Table 3: paper 83.9, ours a number, the diff ours - paper.
  std::vector<std::string> cells = row_cells(table.substr(table.find("## Table 3")), "SkyRL-SQL-7B");
  ASSERT_GE(cells.size(), 5u) << table;
  EXPECT_EQ(cells[1], "rl ");
  EXPECT_EQ(cells[2], "83.9 ");
  const double ours = std::stod(cells[3]);
  EXPECT_NEAR(std::stod(cells[4]), ours - 83.9, 0.051) << table;
  // Closed models are the paper's numbers only.
  EXPECT_NE(table.find("| GPT-4o | - | 81.3 | - | - |"), std::string::npos) << table;
  fs::remove_all(dir);
}

TEST(ReproSmoke, SqltrailRunsSftAndBothGreedyAndVote) {
  fs::path dir = sqlrl::testing::process_temp_path("sqlrl_test_repro_sqltrail");
  run_script("sqltrail", dir);
  EXPECT_NE(read_text(dir / "sft" / "config.toml").find("beta2 = 0.94999"), std::string::npos)
      << "SFT with the recipe's [sft] (A.5 betas)";
  EXPECT_NE(read_text(dir / "eval" / "rl" / "bird-dev-vote" / "config.toml").find("samples = 8"), std::string::npos);
  EXPECT_NE(read_text(dir / "eval" / "rl" / "bird-dev-greedy" / "config.toml").find("mode = \"greedy\""), std::string::npos);
  fs::remove_all(dir);
}

TEST(ReproSmoke, MtirFiltersEmptyGoldQueries) {
  fs::path dir = sqlrl::testing::process_temp_path("sqlrl_test_repro_mtir");
  run_script("mtir", dir);
  // The filtered copy of the training split, and the run trained on it.
  EXPECT_TRUE(fs::exists(dir / "train-data" / "train_spider.json"));
  EXPECT_NE(read_text(dir / "rl" / "config.toml").find((dir / "train-data").string()), std::string::npos);
  fs::remove_all(dir);
}

TEST(ReproSmoke, MtsqlRunsSelfTaughtRoundsAndInOutOfDomain) {
  fs::path dir = sqlrl::testing::process_temp_path("sqlrl_test_repro_mtsql");
  std::string table = run_script("mtsql", dir);
  EXPECT_NE(read_text(dir / "sft" / "config.toml").find("rounds = 3"), std::string::npos);
  // Trained on (synthetic) SParC: SParC is in domain, CoSQL out of domain; EX and EM both read.
  EXPECT_TRUE(fs::exists(dir / "eval" / "rl" / "sparc-dev" / "summary.json"));
  EXPECT_TRUE(fs::exists(dir / "eval" / "rl" / "cosql-dev" / "summary.json"));
  fs::remove_all(dir);
}

// Arctic-Text2SQL-R1: single-turn GRPO on the protocol's own one-turn format, the training split
// without empty-result gold queries, and the model card's row with ours beside it.
TEST(ReproSmoke, ArcticTrainsOneTurnOnFilteredDataAndFillsTheCard) {
  fs::path dir = sqlrl::testing::process_temp_path("sqlrl_test_repro_arctic");
  std::string table = run_script("arctic", dir);
  const std::string rl_config = read_text(dir / "rl" / "config.toml");
  EXPECT_NE(rl_config.find("protocol = \"arctic\""), std::string::npos) << rl_config;
  EXPECT_NE(rl_config.find((dir / "train-data").string()), std::string::npos) << "trained on the filtered copy";
  // Every trajectory is one turn, scored 1 / 0.1 / 0 on its one term.
  std::ifstream trajectories(dir / "rl" / "trajectories.jsonl");
  int lines = 0;
  for (std::string line; std::getline(trajectories, line); ++lines) {
    EXPECT_NE(line.find("\"execution\":"), std::string::npos) << line.substr(0, 300);
    size_t turns = 0;  // each turn has one "observation" (empty here: nothing is executed)
    for (size_t at = line.find("\"observation\":"); at != std::string::npos; at = line.find("\"observation\":", at + 1))
      ++turns;
    EXPECT_EQ(turns, 1u) << line.substr(0, 300);
  }
  EXPECT_GT(lines, 0);
  std::vector<std::string> cells = row_cells(table, "Arctic-Text2SQL-R1-7B");
  ASSERT_GE(cells.size(), 5u) << table;
  EXPECT_EQ(cells[1], "rl ");
  EXPECT_EQ(cells[2], "68.9 ");
  fs::remove_all(dir);
}

}  // namespace
