// safetensors writer: deterministic layout, 8-byte padded header, tmp file + fsync + rename.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

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
    for (size_t i : write_order(records)) {
      const TensorRecord& r = records[i];
      uint64_t bytes = r.nbytes();
      check(bytes == 0 || r.data != nullptr, "tensor '", r.name, "' has no data");
      write_all(options.write_fn, fd, tmp, r.data, bytes, position);
    }
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
