// safetensors loading: zero-copy views, and conversion from the mapping into new tensors with
// the disk reads kept running ahead of the conversion (see ReadAhead).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>

#include "runtime/thread_pool.h"
#include "weights/safetensors.h"

namespace sqlrl {

static Shape runtime_shape(const SafetensorsFile& file, const TensorEntry& entry) {
  check(entry.shape.size() <= static_cast<size_t>(kMaxDims), file.path, ": tensor '", entry.name, "' has ",
        entry.shape.size(), " dimensions; the runtime holds at most ", kMaxDims);
  return Shape(entry.shape);
}

Tensor tensor_view(const SafetensorsFile& file, const TensorEntry& entry) {
  std::optional<DType> dtype = st_to_runtime(entry.dtype);
  check(dtype.has_value(), file.path, ": tensor '", entry.name, "' is ", st_dtype_name(entry.dtype),
        ", which the runtime has no tensor type for");
  const uint8_t* p = file.bytes(entry);
  check(reinterpret_cast<uintptr_t>(p) % st_dtype_size(entry.dtype) == 0, file.path, ": tensor '", entry.name,
        "' starts at file byte ", file.data_start + entry.begin, ", not aligned to its ", st_dtype_size(entry.dtype),
        "-byte elements (use load_tensor, which copies)");
  return wrap(const_cast<uint8_t*>(p), runtime_shape(file, entry), *dtype, cpu_device(), file.map);
}

// --- conversion ---------------------------------------------------------------------------------

static bool is_float(StDType d) {
  return d == StDType::F16 || d == StDType::BF16 || d == StDType::F32 || d == StDType::F64;
}

// Reads elements [0, n) of a float source into f32. `src` may be unaligned: elements are
// fetched with memcpy, which compilers turn into plain loads.
static void load_floats(const uint8_t* src, StDType dtype, float* out, size_t n) {
  switch (dtype) {
    case StDType::F32: std::memcpy(out, src, n * 4); return;
    case StDType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = bf16_bits_to_f32(h);
      }
      return;
    case StDType::F16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = f16_bits_to_f32(h);
      }
      return;
    case StDType::F64:
      for (size_t i = 0; i < n; ++i) {
        double x;
        std::memcpy(&x, src + 8 * i, 8);
        out[i] = static_cast<float>(x);
      }
      return;
    default: fail("load_floats: ", st_dtype_name(dtype), " is not a float type");
  }
}

static void store_floats(const float* in, void* dst, DType dtype, size_t n) {
  switch (dtype) {
    case DType::F32: std::memcpy(dst, in, n * 4); return;
    case DType::BF16: convert_f32_to_bf16(in, static_cast<uint16_t*>(dst), n); return;
    case DType::F16: convert_f32_to_f16(in, static_cast<uint16_t*>(dst), n); return;
    default: fail("store_floats: ", dtype_name(dtype), " is not a float type");
  }
}

// Converts elements [begin, end) of the mapping into dst (contiguous, aligned, our allocation).
static void convert_range(const uint8_t* src, StDType from, void* dst, DType to, size_t begin, size_t end) {
  const size_t in_size = st_dtype_size(from), out_size = dtype_size(to);
  std::optional<DType> same = st_to_runtime(from);
  if (same && *same == to) {
    std::memcpy(static_cast<char*>(dst) + begin * out_size, src + begin * in_size, (end - begin) * in_size);
    return;
  }
  if (to == DType::F32) {  // widen straight into the destination
    load_floats(src + begin * in_size, from, static_cast<float*>(dst) + begin, end - begin);
    return;
  }
  constexpr size_t kBlock = 2048;  // stays in L1 between the load and the store
  float block[kBlock];
  for (size_t i = begin; i < end; i += kBlock) {
    size_t m = std::min(kBlock, end - i);
    load_floats(src + i * in_size, from, block, m);
    store_floats(block, static_cast<char*>(dst) + i * out_size, to, m);
  }
}

// madvise over the whole pages (huge pages for MADV_HUGEPAGE) inside [p, p + bytes); a hint
// only, so failures are ignored.
static void advise_range(const void* p, size_t bytes, int advice) {
  if (advice == MADV_HUGEPAGE && bytes < (size_t{4} << 20)) return;  // small blocks live in the heap: no VMA splits
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + bytes;
  if (advice == MADV_HUGEPAGE) {
    begin = (begin + (size_t{2} << 20) - 1) & ~((uintptr_t{2} << 20) - 1);
  } else {
    begin &= ~(page - 1);
  }
  end &= ~(page - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

// Keeps the disk busy ahead of the converters. Without it the reads of a cold file start only
// when the converters fault on the bytes (or at a per-tensor hint), so reading and converting
// alternate and a load runs at about half the disk's speed. A helper thread walks the bytes to
// load in file order, kStep at a time: madvise(WILLNEED) queues the reads of the next step, then
// one byte per page of this step is touched, which waits for its reads and maps its pages, so the
// converters find the bytes resident and mapped. The walk stays at most kAhead bytes ahead of
// what has been converted, so the pages it brings in are still cached when they are used.
struct Span {
  const uint8_t* data;
  size_t bytes;
};

class ReadAhead {
 public:
  static constexpr size_t kStep = size_t{8} << 20;
  static constexpr size_t kAhead = size_t{256} << 20;

  explicit ReadAhead(std::vector<Span> spans) : spans_(std::move(spans)), thread_([this] { walk(); }) {}
  ~ReadAhead() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  void converted(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      converted_ += bytes;
    }
    wake_.notify_all();
  }

 private:
  void walk() {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t walked = 0;
    uint8_t sum = 0;
    for (const Span& span : spans_) {
      for (size_t offset = 0; offset < span.bytes; offset += kStep) {
        {
          std::unique_lock<std::mutex> lock(mutex_);
          wake_.wait(lock, [&] { return stop_ || walked < converted_ + kAhead; });
          if (stop_) return;
        }
        size_t n = std::min(kStep, span.bytes - offset);
        size_t next = std::min(kStep, span.bytes - offset - n);
        if (next) advise_range(span.data + offset + n, next, MADV_WILLNEED);
        const uint8_t* p = span.data + offset;
        for (size_t i = 0; i < n; i += page - (reinterpret_cast<uintptr_t>(p + i) & (page - 1))) sum += p[i];
        walked += n;
      }
    }
    sink_ = sum;  // keeps the touching loads
  }

  std::vector<Span> spans_;
  std::mutex mutex_;
  std::condition_variable wake_;
  size_t converted_ = 0;
  bool stop_ = false;
  volatile uint8_t sink_ = 0;
  std::thread thread_;  // last: starts after the members it reads are constructed
};

static void check_loadable(const SafetensorsFile& file, const TensorEntry& entry, DType dtype) {
  std::optional<DType> source = st_to_runtime(entry.dtype);
  bool float_to_float = is_float(entry.dtype) && dtype_is_float(dtype);
  check(float_to_float || (source && *source == dtype), file.path, ": tensor '", entry.name, "' is ",
        st_dtype_name(entry.dtype), " and cannot be loaded as ", dtype_name(dtype));
}

// Converts the entry into `out`: CPU, contiguous, the entry's element count, a loadable dtype.
static void convert_into(const SafetensorsFile& file, const TensorEntry& entry, const Tensor& out) {
  const uint8_t* src = file.bytes(entry);
  // Chunks of 4 MiB of output or more: few enough that scheduling is negligible, many enough that
  // both cores stay busy to the end of the tensor.
  size_t min_chunk = std::max<size_t>(size_t{1} << 18, (size_t{4} << 20) / dtype_size(out.dtype));
  default_thread_pool().parallel_for(static_cast<size_t>(entry.numel()), min_chunk, [&](size_t begin, size_t end) {
    convert_range(src, entry.dtype, out.data(), out.dtype, begin, end);
  });
}

static Tensor convert_tensor(const SafetensorsFile& file, const TensorEntry& entry, DType dtype, Device device) {
  std::optional<DType> source = st_to_runtime(entry.dtype);
  const uint8_t* src = file.bytes(entry);
  if (device.is_cuda() && source && reinterpret_cast<uintptr_t>(src) % st_dtype_size(entry.dtype) == 0) {
    // Upload the bytes as stored (half the traffic for bf16) and convert on the device.
    Tensor on_device = to_device(tensor_view(file, entry), device);
    return *source == dtype ? on_device : to_dtype(on_device, dtype);
  }
  Tensor out = empty(runtime_shape(file, entry), dtype, cpu_device());
  advise_range(out.data(), out.nbytes(), MADV_HUGEPAGE);  // 2 MiB faults on the fresh destination
  convert_into(file, entry, out);
  return device.is_cpu() ? out : to_device(out, device);
}

// Calls load(i) for every entry in file order, with the disk reading ahead of it.
template <typename Load>
static void in_file_order(const SafetensorsFile& file, const std::vector<const TensorEntry*>& entries, Load load) {
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return entries[a]->begin < entries[b]->begin; });
  std::vector<Span> spans;
  size_t total = 0;
  for (size_t i : order) {
    spans.push_back({file.bytes(*entries[i]), entries[i]->nbytes()});
    total += entries[i]->nbytes();
  }
  std::optional<ReadAhead> ahead;
  if (total >= ReadAhead::kStep) ahead.emplace(std::move(spans));  // small loads: a thread costs more than it saves
  for (size_t i : order) {
    load(i);
    if (ahead) ahead->converted(entries[i]->nbytes());
  }
}

std::vector<Tensor> load_tensors(const SafetensorsFile& file, const std::vector<const TensorEntry*>& entries,
                                 DType dtype, Device device) {
  for (const TensorEntry* e : entries) check_loadable(file, *e, dtype);
  std::vector<Tensor> out(entries.size());
  in_file_order(file, entries, [&](size_t i) { out[i] = convert_tensor(file, *entries[i], dtype, device); });
  return out;
}

void load_tensors_into(const SafetensorsFile& file, const std::vector<const TensorEntry*>& entries,
                       const std::vector<Tensor>& destinations) {
  check(destinations.size() == entries.size(), file.path, ": load_tensors_into got ", entries.size(), " tensors but ",
        destinations.size(), " destinations");
  for (size_t i = 0; i < entries.size(); ++i) {
    const TensorEntry& e = *entries[i];
    const Tensor& d = destinations[i];
    check_loadable(file, e, d.dtype);
    check(d.device().is_cpu() && d.is_contiguous(), file.path, ": tensor '", e.name,
          "' must be loaded into a contiguous CPU tensor");
    check(d.shape == runtime_shape(file, e), file.path, ": tensor '", e.name, "' has shape ", e.shape_str(),
          " but its destination has ", d.numel(), " elements in another shape");
  }
  in_file_order(file, entries, [&](size_t i) { convert_into(file, *entries[i], destinations[i]); });
}

Tensor load_tensor(const SafetensorsFile& file, const TensorEntry& entry, DType dtype, Device device) {
  return std::move(load_tensors(file, {&entry}, dtype, device)[0]);
}

}  // namespace sqlrl
