// An independent reader of TensorBoard event files for the tests (RUN/tb, rl/tb_log.h). It shares
// no code with runtime/tfevents.cpp: its own TFRecord framing and CRC mask, written from
// tensorflow/core/lib/io/record_reader.cc and tensorflow/core/lib/hash/crc32c.h (tensorflow/
// tensorflow repository), ISA-L's crc32_iscsi for the CRC-32C itself (anchored to the standard
// check value by the test TensorBoardFormat.Crc32cOfTheStandardCheckString), and the Event classes
// protoc generated from runtime/proto (TensorBoard's field numbers). A bad CRC or an undecodable
// record throws, naming the file and offset.
#pragma once
#include <isa-l/crc.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/proto/event.pb.h"

namespace sqlrl::testing {

// CRC-32C: ISA-L's crc32_iscsi takes and returns the register without the standard's inversions.
inline uint32_t tb_crc32c(const char* p, size_t n) {
  return ~crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<char*>(p)), static_cast<int>(n), 0xffffffffu);
}
// crc32c.h: Mask(crc) = ((crc >> 15) | (crc << 17)) + kMaskDelta, kMaskDelta = 0xa282ead8.
inline uint32_t tb_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

inline uint64_t tb_le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

// One framed record (record_writer.cc): length, masked CRC of the length, data, masked CRC of the data.
inline std::string tb_frame(const std::string& data) {
  std::string r;
  for (int i = 0; i < 8; ++i) r.push_back(static_cast<char>((static_cast<uint64_t>(data.size()) >> (8 * i)) & 0xff));
  const uint32_t lc = tb_mask(tb_crc32c(r.data(), 8)), dc = tb_mask(tb_crc32c(data.data(), data.size()));
  for (int i = 0; i < 4; ++i) r.push_back(static_cast<char>((lc >> (8 * i)) & 0xff));
  r += data;
  for (int i = 0; i < 4; ++i) r.push_back(static_cast<char>((dc >> (8 * i)) & 0xff));
  return r;
}

// Every record of one file, each CRC checked; the file must end exactly after its last record.
inline std::vector<std::string> tb_read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  std::vector<std::string> records;
  size_t at = 0;
  auto bad = [&](const std::string& what) { throw std::runtime_error(path + " at byte " + std::to_string(at) + ": " + what); };
  while (at < s.size()) {
    if (s.size() - at < 12) bad("a record header cut short");
    const uint64_t length = tb_le(s, at, 8);
    if (tb_le(s, at + 8, 4) != tb_mask(tb_crc32c(s.data() + at, 8))) bad("length CRC mismatch");
    if (s.size() - at - 12 < length + 4) bad("record data cut short");
    if (tb_le(s, at + 12 + length, 4) != tb_mask(tb_crc32c(s.data() + at + 12, length))) bad("data CRC mismatch");
    records.push_back(s.substr(at + 12, length));
    at += 12 + length + 4;
  }
  return records;
}

// Every event of one file.
inline std::vector<tensorboard::Event> tb_read_file(const std::string& path) {
  std::vector<tensorboard::Event> events;
  for (const std::string& r : tb_read_records(path)) {
    tensorboard::Event e;
    if (!e.ParseFromString(r)) throw std::runtime_error(path + ": a record is not a tensorboard.Event");
    events.push_back(std::move(e));
  }
  return events;
}

// A protobuf message's fields by number, from the wire format itself (protobuf's encoding
// guide): varints as numbers, fixed64/fixed32/length-delimited fields as their bytes. Checks
// field numbers without the generated classes, which share runtime/proto with the writer.
struct TbWire {
  std::multimap<int, uint64_t> varints;
  std::multimap<int, std::string> bytes;
  std::string one(int field) const {
    if (bytes.count(field) != 1) throw std::runtime_error("field " + std::to_string(field) + " is not there once");
    return bytes.find(field)->second;
  }
  uint64_t num(int field) const {
    if (varints.count(field) != 1) throw std::runtime_error("varint field " + std::to_string(field) + " is not there once");
    return varints.find(field)->second;
  }
};
inline TbWire tb_wire(const std::string& msg) {
  TbWire w;
  size_t at = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0; at < msg.size(); shift += 7) {
      const auto b = static_cast<unsigned char>(msg[at++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error("a varint cut short");
  };
  while (at < msg.size()) {
    const uint64_t key = varint();
    const int field = static_cast<int>(key >> 3);
    const size_t n = (key & 7) == 1 ? 8 : (key & 7) == 5 ? 4 : (key & 7) == 2 ? static_cast<size_t>(varint()) : 0;
    if ((key & 7) == 0) {
      w.varints.emplace(field, varint());
      continue;
    }
    if (n == 0 && (key & 7) != 2) throw std::runtime_error("wire type " + std::to_string(key & 7));
    if (msg.size() - at < n) throw std::runtime_error("a field cut short");
    w.bytes.emplace(field, msg.substr(at, n));
    at += n;
  }
  return w;
}

// The events files of a tb folder in name order (TensorBoard's reading order).
inline std::vector<std::string> tb_files(const std::string& dir) {
  std::vector<std::string> files;
  if (!std::filesystem::is_directory(dir)) return files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().find("tfevents") != std::string::npos) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// What a tb folder holds, as TensorBoard would see it: each (tag, step) with every value logged
// there (more than one: the step appears twice), and the text of the text summaries.
struct TbContents {
  std::map<std::pair<std::string, int64_t>, std::vector<float>> scalars;
  std::map<std::pair<std::string, int64_t>, std::vector<std::string>> texts;
  int64_t files = 0, file_version_first = 0;
};
inline TbContents tb_read_dir(const std::string& dir) {
  TbContents c;
  for (const std::string& f : tb_files(dir)) {
    const std::vector<tensorboard::Event> events = tb_read_file(f);
    ++c.files;
    if (!events.empty() && events[0].file_version() == "brain.Event:2") ++c.file_version_first;
    for (const tensorboard::Event& e : events) {
      if (!e.has_summary()) continue;
      for (const tensorboard::Summary::Value& v : e.summary().value()) {
        if (v.value_case() == tensorboard::Summary::Value::kSimpleValue) {
          c.scalars[{v.tag(), e.step()}].push_back(v.simple_value());
        } else if (v.value_case() == tensorboard::Summary::Value::kTensor) {
          // The text plugin's shape: plugin "text" metadata and a DT_STRING tensor of one string.
          if (v.metadata().plugin_data().plugin_name() != "text" || v.tensor().dtype() != tensorboard::DT_STRING ||
              v.tensor().string_val_size() != 1)
            throw std::runtime_error(f + ": tensor value '" + v.tag() + "' is not a text summary");
          c.texts[{v.tag(), e.step()}].push_back(v.tensor().string_val(0));
        }
      }
    }
  }
  return c;
}

// One metrics.jsonl line's numbers as tag paths (the same spelling docs/tensorboard.md gives:
// nested keys joined by '/'); "step" is the event step. A null (a NaN in the trainer) is NaN.
inline void tb_flatten(const nlohmann::json& j, const std::string& tag, std::map<std::string, double>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) tb_flatten(v, tag.empty() ? k : tag + "/" + k, out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) tb_flatten(j[i], tag + "/" + std::to_string(i), out);
  } else if (j.is_boolean()) {
    out[tag] = j.get<bool>() ? 1.0 : 0.0;
  } else if (j.is_number()) {
    out[tag] = j.get<double>();
  } else if (j.is_null()) {
    out[tag] = std::numeric_limits<double>::quiet_NaN();
  }
}

}  // namespace sqlrl::testing
