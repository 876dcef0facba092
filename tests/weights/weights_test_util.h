// Helpers for the weights tests: a private temp folder and raw safetensors images.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace sqlrl::testing {

// A fresh folder under $TMPDIR, removed with everything in it when the object goes.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "sqlrl_weights_XXXXXX").string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    path = mkdtemp(buffer.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// [8-byte little-endian length of `header`][header][data]: a file image with a hand-written header.
inline std::string safetensors_image(const std::string& header, const std::string& data, uint64_t length_field) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((length_field >> (8 * i)) & 0xff);
  return out + header + data;
}
inline std::string safetensors_image(const std::string& header, const std::string& data) {
  return safetensors_image(header, data, header.size());
}

}  // namespace sqlrl::testing
