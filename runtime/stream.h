// CUDA streams and events as plain handles (void* keeps CUDA headers out of CPU code).
// Timing: record two events on a stream, synchronise the second, read the elapsed ms.
#pragma once

namespace sqlrl {

struct CudaStream {
  void* handle = nullptr;  // cudaStream_t; nullptr is the legacy default stream
  int device = 0;
};

struct CudaEvent {
  void* handle = nullptr;  // cudaEvent_t
  int device = 0;
};

CudaStream cuda_stream_create(int device);
void cuda_stream_destroy(CudaStream& stream);
void cuda_stream_synchronize(const CudaStream& stream);

CudaEvent cuda_event_create(int device);
void cuda_event_destroy(CudaEvent& event);
void cuda_event_record(const CudaEvent& event, const CudaStream& stream);
void cuda_event_synchronize(const CudaEvent& event);
float cuda_event_elapsed_ms(const CudaEvent& start, const CudaEvent& end);
// Makes `stream` wait for `event` (recorded on another stream) without blocking the host.
void cuda_stream_wait(const CudaStream& stream, const CudaEvent& event);

}  // namespace sqlrl
