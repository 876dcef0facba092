// Shared by the harnesses: what counts as an expected rejection, a per-process scratch folder for
// the parsers that only read files, and splitting one input into several files.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace sqlrl::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// SQLRL_FUZZ_STRICT=1 (set by the ctest replay, optional for scripts/fuzz.sh): only sqlrl::Error
// counts as a rejection. A bare std::exception (a nlohmann type_error, std::out_of_range from
// substr, bad_alloc) then aborts, so the input is reported: a parser let an error escape without
// naming the file and field.
inline bool strict_mode() {
  static const bool strict = [] {
    const char* v = std::getenv("SQLRL_FUZZ_STRICT");
    return v && std::string_view(v) == "1";
  }();
  return strict;
}

// Runs `body`; an exception with a message is the parser rejecting bad input, which is fine.
// Anything else (a crash, a sanitizer report, a hang, an exception of another type) is a finding.
template <typename Body>
void expect_ok_or_error(Body&& body) {
  try {
    body();
  } catch (const sqlrl::Error&) {
  } catch (const std::exception& e) {
    if (strict_mode()) {
      std::fprintf(stderr, "fuzz: exception other than sqlrl::Error: %s\n", e.what());
      std::abort();
    }
  }
}

// A folder of its own for this process under $TMPDIR (scripts/fuzz.sh points TMPDIR into its work
// folder), removed at normal exit. libFuzzer leaves through _Exit on a crash, so a crashed run's
// folder stays behind for fuzz.sh to remove.
inline const std::string& scratch_dir() {
  struct Dir {
    std::string path;
    Dir() {
      const char* tmp = std::getenv("TMPDIR");
      std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/sqlrl-fuzz-XXXXXX";
      if (!mkdtemp(pattern.data())) {
        std::perror("fuzz: mkdtemp");
        std::abort();
      }
      path = pattern;
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Dir dir;
  return dir.path;
}

inline void write_file(const std::string& path, std::string_view bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.good()) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

// The input cut at each line that is exactly `separator` ("====="): part 0 is everything before
// the first such line. Missing parts are empty, so any input yields at least `parts` strings.
inline std::vector<std::string> split_parts(std::string_view text, std::string_view separator, size_t parts) {
  std::vector<std::string> out;
  std::string current;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    if (line == separator && out.size() + 1 < parts) {
      out.push_back(std::move(current));
      current.clear();
    } else {
      current.append(line);
      if (nl != std::string_view::npos) current.push_back('\n');
    }
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  out.push_back(std::move(current));
  while (out.size() < parts) out.emplace_back();
  return out;
}

}  // namespace sqlrl::fuzz
