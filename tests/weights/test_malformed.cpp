// Malformed safetensors files: each must give an sqlrl::Error naming the file and the problem,
// never a crash or an out-of-bounds read. This file is also built as test_weights_asan.
#include <gtest/gtest.h>

#include <random>

#include "tests/weights/weights_test_util.h"
#include "weights/safetensors.h"

namespace sqlrl {
namespace {

using testing::safetensors_image;
using testing::TempDir;
using testing::write_bytes;

struct BadCase {
  const char* label;
  std::string image;                 // whole file
  std::vector<std::string> expect;  // substrings of the error message
};

std::string f32_entry(const char* name, const char* shape, uint64_t begin, uint64_t end) {
  return std::string("\"") + name + "\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

std::vector<BadCase> bad_cases() {
  const std::string eight(8, '\x01');
  const std::string good_header = "{" + f32_entry("a", "[2]", 0, 8) + "}";
  std::vector<BadCase> cases = {
      {"empty file", "", {"has 0 bytes", "8-byte header length"}},
      {"shorter than the length field", std::string("\x05\x00\x00", 3), {"has 3 bytes"}},
      {"header length past EOF", safetensors_image(good_header, eight, 4096), {"header length 4096", "past the end"}},
      {"huge header length", safetensors_image(good_header, eight, ~uint64_t{0}), {"exceeds", "limit"}},
      {"header length just above the limit", safetensors_image(good_header, eight, kMaxHeaderBytes + 1), {"exceeds"}},
      {"zero header length", safetensors_image("", eight, 0), {"too short"}},
      {"header not an object", safetensors_image("[1,2,3]", ""), {"must start with '{'"}},
      {"truncated JSON", safetensors_image("{\"a\":{\"dtype\":\"F32\",\"sha", ""), {"header JSON", "invalid"}},
      {"bad JSON syntax", safetensors_image("{\"a\" 1}", ""), {"header JSON", "invalid"}},
      {"non-UTF-8 tensor name",
       safetensors_image("{" + f32_entry("bad\xff\xfe", "[2]", 0, 8) + "}", eight), {"header JSON", "UTF-8"}},
      {"unknown dtype",
       safetensors_image("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", "ab"),
       {"tensor 'w'", "unsupported dtype 'F8_E4M3'"}},
      {"dtype not a string", safetensors_image("{\"w\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", eight),
       {"tensor 'w'", "non-string dtype"}},
      {"wrong byte count", safetensors_image("{" + f32_entry("w", "[3]", 0, 8) + "}", eight),
       {"tensor 'w'", "spans 8 bytes", "needs 12"}},
      {"offsets past the data",
       safetensors_image("{" + f32_entry("a", "[2]", 0, 8) + "," + f32_entry("b", "[2]", 8, 16) + "}", eight),
       {"tensor 'b'", "ends at byte 16", "past its size 8"}},
      {"overlapping offsets",
       safetensors_image("{" + f32_entry("a", "[2]", 0, 8) + "," + f32_entry("b", "[2]", 4, 12) + "}", eight + "1234"),
       {"overlaps", "'a'"}},
      {"gap between tensors",
       safetensors_image("{" + f32_entry("a", "[1]", 0, 4) + "," + f32_entry("b", "[1]", 8, 12) + "}", "123456789012"),
       {"4 unused bytes", "before tensor 'b'"}},
      {"trailing bytes", safetensors_image(good_header, eight + "xx"), {"cover 8 bytes", "has 10"}},
      {"end before begin", safetensors_image("{" + f32_entry("w", "[0]", 8, 0) + "}", eight), {"tensor 'w'", "end before"}},
      {"negative dimension", safetensors_image("{" + f32_entry("w", "[-2]", 0, 8) + "}", eight),
       {"tensor 'w'", "negative shape dimension"}},
      {"fractional dimension", safetensors_image("{" + f32_entry("w", "[2.5]", 0, 8) + "}", eight),
       {"tensor 'w'", "not a non-negative 64-bit integer"}},
      {"dimension beyond 2^64", safetensors_image("{" + f32_entry("w", "[18446744073709551617]", 0, 8) + "}", eight),
       {"tensor 'w'", "not a non-negative 64-bit integer"}},
      {"overflowing shape product",
       safetensors_image("{" + f32_entry("w", "[4294967296, 4294967296, 4]", 0, 8) + "}", eight),
       {"tensor 'w'", "more than 2^63 elements"}},
      {"byte count overflow", safetensors_image("{" + f32_entry("w", "[4611686018427387904]", 0, 8) + "}", eight),
       {"tensor 'w'", "overflows 64-bit byte counts"}},
      {"negative offset",
       safetensors_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", eight),
       {"tensor 'w'", "negative data_offsets begin"}},
      {"three data_offsets",
       safetensors_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", eight),
       {"tensor 'w'", "data_offsets must be [begin, end]"}},
      {"missing shape", safetensors_image("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", eight),
       {"tensor 'w'", "no \"shape\""}},
      {"shape not a list", safetensors_image("{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", eight),
       {"tensor 'w'", "shape that is not an array"}},
      {"tensor not an object", safetensors_image("{\"w\":[1,2]}", ""), {"tensor 'w'", "must be a JSON object"}},
      {"duplicate tensor name",
       safetensors_image("{" + f32_entry("w", "[1]", 0, 4) + "," + f32_entry("w", "[1]", 4, 8) + "}", eight),
       {"key 'w' more than once"}},
      {"metadata value not a string", safetensors_image("{\"__metadata__\":{\"format\":1}," + f32_entry("w", "[2]", 0, 8) + "}", eight),
       {"__metadata__", "'format'", "must be a string"}},
      {"metadata not an object", safetensors_image("{\"__metadata__\":\"pt\"}", ""), {"__metadata__ must be an object"}},
  };
  // 100,000 levels (a 200 KB header) in each field the reader quotes in its errors: their dump()
  // recursed once per level and overflowed the stack (runtime/json_depth.h).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string w = "{\"w\":{";
  cases.push_back({"deep dtype", safetensors_image(w + "\"dtype\":" + deep + ",\"shape\":[2],\"data_offsets\":[0,8]}}", eight),
                   {"header", "nests deeper than 256 levels"}});
  cases.push_back({"deep shape", safetensors_image(w + "\"dtype\":\"F32\",\"shape\":" + deep + ",\"data_offsets\":[0,8]}}", eight),
                   {"header", "nests deeper than 256 levels"}});
  cases.push_back({"deep data_offsets", safetensors_image(w + "\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":" + deep + "}}", eight),
                   {"header", "nests deeper than 256 levels"}});
  cases.push_back({"deep __metadata__", safetensors_image("{\"__metadata__\":{\"format\":" + deep + "}}", ""),
                   {"header", "nests deeper than 256 levels"}});
  return cases;
}

TEST(SafetensorsMalformed, EveryCaseIsAClearError) {
  TempDir dir;
  std::vector<BadCase> cases = bad_cases();
  ASSERT_GE(cases.size(), 15u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const BadCase& c = cases[i];
    std::string path = dir.file("bad_" + std::to_string(i) + ".safetensors");
    write_bytes(path, c.image);
    try {
      open_safetensors(path);
      ADD_FAILURE() << c.label << ": opened without error";
    } catch (const Error& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(path), std::string::npos) << c.label << ": error does not name the file: " << message;
      for (const std::string& s : c.expect)
        EXPECT_NE(message.find(s), std::string::npos) << c.label << ": expected '" << s << "' in: " << message;
    }
  }
}

TEST(SafetensorsMalformed, DirectoryAndMissingFile) {
  TempDir dir;
  EXPECT_THROW(open_safetensors(dir.path.string()), Error);
  EXPECT_THROW(open_safetensors(dir.file("absent.safetensors")), Error);
}

// Every single-byte corruption of a small valid file either opens (and then every tensor lies
// inside the file) or throws Error; under ASan this is the out-of-bounds check.
TEST(SafetensorsMalformed, ByteMutationsNeverCrash) {
  TempDir dir;
  std::string data;
  for (int i = 0; i < 24; ++i) data.push_back(static_cast<char>(i));
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}," + f32_entry("a", "[2]", 0, 8) +
                       ",\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[8,16]}," +
                       "\"c\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[16,24]}}";
  std::string good = safetensors_image(header, data);
  ASSERT_EQ(open_safetensors([&] {
              std::string p = dir.file("good.safetensors");
              write_bytes(p, good);
              return p;
            }()).tensors.size(), 3u);
  std::mt19937 rng(1234);
  std::string path = dir.file("mutated.safetensors");
  int opened = 0, refused = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    std::string image = good;
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits; ++k) image[rng() % image.size()] = static_cast<char>(rng() & 0xff);
    if (trial % 10 == 0) image.resize(rng() % image.size());  // truncations too
    write_bytes(path, image);
    try {
      SafetensorsFile f = open_safetensors(path);
      for (const TensorEntry& e : f.tensors) {
        ASSERT_LE(f.data_start + e.end, image.size());
        // Touch every byte: ASan would flag a view past the mapping.
        unsigned sum = 0;
        for (uint64_t b = 0; b < e.nbytes(); ++b) sum += f.bytes(e)[b];
        (void)sum;
      }
      ++opened;
    } catch (const Error&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(opened, 0);  // mutations inside tensor data leave a valid file
}

}  // namespace
}  // namespace sqlrl
