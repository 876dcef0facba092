// scripts/repro_skyrl.sh in its smoke mode (SQLRL_SMOKE=1: synthetic benchmark, tiny model, two
// GRPO steps): the script runs the paper's recipe end to end with the real binary and writes
// the table with our rows beside the paper's. One paper only: the four share repro_common.sh.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

std::string run(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  *status = pclose(pipe);
  return out;
}

TEST(ReproSmoke, SkyrlScriptWritesTable) {
  fs::path dir = fs::temp_directory_path() / "sqlrl_test_repro_skyrl";
  fs::remove_all(dir);
  int status = -1;
  std::string out = run(std::string("SQLRL_SMOKE=1 SQLRL_BIN=") + SQLRL_BINARY + " bash " + SQLRL_SOURCE_DIR +
                            "/scripts/repro_skyrl.sh " + dir.string(),
                        &status);
  ASSERT_EQ(status, 0) << out;
  for (const char* f : {"rl/config.toml", "rl/metrics.jsonl", "eval-base/summary.json", "eval-rl/summary.json"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  // Two GRPO steps, as the smoke mode asks (one metrics line per step).
  std::ifstream metrics(dir / "rl" / "metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line);) lines += !line.empty();
  EXPECT_EQ(lines, 2);
  std::ifstream in(dir / "table.md");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string table = ss.str();
  for (const char* row : {"| ours: base |", "| ours: rl |", "| SkyRL-SQL-7B |", "83.9"})
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
  fs::remove_all(dir);
}

}  // namespace
