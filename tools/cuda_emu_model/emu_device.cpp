// The device side of runtime/ for the emulated CUDA model (tools/cuda_emu_model/run.sh): one
// "device" whose memory is host memory, streams and events that do nothing (the emulated
// kernels run synchronously), and cuBLASLt replaced by a plain f32-accumulating loop over bf16
// operands with a bf16 or f32 C (alpha * A B + beta * C, rounded once, as cuBLASLt does).
// Defines every symbol of runtime/nocuda/{device,memory,stream,gemm}.cpp so those archive
// members are never pulled in.
#include <cstdlib>
#include <cstring>

#include "runtime/device.h"
#include "runtime/device_memory.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/gemm.h"
#include "runtime/stream.h"

namespace sqlrl {

bool cuda_compiled() { return true; }
int cuda_device_count() { return 1; }
std::string cuda_unavailable_reason() { return ""; }
CudaDeviceInfo cuda_device_info(int index) {
  CudaDeviceInfo info;
  info.index = index;
  info.name = "emulated CUDA device (host threads)";
  info.total_memory = size_t(8) << 30;  // host memory stands in; the trainers' memory plan needs a size
  return info;
}
void cuda_set_device(int) {}
void cuda_synchronize() {}

void* cuda_malloc_raw(size_t bytes, int) {
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  check(p != nullptr, "emulated cuda_malloc_raw: ", bytes, " bytes");
  // Device memory starts as garbage: NaN bf16/f32 bit patterns catch reads of unwritten buffers.
  std::memset(p, 0xff, bytes);
  return p;
}
void cuda_free_raw(void* ptr, int) { std::free(ptr); }
void memcpy_between(void* dst, Device, const void* src, Device, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}

namespace {
float load(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::BF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F16: return f16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: fail("emulated device: dtype ", dtype_name(t));
  }
}
void store(void* p, DType t, size_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = v; break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16_bits(v); break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = f32_to_f16_bits(v); break;
    default: fail("emulated device: dtype ", dtype_name(t));
  }
}
}  // namespace

void cuda_fill(void* data, DType dtype, size_t n, float value, int) {
  if (dtype == DType::U8) {
    std::memset(data, static_cast<int>(value), n);
    return;
  }
  for (size_t i = 0; i < n; ++i) store(data, dtype, i, value);
}
void cuda_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n, int) {
  for (size_t i = 0; i < n; ++i) store(dst, dst_dtype, i, load(src, src_dtype, i));
}

CudaStream cuda_stream_create(int device) { return CudaStream{nullptr, device}; }
void cuda_stream_destroy(CudaStream& stream) { stream.handle = nullptr; }
void cuda_stream_synchronize(const CudaStream&) {}
CudaEvent cuda_event_create(int device) { return CudaEvent{nullptr, device}; }
void cuda_event_destroy(CudaEvent& event) { event.handle = nullptr; }
void cuda_event_record(const CudaEvent&, const CudaStream&) {}
void cuda_event_synchronize(const CudaEvent&) {}
float cuda_event_elapsed_ms(const CudaEvent&, const CudaEvent&) { return 0.0f; }
void cuda_stream_wait(const CudaStream&, const CudaEvent&) {}
// No graphs here: the decode step runs its kernels one by one (CudaDecodeMode::kernels).
bool cuda_graphs_supported() { return false; }
void cuda_graph_begin_capture(const CudaStream&) { fail("emulated device: no CUDA graphs"); }
CudaGraph cuda_graph_end_capture(const CudaStream&) { fail("emulated device: no CUDA graphs"); }
void cuda_graph_launch(const CudaGraph&, const CudaStream&) { fail("emulated device: no CUDA graphs"); }
void cuda_graph_destroy(CudaGraph& graph) { graph.exec = nullptr; }
void cuda_event_record_captured(const CudaEvent&, const CudaStream&) {}
void* cuda_host_alloc(size_t bytes) { return std::malloc(bytes == 0 ? 1 : bytes); }
void cuda_host_free(void* ptr) { std::free(ptr); }
void cuda_copy_async(void* dst, const void* src, size_t bytes, const CudaStream&) {
  if (bytes) std::memmove(dst, src, bytes);
}

void gemm_cuda(const GemmProblem& p, int, const CudaStream&) {
  check(p.k > 0, "emulated gemm: K=0");
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        float s = 0;
        for (int64_t k = 0; k < p.k; ++k) {
          size_t ia = static_cast<size_t>(b * p.stride_a + (p.trans_a ? k * p.lda + i : i * p.lda + k));
          size_t ib = static_cast<size_t>(b * p.stride_b + (p.trans_b ? j * p.ldb + k : k * p.ldb + j));
          s += load(p.a, p.ab_type, ia) * load(p.b, p.ab_type, ib);
        }
        size_t ic = static_cast<size_t>(b * p.stride_c + i * p.ldc + j);
        float out = p.alpha * s + (p.beta != 0 ? p.beta * load(p.c, p.c_type, ic) : 0.0f);
        store(p.c, p.c_type, ic, out);
      }
}

}  // namespace sqlrl
