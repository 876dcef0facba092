// The corpus replayer linked with each harness in the ordinary build (no libFuzzer): calls
// LLVMFuzzerTestOneInput once per file of the folders (or files) named on the command line, in
// name order. Fails when a folder holds no file, so a corpus that went missing is not a pass.
// A crash or sanitizer report in a harness ends the process, and ctest reports the test failed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  size_t total = 0;
  for (int a = 1; a < argc; ++a) {
    std::vector<fs::path> files;
    std::error_code ec;
    if (fs::is_directory(argv[a], ec)) {
      for (const auto& entry : fs::directory_iterator(argv[a], ec))
        if (entry.is_regular_file()) files.push_back(entry.path());
      if (ec) {
        std::fprintf(stderr, "%s: cannot list: %s\n", argv[a], ec.message().c_str());
        return 1;
      }
      if (files.empty()) {
        std::fprintf(stderr, "%s: empty corpus folder\n", argv[a]);
        return 1;
      }
    } else if (fs::is_regular_file(argv[a], ec)) {
      files.push_back(argv[a]);
    } else {
      std::fprintf(stderr, "%s: no such file or folder\n", argv[a]);
      return 1;
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      std::ifstream in(file, std::ios::binary);
      if (!in.good()) {
        std::fprintf(stderr, "%s: cannot read\n", file.c_str());
        return 1;
      }
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      // Printed before the call: when an input crashes, the last line names it.
      std::fprintf(stderr, "replay %s (%zu bytes)\n", file.c_str(), bytes.size());
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      ++total;
    }
  }
  std::fprintf(stderr, "replayed %zu inputs\n", total);
  return 0;
}
