// safetensors: the Hugging Face tensor file format.
//   [8-byte little-endian N][N bytes of JSON header, space-padded][data buffer]
// The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into
// the data buffer) plus an optional "__metadata__" object of string -> string.
//
// Reading maps the file and validates the whole header before any tensor byte is touched:
// a file that opens is one whose every tensor lies inside the file, in order, with the byte
// count its shape and dtype imply. Views of the mapped bytes are zero-copy; load_tensor()
// converts straight from the mapping into a device Tensor (no intermediate copy of the file).
//
// Writing produces files the reference implementation reads: header padded to 8 bytes,
// tensors ordered by element size (largest first) then name, so every tensor starts at an
// offset aligned to its element size; written to `<path>.tmp` and renamed into place. A tensor's
// bytes come from the caller's memory, or are generated into the writer's buffers as it writes
// (TensorRecord::generate: a checkpoint of random weights never exists in memory whole).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <unordered_map>
#include <vector>

#include "runtime/tensor.h"

namespace sqlrl {

class ThreadPool;

// Every element type the format names that we accept. The runtime has fewer (no F64, I8, I16,
// BOOL): such tensors can be read as raw bytes, and F64 converts on load to f32/bf16/f16.
enum class StDType : uint8_t { BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64 };

size_t st_dtype_size(StDType dtype);
const char* st_dtype_name(StDType dtype);  // "BF16", as written in headers
std::optional<StDType> parse_st_dtype(const std::string& name);
std::optional<DType> st_to_runtime(StDType dtype);  // F32 -> DType::F32; F64 -> nullopt
StDType runtime_to_st(DType dtype);

// The reference implementation refuses headers above 100 MB; so do we (a 4B model's header is
// about 40 KB).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct TensorEntry {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data buffer
  int64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
  std::string shape_str() const;  // "[2, 3]"
};

// A read-only mapping of a whole file; unmapped when the last holder (file or view) goes.
struct MappedFile {
  std::string path;
  const uint8_t* data = nullptr;
  size_t size = 0;
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
};
std::shared_ptr<MappedFile> map_file(const std::string& path);

struct SafetensorsFile {
  std::string path;
  std::shared_ptr<MappedFile> map;
  uint64_t header_bytes = 0;  // N
  uint64_t data_start = 0;    // 8 + N
  std::vector<TensorEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  std::unordered_map<std::string, size_t> index;  // name -> position in tensors

  const TensorEntry* find(const std::string& name) const;
  const uint8_t* bytes(const TensorEntry& entry) const { return map->data + data_start + entry.begin; }
};

SafetensorsFile open_safetensors(const std::string& path);
// Validates a file image already in memory (the mapping); `map->path` names it in errors.
SafetensorsFile parse_safetensors(std::shared_ptr<MappedFile> map);

// Zero-copy CPU tensor over the mapped bytes; the view keeps the mapping alive. Fails for dtypes
// the runtime lacks, more than kMaxDims dimensions, or bytes not aligned to the element size.
Tensor tensor_view(const SafetensorsFile& file, const TensorEntry& entry);

// Converts the mapped bytes into a new contiguous tensor of `dtype` on `device`. Float sources
// (F16, BF16, F32, F64) go to any float dtype; integer sources only to their own dtype.
// CPU: one pass over the mapping on the thread pool. CUDA: the raw bytes are uploaded and
// converted on the device (F64 is narrowed on the host first).
Tensor load_tensor(const SafetensorsFile& file, const TensorEntry& entry, DType dtype, Device device);
// The same for several tensors of one file (returned in the order given): they are converted in
// file order while a helper thread keeps the disk reading ahead of the conversion, so a cold
// load runs at about the disk's speed.
std::vector<Tensor> load_tensors(const SafetensorsFile& file, const std::vector<const TensorEntry*>& entries,
                                 DType dtype, Device device);
// The same into tensors that already exist (contiguous CPU tensors of each entry's shape, any
// dtype the entry converts to), e.g. to reload a checkpoint into a live parameter table without
// allocating it again.
void load_tensors_into(const SafetensorsFile& file, const std::vector<const TensorEntry*>& entries,
                       const std::vector<Tensor>& destinations);

// --- writing ------------------------------------------------------------------------------------

// Elements [first, first + count) of a generated tensor, in its dtype, written to `out`.
using GenerateFn = std::function<void(uint64_t first, uint64_t count, void* out)>;

// One tensor to write: host bytes of `dtype` in row-major order. `data` must stay valid during
// the write and hold exactly numel(shape) * st_dtype_size(dtype) bytes.
// Or, with `generate` set instead of `data`, a tensor made while it is written: the writer fills
// its output buffers piecewise on the thread pool (several pieces at once, split wherever the
// pool's thread count puts the cuts), so what `generate` writes for an element must depend on
// the element's index alone. Nothing of the tensor is held beyond the writer's buffers.
struct TensorRecord {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  GenerateFn generate = nullptr;
  uint64_t nbytes() const;
};

// A record for a runtime tensor: copied to the host and made contiguous when needed; the copy
// (if any) is kept alive in `holder`.
TensorRecord record_of(const std::string& name, const Tensor& tensor, std::vector<Tensor>& holder);

// How bytes reach the disk: POSIX write() by default. Tests pass a function that fails with
// ENOSPC part-way to check that no partial file is left behind.
using WriteFn = std::function<ssize_t(int fd, const void* data, size_t bytes)>;

struct WriteOptions {
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  WriteFn write_fn;  // empty: ::write
  bool sync = true;  // fsync before the rename, so a crash never leaves a renamed empty file
  // Generated records: the size of each of the two buffers they are filled into (one is written
  // while the pool fills the other), a multiple of 8 (every element size), and the pool that fills
  // them (nullptr: default_thread_pool()).
  size_t chunk_bytes = size_t{32} << 20;
  ThreadPool* pool = nullptr;
  // Called on the writing call's thread with the bytes of tensor data each write put on disk (the
  // header not counted): a long write's progress.
  std::function<void(uint64_t bytes)> on_written = nullptr;
};

// The order tensors are laid out in: element size descending, then name.
std::vector<size_t> write_order(const std::vector<TensorRecord>& records);
// The header JSON (unpadded) for records laid out in write_order.
std::string safetensors_header(const std::vector<TensorRecord>& records, const std::map<std::string, std::string>& metadata);

// Writes `path` atomically: `<path>.tmp` then rename. On failure the tmp file is removed and the
// error names the path, the byte position and the system error.
void write_safetensors(const std::string& path, const std::vector<TensorRecord>& records,
                       const WriteOptions& options = {});

// Writes tmp files only (for multi-file atomic saves): returns the tmp path, which the caller
// renames or removes.
std::string write_safetensors_tmp(const std::string& path, const std::vector<TensorRecord>& records,
                                  const WriteOptions& options);

}  // namespace sqlrl
