// safetensors writer: deterministic layout, 8-byte padded header, tmp file + fsync + rename.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <future>
#include <nlohmann/json.hpp>
#include <numeric>

#include "runtime/thread_pool.h"
#include "weights/safetensors.h"

namespace sqlrl {

using json = nlohmann::json;

uint64_t TensorRecord::nbytes() const {
  uint64_t n = st_dtype_size(dtype);
  for (int64_t d : shape) {
    check(d >= 0, "tensor '", name, "' has a negative dimension ", d);
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

TensorRecord record_of(const std::string& name, const Tensor& tensor, std::vector<Tensor>& holder) {
  Tensor host = tensor;
  if (!tensor.device().is_cpu() || !tensor.is_contiguous()) {
    host = empty(tensor.shape, tensor.dtype, cpu_device());
    copy(host, tensor);
    holder.push_back(host);
  }
  TensorRecord r;
  r.name = name;
  r.dtype = runtime_to_st(tensor.dtype);
  r.shape.assign(host.shape.dims, host.shape.dims + host.shape.ndim);
  r.data = host.data();
  return r;
}

std::vector<size_t> write_order(const std::vector<TensorRecord>& records) {
  std::vector<size_t> order(records.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Larger elements first: with an 8-byte aligned data start, every tensor then begins at a
  // multiple of its element size, so readers can view it in place.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    size_t sa = st_dtype_size(records[a].dtype), sb = st_dtype_size(records[b].dtype);
    return sa != sb ? sa > sb : records[a].name < records[b].name;
  });
  return order;
}

std::string safetensors_header(const std::vector<TensorRecord>& records, const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i : write_order(records)) {
    const TensorRecord& r = records[i];
    check(r.name != "__metadata__", "a tensor cannot be named __metadata__");
    check(!header.contains(r.name), "tensor '", r.name, "' is given twice");
    uint64_t end = offset + r.nbytes();
    header[r.name] = {{"dtype", st_dtype_name(r.dtype)}, {"shape", r.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  return header.dump();
}

// Writes all of [data, data + bytes), retrying short writes and EINTR; throws with the position.
static void write_all(const WriteFn& write_fn, int fd, const std::string& path, const void* data, size_t bytes,
                      uint64_t& position) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    // Writes of at most 1 GiB: Linux caps a single write() at about 2 GiB anyway.
    size_t chunk = std::min<size_t>(bytes, size_t{1} << 30);
    ssize_t n = write_fn ? write_fn(fd, p, chunk) : ::write(fd, p, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(path, ": write failed at byte ", position, ": ", n < 0 ? std::strerror(errno) : "wrote nothing");
    p += n;
    bytes -= static_cast<size_t>(n);
    position += static_cast<uint64_t>(n);
  }
}

namespace {

// The data section, tensor after tensor in write order. A record's own bytes are written from
// where they lie. Generated records are filled into one of two buffers on the pool while a helper
// thread writes the other, so making the bytes and the disk overlap and the file is written in
// large sequential writes: no copy of the whole tensor exists, only the two buffers.
struct DataStream {
  struct Piece {
    const TensorRecord* record;
    uint64_t first, count;  // elements of the record
    size_t at;              // byte offset in the buffer
  };

  const WriteOptions& options;
  int fd;
  const std::string& path;
  uint64_t& position;  // bytes of the file written so far
  ThreadPool& pool;
  std::vector<uint8_t> buffers[2];
  int current = 0;
  size_t used = 0;            // bytes of buffers[current] planned
  std::vector<Piece> pieces;  // the generated pieces planned into buffers[current]
  std::future<void> in_flight;  // the write of buffers[current ^ 1]
  uint64_t in_flight_bytes = 0;

  DataStream(const WriteOptions& o, int f, const std::string& p, uint64_t& pos)
      : options(o), fd(f), path(p), position(pos), pool(o.pool ? *o.pool : default_thread_pool()) {}
  DataStream(const DataStream&) = delete;
  DataStream& operator=(const DataStream&) = delete;
  // On an error elsewhere the write in flight must end before the file is closed and removed.
  ~DataStream() {
    if (in_flight.valid()) in_flight.wait();
  }

  void written(uint64_t bytes) {
    if (options.on_written && bytes > 0) options.on_written(bytes);
  }

  // Waits for the write in flight; rethrows its error.
  void wait_in_flight() {
    if (!in_flight.valid()) return;
    in_flight.get();
    position += in_flight_bytes;
    written(in_flight_bytes);
    in_flight_bytes = 0;
  }

  void add_bytes(const void* data, uint64_t bytes) {
    flush();
    wait_in_flight();
    write_all(options.write_fn, fd, path, data, bytes, position);
    written(bytes);
  }

  void add_generated(const TensorRecord& r) {
    const uint64_t size = st_dtype_size(r.dtype), n = r.nbytes() / size;
    if (buffers[0].empty()) {
      check(options.chunk_bytes >= 8 && options.chunk_bytes % 8 == 0, path, ": chunk_bytes ", options.chunk_bytes,
            " is not a positive multiple of 8");
      buffers[0].resize(options.chunk_bytes);
      buffers[1].resize(options.chunk_bytes);
    }
    for (uint64_t first = 0; first < n;) {
      const uint64_t room = (options.chunk_bytes - used) / size;
      if (room == 0) {
        flush();
        continue;
      }
      const uint64_t take = std::min(room, n - first);
      // Every piece starts at a multiple of its element size: the write order puts larger
      // elements first and the chunks are multiples of 8, so the typed stores are aligned.
      pieces.push_back({&r, first, take, used});
      used += take * size;
      first += take;
    }
  }

  // Fills the planned pieces (on the pool, while the previous buffer is still being written),
  // then starts their write.
  void flush() {
    if (used == 0) return;
    uint8_t* buffer = buffers[current].data();
    std::vector<uint64_t> starts;  // the pieces' first element in one index over all of them
    uint64_t total = 0;
    for (const Piece& p : pieces) starts.push_back(total), total += p.count;
    pool.parallel_for(total, size_t{1} << 14, [&](size_t begin, size_t end) {
      size_t k = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
      for (uint64_t i = begin; i < end; ++k) {
        const Piece& p = pieces[k];
        const uint64_t from = i - starts[k], count = std::min<uint64_t>(end - i, p.count - from);
        const uint64_t size = st_dtype_size(p.record->dtype);
        p.record->generate(p.first + from, count, buffer + p.at + from * size);
        i += count;
      }
    });
    wait_in_flight();
    const size_t bytes = used;
    const uint64_t start = position;
    in_flight_bytes = bytes;
    in_flight = std::async(std::launch::async, [this, buffer, bytes, start] {
      uint64_t at = start;
      write_all(options.write_fn, fd, path, buffer, bytes, at);
    });
    current ^= 1;
    used = 0;
    pieces.clear();
  }

  void finish() {
    flush();
    wait_in_flight();
  }
};

}  // namespace

std::string write_safetensors_tmp(const std::string& path, const std::vector<TensorRecord>& records,
                                  const WriteOptions& options) {
  std::string header = safetensors_header(records, options.metadata);
  header.append((8 - header.size() % 8) % 8, ' ');
  uint64_t n = header.size();
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(n >> (8 * i));

  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, ": cannot create: ", std::strerror(errno));
  try {
    uint64_t position = 0;
    write_all(options.write_fn, fd, tmp, length, 8, position);
    write_all(options.write_fn, fd, tmp, header.data(), header.size(), position);
    DataStream stream(options, fd, tmp, position);
    for (size_t i : write_order(records)) {
      const TensorRecord& r = records[i];
      uint64_t bytes = r.nbytes();
      check(!(r.data && r.generate), "tensor '", r.name, "' has both data and a generator");
      check(bytes == 0 || r.data != nullptr || r.generate, "tensor '", r.name, "' has no data");
      if (r.generate) stream.add_generated(r);
      else if (bytes > 0) stream.add_bytes(r.data, bytes);
    }
    stream.finish();
    if (options.sync && fsync(fd) != 0) fail(tmp, ": fsync failed: ", std::strerror(errno));
    if (::close(fd) != 0) {
      fd = -1;
      fail(tmp, ": close failed: ", std::strerror(errno));
    }
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  return tmp;
}

void write_safetensors(const std::string& path, const std::vector<TensorRecord>& records, const WriteOptions& options) {
  std::string tmp = write_safetensors_tmp(path, records, options);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail(path, ": cannot rename ", tmp, " into place: ", std::strerror(err));
  }
}

}  // namespace sqlrl
