// safetensors reader: map, validate the header completely, then hand out views or conversions.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/json_depth.h"
#include "weights/safetensors.h"

namespace sqlrl {

using json = nlohmann::json;

size_t st_dtype_size(StDType dtype) {
  switch (dtype) {
    case StDType::BOOL:
    case StDType::U8:
    case StDType::I8: return 1;
    case StDType::I16:
    case StDType::F16:
    case StDType::BF16: return 2;
    case StDType::I32:
    case StDType::F32: return 4;
    case StDType::I64:
    case StDType::F64: return 8;
  }
  return 0;
}

const char* st_dtype_name(StDType dtype) {
  switch (dtype) {
    case StDType::BOOL: return "BOOL";
    case StDType::U8: return "U8";
    case StDType::I8: return "I8";
    case StDType::I16: return "I16";
    case StDType::I32: return "I32";
    case StDType::I64: return "I64";
    case StDType::F16: return "F16";
    case StDType::BF16: return "BF16";
    case StDType::F32: return "F32";
    case StDType::F64: return "F64";
  }
  return "?";
}

std::optional<StDType> parse_st_dtype(const std::string& name) {
  for (StDType d : {StDType::BOOL, StDType::U8, StDType::I8, StDType::I16, StDType::I32, StDType::I64, StDType::F16,
                    StDType::BF16, StDType::F32, StDType::F64})
    if (name == st_dtype_name(d)) return d;
  return std::nullopt;
}

std::optional<DType> st_to_runtime(StDType dtype) {
  switch (dtype) {
    case StDType::U8: return DType::U8;
    case StDType::I32: return DType::I32;
    case StDType::I64: return DType::I64;
    case StDType::F16: return DType::F16;
    case StDType::BF16: return DType::BF16;
    case StDType::F32: return DType::F32;
    default: return std::nullopt;
  }
}

StDType runtime_to_st(DType dtype) {
  switch (dtype) {
    case DType::F32: return StDType::F32;
    case DType::BF16: return StDType::BF16;
    case DType::F16: return StDType::F16;
    case DType::I32: return StDType::I32;
    case DType::I64: return StDType::I64;
    case DType::U8: return StDType::U8;
  }
  fail("runtime_to_st: unknown dtype");
}

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // overflow excluded when the header was validated
  return n;
}

std::string TensorEntry::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

MappedFile::~MappedFile() {
  if (data && size) munmap(const_cast<uint8_t*>(data), size);
}

std::shared_ptr<MappedFile> map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file");
  }
  auto map = std::make_shared<MappedFile>();
  map->path = path;
  map->size = static_cast<size_t>(st.st_size);
  if (map->size > 0) {
    void* p = mmap(nullptr, map->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail(path, ": cannot mmap ", map->size, " bytes: ", std::strerror(err));
    }
    map->data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid after close
  return map;
}

const TensorEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index.find(name);
  return it == index.end() ? nullptr : &tensors[it->second];
}

// A JSON integer that fits uint64 (nlohmann stores non-negative literals as unsigned and turns
// literals beyond 2^64 into doubles, which are refused here).
static uint64_t header_uint(const json& v, const std::string& path, const std::string& tensor, const char* field) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) fail(path, ": tensor '", tensor, "' has a negative ", field, " (", v.dump(), ")");
  fail(path, ": tensor '", tensor, "' has a ", field, " that is not a non-negative 64-bit integer: ", v.dump());
}

static TensorEntry parse_entry(const std::string& path, const std::string& name, const json& v) {
  check(v.is_object(), path, ": tensor '", name, "' must be a JSON object, got ", v.type_name());
  TensorEntry e;
  e.name = name;
  auto dtype_it = v.find("dtype");
  check(dtype_it != v.end(), path, ": tensor '", name, "' has no \"dtype\"");
  if (!dtype_it->is_string()) fail(path, ": tensor '", name, "' has a non-string dtype ", dtype_it->dump());
  std::optional<StDType> dtype = parse_st_dtype(dtype_it->get<std::string>());
  check(dtype.has_value(), path, ": tensor '", name, "' has unsupported dtype '", dtype_it->get<std::string>(),
        "' (supported: BOOL U8 I8 I16 I32 I64 F16 BF16 F32 F64)");
  e.dtype = *dtype;

  auto shape_it = v.find("shape");
  check(shape_it != v.end(), path, ": tensor '", name, "' has no \"shape\"");
  if (!shape_it->is_array()) fail(path, ": tensor '", name, "' has a shape that is not an array: ", shape_it->dump());
  uint64_t numel = 1;
  for (const json& d : *shape_it) {
    uint64_t dim = header_uint(d, path, name, "shape dimension");
    check(dim <= static_cast<uint64_t>(INT64_MAX), path, ": tensor '", name, "' dimension ", dim, " is too large");
    if (__builtin_mul_overflow(numel, dim, &numel) || numel > static_cast<uint64_t>(INT64_MAX))
      fail(path, ": tensor '", name, "' shape ", shape_it->dump(), " has more than 2^63 elements");
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t expected_bytes = 0;
  if (__builtin_mul_overflow(numel, st_dtype_size(e.dtype), &expected_bytes))
    fail(path, ": tensor '", name, "' shape ", shape_it->dump(), " overflows 64-bit byte counts");

  auto off_it = v.find("data_offsets");
  check(off_it != v.end(), path, ": tensor '", name, "' has no \"data_offsets\"");
  if (!off_it->is_array() || off_it->size() != 2)
    fail(path, ": tensor '", name, "' data_offsets must be [begin, end], got ", off_it->dump());
  e.begin = header_uint((*off_it)[0], path, name, "data_offsets begin");
  e.end = header_uint((*off_it)[1], path, name, "data_offsets end");
  check(e.begin <= e.end, path, ": tensor '", name, "' data_offsets [", e.begin, ", ", e.end, "] end before they begin");
  if (e.end - e.begin != expected_bytes)
    fail(path, ": tensor '", name, "' spans ", e.end - e.begin, " bytes but shape ", e.shape_str(), " of ",
         st_dtype_name(e.dtype), " needs ", expected_bytes);
  return e;
}

namespace {

// nlohmann keeps the last of duplicate keys silently; a SAX pass sees every key, so it tracks the
// keys of each open object and reports the first repeat (a repeated tensor name is ambiguous).
// Not the parser callback it replaces: nlohmann's callback parser scans the parent object at
// every object's end (json_sax_dom_callback_parser::end_object), quadratic in the tensors, so a
// header of 30,000 zero-size tensors took 12.5 s and 1M tensors minutes. Linear, run on text the
// DOM parse accepted.
struct DuplicateKeys : nlohmann::json_sax<json> {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open_objects.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (!open_objects.back().insert(k).second && duplicate.empty()) duplicate = k;
    return true;
  }
  bool end_object() override {
    open_objects.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

std::string first_duplicate_key(const char* text, uint64_t n) {
  DuplicateKeys keys;
  json::sax_parse(text, text + n, &keys);
  return keys.duplicate;
}

}  // namespace

SafetensorsFile parse_safetensors(std::shared_ptr<MappedFile> map) {
  const std::string& path = map->path;
  const size_t size = map->size;
  check(size >= 8, path, ": file has ", size, " bytes; a safetensors file starts with an 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | map->data[i];  // little-endian on every host
  check(n <= kMaxHeaderBytes, path, ": header length ", n, " exceeds the ", kMaxHeaderBytes, "-byte limit");
  check(n <= size - 8, path, ": header length ", n, " runs past the end of the file (", size - 8,
        " bytes after the length field)");
  check(n >= 2, path, ": header length ", n, " is too short for a JSON object");
  const char* text = reinterpret_cast<const char*>(map->data + 8);
  check(text[0] == '{', path, ": header must start with '{', found byte ", static_cast<int>(map->data[8]));

  check_json_depth(std::string_view(text, n), path + ": header");
  json header;
  try {
    header = json::parse(text, text + n);  // the lexer also rejects ill-formed UTF-8
  } catch (const json::exception& e) {
    fail(path, ": header JSON (", n, " bytes) is invalid: ", e.what());
  }
  const std::string duplicate = first_duplicate_key(text, n);
  check(duplicate.empty(), path, ": header has the key '", duplicate, "' more than once");
  check(header.is_object(), path, ": header must be a JSON object, got ", header.type_name());

  SafetensorsFile file;
  file.path = path;
  file.header_bytes = n;
  file.data_start = 8 + n;
  const uint64_t data_size = size - file.data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      check(it->is_object(), path, ": __metadata__ must be an object of strings, got ", it->type_name());
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail(path, ": __metadata__ value for '", m.key(), "' must be a string, got ", m->dump());
        file.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    TensorEntry e = parse_entry(path, it.key(), *it);
    check(e.end <= data_size, path, ": tensor '", e.name, "' ends at byte ", e.end, " of the data buffer, past its size ",
          data_size, " (file size ", size, ")");
    file.tensors.push_back(std::move(e));
  }

  std::sort(file.tensors.begin(), file.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // As the reference implementation: tensors tile the data buffer exactly, no overlap, no gap.
  uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& e : file.tensors) {
    if (e.begin < covered)
      fail(path, ": tensor '", e.name, "' [", e.begin, ", ", e.end, ") overlaps tensor '", previous->name, "' [",
           previous->begin, ", ", previous->end, ")");
    if (e.begin > covered)
      fail(path, ": ", e.begin - covered, " unused bytes at data offset ", covered, " before tensor '", e.name, "'");
    covered = e.end;
    previous = &e;
  }
  check(covered == data_size, path, ": the tensors cover ", covered, " bytes but the data buffer has ", data_size,
        " (", data_size - covered, " trailing bytes)");
  for (size_t i = 0; i < file.tensors.size(); ++i) file.index[file.tensors[i].name] = i;
  file.map = std::move(map);
  return file;
}

SafetensorsFile open_safetensors(const std::string& path) { return parse_safetensors(map_file(path)); }

}  // namespace sqlrl
