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

// CUDA graphs: the launches issued on `stream` between begin and end (from this thread) are
// recorded, not run, and come back as one executable graph that replays them with one launch.
// The stream must not be the legacy default stream. Capture allocates nothing on the device for
// the caller: every buffer the launches use must exist before begin.
struct CudaGraph {
  void* exec = nullptr;  // cudaGraphExec_t
  int device = 0;
};
bool cuda_graphs_supported();  // false where graphs cannot run (no CUDA; the CPU emulator)
void cuda_graph_begin_capture(const CudaStream& stream);
CudaGraph cuda_graph_end_capture(const CudaStream& stream);
void cuda_graph_launch(const CudaGraph& graph, const CudaStream& stream);
void cuda_graph_destroy(CudaGraph& graph);
// Records `event` on `stream` as a node of the graph being captured there (elapsed times between
// such events read the replay's timeline); outside a capture, as cuda_event_record.
void cuda_event_record_captured(const CudaEvent& event, const CudaStream& stream);

}  // namespace sqlrl
