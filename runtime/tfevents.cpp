#include "runtime/tfevents.h"

#include <isa-l/crc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/proto/event.pb.h"

namespace sqlrl {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "events.out.tfevents.";

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

void append_event(EventFile& f, const tensorboard::Event& e) {
  std::string data;
  check(e.SerializeToString(&data), f.path, ": cannot serialize an event of step ", e.step());
  f.out << tfrecord_frame(data);
  f.out.flush();
  check(f.out.good(), f.path, ": write failed");
}

// The Unix seconds in an events file's name (0 when the name has none).
int64_t name_seconds(const std::string& name) {
  return std::strtoll(name.c_str() + std::strlen(kPrefix), nullptr, 10);
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  // ISA-L's crc32_iscsi neither inverts its seed nor its result; CRC-32C does both (RFC 3720 B.4).
  uint32_t crc = 0xffffffffu;
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  while (n > 0) {  // its length is an int
    const int chunk = static_cast<int>(std::min<size_t>(n, 1u << 30));
    crc = crc32_iscsi(p, chunk, crc);
    p += chunk, n -= static_cast<size_t>(chunk);
  }
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  // tensorflow/core/lib/hash/crc32c.h Mask: a CRC of data that holds CRCs is itself weak.
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(const std::string& data) {
  std::string r;
  r.reserve(data.size() + 16);
  put_u64(r, data.size());
  put_u32(r, masked_crc32c(r.data(), 8));
  r += data;
  put_u32(r, masked_crc32c(data.data(), data.size()));
  return r;
}

std::vector<std::string> read_tfrecords(const std::string& path) {
  const std::string bytes = read_file_text(path);
  std::vector<std::string> records;
  size_t at = 0;
  while (bytes.size() - at >= 12) {
    const uint64_t length = get_le(bytes.data() + at, 8);
    check(static_cast<uint32_t>(get_le(bytes.data() + at + 8, 4)) == masked_crc32c(bytes.data() + at, 8), path,
          ": the record at byte ", at, " has a corrupt length (CRC mismatch); the file is damaged");
    if (bytes.size() - at - 12 < length + 4) break;  // the last record, cut short by a crash
    const char* data = bytes.data() + at + 12;
    check(static_cast<uint32_t>(get_le(data + length, 4)) == masked_crc32c(data, length), path,
          ": the record at byte ", at, " (", length, " bytes) has corrupt data (CRC mismatch); the file is damaged");
    records.emplace_back(data, length);
    at += 12 + length + 4;
  }
  return records;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> names;
  if (!fs::is_directory(dir)) return names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.rfind(kPrefix, 0) == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> paths;
  for (const std::string& n : names) paths.push_back((fs::path(dir) / n).string());
  return paths;
}

EventFile create_event_file(const std::string& dir) {
  fs::create_directories(dir);
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == 0) std::strcpy(host, "localhost");
  const double now = unix_seconds();
  int64_t seconds = static_cast<int64_t>(now);
  for (const std::string& p : event_files(dir)) seconds = std::max(seconds, name_seconds(fs::path(p).filename()) + 1);
  char name[320];
  std::snprintf(name, sizeof name, "%s%010lld.%s", kPrefix, static_cast<long long>(seconds), host);
  EventFile f;
  f.path = (fs::path(dir) / name).string();
  f.out.open(f.path, std::ios::binary | std::ios::app);
  check(f.out.good(), f.path, ": cannot open for writing");
  tensorboard::Event e;
  e.set_wall_time(now);
  e.set_step(0);
  e.set_file_version("brain.Event:2");
  append_event(f, e);
  return f;
}

void write_scalars(EventFile& f, int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  tensorboard::Event e;
  e.set_wall_time(unix_seconds());
  e.set_step(step);
  for (const auto& [tag, value] : values) {
    tensorboard::Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  append_event(f, e);
}

void write_text(EventFile& f, int64_t step, const std::string& tag, const std::string& markdown) {
  tensorboard::Event e;
  e.set_wall_time(unix_seconds());
  e.set_step(step);
  tensorboard::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  // tensorboard/plugins/text/metadata.py: plugin "text", content TextPluginData{version 0} (no bytes).
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  v->mutable_metadata()->set_data_class(tensorboard::DATA_CLASS_TENSOR);
  tensorboard::TensorProto* t = v->mutable_tensor();
  t->set_dtype(tensorboard::DT_STRING);
  t->mutable_tensor_shape();  // rank 0: one string
  t->add_string_val(markdown);
  append_event(f, e);
}

void truncate_event_files(const std::string& dir, const std::function<bool(int64_t step, const std::string& tag)>& keep) {
  for (const std::string& path : event_files(dir)) {
    std::string kept;
    bool any_summary = false;
    for (const std::string& record : read_tfrecords(path)) {
      tensorboard::Event e;
      check(e.ParseFromString(record), path, ": a record is not a tensorboard.Event");
      const bool summary = e.has_summary();
      const std::string tag = summary && e.summary().value_size() > 0 ? e.summary().value(0).tag() : "";
      if (summary && !keep(e.step(), tag)) continue;
      any_summary = any_summary || summary;
      kept += tfrecord_frame(record);
    }
    if (!any_summary) {
      fs::remove(path);
      continue;
    }
    // Not write_text_atomic: its <path>.tmp would hold "tfevents", and TensorBoard reads every such file.
    const std::string tmp = (fs::path(dir) / ".rewrite.tmp").string();
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << kept;
      out.flush();
      check(out.good(), tmp, ": write failed");
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);
    check(!ec, path, ": cannot rename ", tmp, " into place: ", ec.message());
  }
}

}  // namespace sqlrl
