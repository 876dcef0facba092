// Shared by the tokenizer tests: the Qwen3 tokenizer loaded once, JSONL fixture reading.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"

namespace sqlrl::testing {

inline const Tokenizer& qwen3_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = load_tokenizer(fixture_path("tokenizer/qwen3_tokenizer.json"));
  return *tok;
}

// A scratch folder of this test process: several builds' test runs share /tmp, so fixed file
// names directly under TempDir() could be overwritten by another run mid-test.
inline std::string scratch_dir() {
  static const std::string dir = [] {
    std::filesystem::path p = process_temp_path("sqlrl_tokenizer");
    std::filesystem::create_directories(p);
    return p.string();
  }();
  return dir;
}

inline std::vector<nlohmann::ordered_json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<nlohmann::ordered_json> rows;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(nlohmann::ordered_json::parse(line));
  return rows;
}

}  // namespace sqlrl::testing
