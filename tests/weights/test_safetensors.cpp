// safetensors reader and writer: golden file from the `safetensors` package, round trips of
// every dtype, conversions on load, layout and atomic writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "runtime/thread_pool.h"
#include "tests/test_util.h"
#include "tests/weights/weights_test_util.h"
#include "weights/safetensors.h"

namespace sqlrl {
namespace {

using nlohmann::json;
using testing::fixture_path;
using testing::read_bytes;
using testing::TempDir;

json read_json(const std::string& path) { return json::parse(read_bytes(path)); }

// Element i of a tensor as double, straight from the stored bytes.
double element(const uint8_t* p, StDType dtype, size_t i) {
  switch (dtype) {
    case StDType::BOOL:
    case StDType::U8: return p[i];
    case StDType::I8: return static_cast<int8_t>(p[i]);
    case StDType::I16: { int16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
    case StDType::I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case StDType::I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    case StDType::F16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return f16_bits_to_f32(v); }
    case StDType::BF16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return bf16_bits_to_f32(v); }
    case StDType::F32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case StDType::F64: { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
  }
  return NAN;
}

TEST(Safetensors, GoldenFileFromSafetensorsPackage) {
  SafetensorsFile f = open_safetensors(fixture_path("weights/st_all_dtypes.safetensors"));
  json expected = read_json(fixture_path("weights/st_all_dtypes.json"));
  ASSERT_EQ(f.tensors.size(), expected.size());
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.metadata.at("made_by"), "safetensors 0.7.0");
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    const TensorEntry* e = f.find(it.key());
    ASSERT_NE(e, nullptr) << it.key();
    EXPECT_STREQ(st_dtype_name(e->dtype), (*it)["dtype"].get<std::string>().c_str()) << it.key();
    EXPECT_EQ(e->shape, (*it)["shape"].get<std::vector<int64_t>>()) << it.key();
    const json& values = (*it)["values"];
    ASSERT_EQ(static_cast<size_t>(e->numel()), values.size()) << it.key();
    for (size_t i = 0; i < values.size(); ++i) {
      if (e->dtype == StDType::I64) {
        int64_t v;
        std::memcpy(&v, f.bytes(*e) + 8 * i, 8);
        EXPECT_EQ(v, values[i].get<int64_t>()) << it.key() << "[" << i << "]";
      } else {
        EXPECT_EQ(element(f.bytes(*e), e->dtype, i), values[i].get<double>()) << it.key() << "[" << i << "]";
      }
    }
  }
}

// The header is read in time linear in its size: 100,000 zero-size tensors (a 6 MB header). The
// parser callback that checked for duplicate keys scanned the whole object at each tensor's end:
// 20,000 tensors took 50 s, 100,000 would take over 20 minutes; now well under a second (the bound
// leaves room for a sanitizer build on a loaded machine). A duplicate is still found.
TEST(Safetensors, HeaderOfManyTensorsParsesInLinearTime) {
  TempDir dir;
  std::string header = "{";
  for (int i = 0; i < 100000; ++i)
    header += std::string(i ? "," : "") + "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
  const std::string path = dir.file("many.safetensors");
  testing::write_bytes(path, testing::safetensors_image(header + "}", ""));
  const auto start = std::chrono::steady_clock::now();
  SafetensorsFile f = open_safetensors(path);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(f.tensors.size(), 100000u);
  EXPECT_LT(seconds, 30.0);
  std::printf("100,000 tensors: header of %zu bytes read in %.3f s\n", header.size(), seconds);
  const std::string twice = dir.file("twice.safetensors");
  testing::write_bytes(twice, testing::safetensors_image(header + ",\"t77\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", ""));
  try {
    open_safetensors(twice);
    ADD_FAILURE() << "a repeated tensor name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("header has the key 't77' more than once"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, ViewsAreZeroCopyAndKeepTheMappingAlive) {
  Tensor view;
  const uint8_t* mapped = nullptr;
  {
    SafetensorsFile f = open_safetensors(fixture_path("weights/st_all_dtypes.safetensors"));
    const TensorEntry* e = f.find("f32");
    view = tensor_view(f, *e);
    mapped = f.bytes(*e);
  }  // the file object is gone; the view still holds the mapping
  EXPECT_EQ(view.data(), static_cast<const void*>(mapped));
  EXPECT_EQ(view.shape, Shape({3, 5}));
  json expected = read_json(fixture_path("weights/st_all_dtypes.json"));
  std::vector<float> got = to_floats(view);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected["f32"]["values"][i].get<double>());
}

TEST(Safetensors, ViewRefusesWhatTheRuntimeCannotHold) {
  SafetensorsFile f = open_safetensors(fixture_path("weights/st_all_dtypes.safetensors"));
  EXPECT_THROW(tensor_view(f, *f.find("f64")), Error);           // no F64 tensors in the runtime
  EXPECT_THROW(tensor_view(f, *f.find("five_dims_u8")), Error);  // 5 > kMaxDims
  EXPECT_EQ(tensor_view(f, *f.find("scalar_f32")).numel(), 1);
  EXPECT_EQ(tensor_view(f, *f.find("empty_f32")).numel(), 0);
}

TEST(Safetensors, LoadConvertsFloatsOnTheWay) {
  SafetensorsFile f = open_safetensors(fixture_path("weights/st_all_dtypes.safetensors"));
  json expected = read_json(fixture_path("weights/st_all_dtypes.json"));
  // bf16 / f16 -> f32 is exact; f64 -> f32 rounds like a C++ cast; f32 -> bf16 rounds to nearest even.
  for (const char* name : {"bf16", "f16", "f32"}) {
    std::vector<float> got = to_floats(load_tensor(f, *f.find(name), DType::F32, cpu_device()));
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[name]["values"][i].get<double>()) << name << i;
  }
  std::vector<float> narrowed = to_floats(load_tensor(f, *f.find("f64"), DType::F32, cpu_device()));
  for (size_t i = 0; i < narrowed.size(); ++i)
    EXPECT_EQ(narrowed[i], static_cast<float>(expected["f64"]["values"][i].get<double>()));
  Tensor bf = load_tensor(f, *f.find("f32"), DType::BF16, cpu_device());
  ASSERT_EQ(bf.dtype, DType::BF16);
  for (int64_t i = 0; i < bf.numel(); ++i)
    EXPECT_EQ(bf.data_as<uint16_t>()[i], f32_to_bf16_bits(static_cast<float>(expected["f32"]["values"][i].get<double>())));
  // The bf16 file values loaded as bf16 are the stored bits.
  Tensor same = load_tensor(f, *f.find("bf16"), DType::BF16, cpu_device());
  EXPECT_EQ(std::memcmp(same.data(), f.bytes(*f.find("bf16")), same.nbytes()), 0);
  Tensor ints = load_tensor(f, *f.find("i32"), DType::I32, cpu_device());
  EXPECT_EQ(ints.data_as<int32_t>()[0], INT32_MIN);
  EXPECT_THROW(load_tensor(f, *f.find("i32"), DType::F32, cpu_device()), Error);  // ints do not become floats
  EXPECT_THROW(load_tensor(f, *f.find("i16"), DType::I32, cpu_device()), Error);
}

// Over ReadAhead::kStep (8 MiB) of tensors, so the read-ahead thread runs; requested out of file
// order and with a gap (a tensor skipped), which load_tensors must walk in file order and hand
// back in the caller's order.
TEST(Safetensors, LoadTensorsKeepsTheCallersOrderOverLargeFiles) {
  TempDir dir;
  std::vector<std::vector<uint16_t>> blobs;
  std::vector<TensorRecord> records;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
      {"a", {1024, 2048}}, {"b", {1024, 2048}}, {"c", {7, 3}}, {"d", {512, 2048}}};
  blobs.reserve(specs.size());
  for (size_t t = 0; t < specs.size(); ++t) {
    size_t n = static_cast<size_t>(specs[t].second[0] * specs[t].second[1]);
    blobs.emplace_back(n);
    for (size_t i = 0; i < n; ++i) blobs[t][i] = f32_to_bf16_bits(static_cast<float>((i * 7 + t * 131) % 4093) - 2000.0f);
    records.push_back({specs[t].first, StDType::BF16, specs[t].second, blobs[t].data()});
  }
  std::string path = dir.file("big.safetensors");
  write_safetensors(path, records, {{{"format", "pt"}}, {}, false});
  SafetensorsFile f = open_safetensors(path);
  const std::vector<std::string> wanted = {"d", "c", "a"};  // "b" skipped
  std::vector<const TensorEntry*> entries;
  for (const std::string& name : wanted) entries.push_back(f.find(name));
  std::vector<Tensor> widened = load_tensors(f, entries, DType::F32, cpu_device());
  std::vector<Tensor> same = load_tensors(f, entries, DType::BF16, cpu_device());
  ASSERT_EQ(widened.size(), wanted.size());
  ASSERT_EQ(same.size(), wanted.size());
  for (size_t k = 0; k < wanted.size(); ++k) {
    size_t t = static_cast<size_t>(std::find_if(specs.begin(), specs.end(), [&](const auto& s) { return s.first == wanted[k]; }) - specs.begin());
    EXPECT_EQ(widened[k].shape, Shape(specs[t].second)) << wanted[k];
    ASSERT_EQ(static_cast<size_t>(widened[k].numel()), blobs[t].size()) << wanted[k];
    const float* got = widened[k].data_as<float>();
    size_t wrong = 0;
    for (size_t i = 0; i < blobs[t].size(); ++i) wrong += got[i] != bf16_bits_to_f32(blobs[t][i]);  // widening is exact
    EXPECT_EQ(wrong, 0u) << wanted[k];
    ASSERT_EQ(same[k].nbytes(), blobs[t].size() * 2) << wanted[k];
    EXPECT_EQ(std::memcmp(same[k].data(), blobs[t].data(), same[k].nbytes()), 0) << wanted[k];
  }
  EXPECT_THROW(load_tensors(f, {f.find("a")}, DType::I32, cpu_device()), Error);

  // Into existing tensors: the same values, written in place.
  std::vector<Tensor> into = {empty(Shape({512, 2048}), DType::F32), empty(Shape({7, 3}), DType::BF16),
                              empty(Shape({1024, 2048}), DType::F32)};
  const void* where = into[2].data();
  load_tensors_into(f, entries, into);
  EXPECT_EQ(into[2].data(), where);
  for (size_t k : {size_t{0}, size_t{2}})
    EXPECT_EQ(std::memcmp(into[k].data(), widened[k].data(), into[k].nbytes()), 0) << wanted[k];
  EXPECT_EQ(std::memcmp(into[1].data(), same[1].data(), into[1].nbytes()), 0);
  into[0] = empty(Shape({2048, 512}), DType::F32);  // same element count, other shape
  EXPECT_THROW(load_tensors_into(f, entries, into), Error);
  EXPECT_THROW(load_tensors_into(f, entries, {into[1]}), Error);
}

TEST(Safetensors, LoadOnCudaMatchesCpu) {
  SQLRL_REQUIRE_CUDA();
  SafetensorsFile f = open_safetensors(fixture_path("weights/st_all_dtypes.safetensors"));
  for (const char* name : {"bf16", "f16", "f32", "f64"}) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      Tensor cpu = load_tensor(f, *f.find(name), dtype, cpu_device());
      Tensor gpu = load_tensor(f, *f.find(name), dtype, cuda_device(0));
      EXPECT_EQ(to_floats(cpu), to_floats(gpu)) << name << " as " << dtype_name(dtype);
    }
  }
}

// Records of every dtype with distinct byte patterns, plus a scalar and an empty tensor.
struct RecordSet {
  std::vector<std::string> blobs;
  std::vector<TensorRecord> records;
};

RecordSet every_dtype() {
  RecordSet set;
  const StDType all[] = {StDType::BOOL, StDType::U8, StDType::I8, StDType::I16, StDType::I32,
                         StDType::I64, StDType::F16, StDType::BF16, StDType::F32, StDType::F64};
  set.blobs.reserve(16);
  for (StDType d : all) {
    std::vector<int64_t> shape = {3, 2};
    std::string blob(6 * st_dtype_size(d), '\0');
    for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(d == StDType::BOOL ? (i % 2) : (i * 37 + 11));
    set.blobs.push_back(blob);
    set.records.push_back({std::string("t_") + st_dtype_name(d), d, shape, nullptr});
  }
  set.blobs.push_back(std::string(4, '\x3f'));
  set.records.push_back({"scalar", StDType::F32, {}, nullptr});
  set.blobs.push_back("");
  set.records.push_back({"empty", StDType::F32, {0, 7}, nullptr});
  for (size_t i = 0; i < set.records.size(); ++i) set.records[i].data = set.blobs[i].data();
  return set;
}

TEST(Safetensors, RoundTripEveryDtype) {
  TempDir dir;
  RecordSet set = every_dtype();
  std::string path = dir.file("all.safetensors");
  write_safetensors(path, set.records, {{{"format", "pt"}, {"note", "round trip"}}, {}, true});
  SafetensorsFile f = open_safetensors(path);
  ASSERT_EQ(f.tensors.size(), set.records.size());
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"note", "round trip"}}));
  for (size_t i = 0; i < set.records.size(); ++i) {
    const TensorEntry* e = f.find(set.records[i].name);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->dtype, set.records[i].dtype);
    EXPECT_EQ(e->shape, set.records[i].shape);
    ASSERT_EQ(e->nbytes(), set.blobs[i].size());
    EXPECT_EQ(std::memcmp(f.bytes(*e), set.blobs[i].data(), e->nbytes()), 0) << e->name;
    // Larger elements first keeps every tensor aligned to its element size.
    EXPECT_EQ((f.data_start + e->begin) % st_dtype_size(e->dtype), 0u) << e->name;
  }
  EXPECT_EQ(f.data_start % 8, 0u);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(Safetensors, WriterIsDeterministicAndOrdered) {
  TempDir dir;
  RecordSet set = every_dtype();
  write_safetensors(dir.file("a.safetensors"), set.records);
  std::reverse(set.records.begin(), set.records.end());  // input order must not matter
  write_safetensors(dir.file("b.safetensors"), set.records);
  EXPECT_EQ(read_bytes(dir.file("a.safetensors")), read_bytes(dir.file("b.safetensors")));
  SafetensorsFile f = open_safetensors(dir.file("a.safetensors"));
  for (size_t i = 1; i < f.tensors.size(); ++i) {
    size_t prev = st_dtype_size(f.tensors[i - 1].dtype), cur = st_dtype_size(f.tensors[i].dtype);
    EXPECT_TRUE(prev > cur || (prev == cur && f.tensors[i - 1].name < f.tensors[i].name));
  }
}

TEST(Safetensors, RuntimeTensorsRoundTrip) {
  TempDir dir;
  Tensor a = from_floats({1.5f, -2.25f, 3.0f, 1e-8f, 65504.0f, -0.0f}, Shape({2, 3}), DType::F32);
  Tensor b = from_floats({0.1f, 0.2f, 0.3f, 0.4f}, Shape({4}), DType::BF16);
  Tensor strided = narrow(a, 1, 1, 2);  // non-contiguous: written as its contiguous copy
  std::vector<Tensor> holder;
  std::vector<TensorRecord> records = {record_of("a", a, holder), record_of("b", b, holder),
                                       record_of("s", strided, holder)};
  write_safetensors(dir.file("t.safetensors"), records);
  SafetensorsFile f = open_safetensors(dir.file("t.safetensors"));
  EXPECT_EQ(to_floats(tensor_view(f, *f.find("a"))), to_floats(a));
  EXPECT_EQ(to_floats(tensor_view(f, *f.find("b"))), to_floats(b));
  EXPECT_EQ(to_floats(tensor_view(f, *f.find("s"))), (std::vector<float>{-2.25f, 3.0f, 65504.0f, -0.0f}));
}

TEST(Safetensors, WriterRefusesDuplicatesAndReservedNames) {
  TempDir dir;
  float x = 1;
  std::vector<TensorRecord> dup = {{"w", StDType::F32, {1}, &x}, {"w", StDType::F32, {1}, &x}};
  EXPECT_THROW(write_safetensors(dir.file("d.safetensors"), dup), Error);
  std::vector<TensorRecord> reserved = {{"__metadata__", StDType::F32, {1}, &x}};
  EXPECT_THROW(write_safetensors(dir.file("r.safetensors"), reserved), Error);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path));
}

// A write function that accepts `budget` bytes, then fails like a full disk.
WriteFn disk_full_after(size_t budget) {
  auto left = std::make_shared<size_t>(budget);
  return [left](int fd, const void* data, size_t bytes) -> ssize_t {
    if (*left == 0) {
      errno = ENOSPC;
      return -1;
    }
    size_t n = std::min(bytes, *left);
    *left -= n;
    return ::write(fd, data, n);  // a short write, as a nearly full disk gives
  };
}

TEST(Safetensors, FailedWriteLeavesNoPartialFileAndKeepsTheOldOne) {
  TempDir dir;
  RecordSet set = every_dtype();
  std::string path = dir.file("model.safetensors");
  write_safetensors(path, set.records);
  std::string before = read_bytes(path);
  for (size_t budget : {size_t{0}, size_t{5}, size_t{100}, before.size() - 1}) {
    WriteOptions options;
    options.write_fn = disk_full_after(budget);
    try {
      write_safetensors(path, set.records, options);
      FAIL() << "write with budget " << budget << " succeeded";
    } catch (const Error& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(path + ".tmp"), std::string::npos) << message;
      EXPECT_NE(message.find(std::strerror(ENOSPC)), std::string::npos) << message;
      EXPECT_NE(message.find("at byte " + std::to_string(budget)), std::string::npos) << message;
    }
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp")) << budget;
    EXPECT_EQ(read_bytes(path), before) << budget;
  }
}

// Tensors large enough that the writer's buffers hold pieces of several of them and the pool
// cuts each buffer's pieces at element indices that depend on its thread count, with a data
// record between generated ones (the stream writes it from where it lies).
struct MixedSet {
  std::vector<std::string> blobs;
  std::vector<TensorRecord> records;
};
MixedSet mixed_records(const std::vector<bool>& generated) {
  MixedSet set;
  const std::pair<StDType, int64_t> tensors[] = {{StDType::F64, 1'001}, {StDType::F32, 100'003}, {StDType::F32, 17},
                                                 {StDType::I32, 5'003}, {StDType::BF16, 70'001}, {StDType::F16, 3},
                                                 {StDType::U8, 9}};
  set.blobs.reserve(std::size(tensors));
  for (const auto& [dtype, n] : tensors) {
    std::string blob(static_cast<size_t>(n) * st_dtype_size(dtype), '\0');
    for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>((i * 131 + set.blobs.size() * 7 + 1) % 251);
    set.blobs.push_back(blob);
  }
  for (size_t k = 0; k < std::size(tensors); ++k) {
    TensorRecord r{"t" + std::to_string(k), tensors[k].first, {tensors[k].second}, nullptr};
    const std::string* blob = &set.blobs[k];
    const size_t size = st_dtype_size(r.dtype);
    if (generated[k])
      r.generate = [blob, size](uint64_t first, uint64_t count, void* out) {
        std::memcpy(out, blob->data() + first * size, count * size);
      };
    else
      r.data = blob->data();
    set.records.push_back(r);
  }
  return set;
}

// Generated records write the bytes their data would (the same file, byte for byte), however
// the buffers and the pool's threads cut them; on_written counts every data byte once.
// Catches a piece written at the wrong buffer offset or with the wrong first element, a buffer
// reused before its write finished, a data record written out of order, and a cut that depends
// on the thread count.
TEST(Safetensors, GeneratedRecordsWriteTheBytesOfTheirData) {
  TempDir dir;
  const MixedSet plain = mixed_records(std::vector<bool>(7, false));
  write_safetensors(dir.file("data.safetensors"), plain.records);
  const std::string want = read_bytes(dir.file("data.safetensors"));
  uint64_t data_bytes = 0;
  for (const std::string& b : plain.blobs) data_bytes += b.size();
  ThreadPool one(1), three(3);
  for (ThreadPool* pool : {&one, &three})
    for (size_t chunk : {size_t{1} << 10, size_t{3} << 15, size_t{32} << 20}) {
      const MixedSet set = mixed_records({true, true, true, false, true, true, false});
      WriteOptions options;
      options.pool = pool;
      options.chunk_bytes = chunk;
      uint64_t reported = 0;
      options.on_written = [&](uint64_t bytes) { reported += bytes; };
      const std::string path = dir.file("gen.safetensors");
      write_safetensors(path, set.records, options);
      EXPECT_EQ(read_bytes(path), want) << pool->size() << " threads, chunks of " << chunk;
      EXPECT_EQ(reported, data_bytes) << pool->size() << " threads, chunks of " << chunk;
    }
  // A generator that fails, and one that writes no more than the disk takes: no file is left.
  MixedSet set = mixed_records(std::vector<bool>(7, true));
  set.records[4].generate = [](uint64_t, uint64_t, void*) { fail("the generator gave up"); };
  WriteOptions small;
  small.chunk_bytes = 4096;
  EXPECT_THROW(write_safetensors(dir.file("failed.safetensors"), set.records, small), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.file("failed.safetensors.tmp")));
  const MixedSet full = mixed_records(std::vector<bool>(7, true));
  small.write_fn = disk_full_after(want.size() / 2);
  try {
    write_safetensors(dir.file("full.safetensors"), full.records, small);
    FAIL() << "a write past the disk's budget succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at byte " + std::to_string(want.size() / 2)), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("full.safetensors.tmp")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("full.safetensors")));
  small.write_fn = nullptr;
  small.chunk_bytes = 12;
  EXPECT_THROW(write_safetensors(dir.file("odd.safetensors"), full.records, small), Error);
}

}  // namespace
}  // namespace sqlrl
