#include "runtime/cuda/check.h"
#include "runtime/stream.h"

namespace sqlrl {

CudaStream cuda_stream_create(int device) {
  CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return CudaStream{s, device};
}

void cuda_stream_destroy(CudaStream& stream) {
  if (stream.handle) CUDA_CHECK(cudaStreamDestroy(static_cast<cudaStream_t>(stream.handle)));
  stream.handle = nullptr;
}

void cuda_stream_synchronize(const CudaStream& stream) {
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle)));
}

CudaEvent cuda_event_create(int device) {
  CUDA_CHECK(cudaSetDevice(device));
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreate(&e));
  return CudaEvent{e, device};
}

void cuda_event_destroy(CudaEvent& event) {
  if (event.handle) CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event.handle)));
  event.handle = nullptr;
}

void cuda_event_record(const CudaEvent& event, const CudaStream& stream) {
  check(event.handle != nullptr, "cuda_event_record: event was not created");
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event.handle), static_cast<cudaStream_t>(stream.handle)));
}

void cuda_event_synchronize(const CudaEvent& event) {
  CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event.handle)));
}

float cuda_event_elapsed_ms(const CudaEvent& start, const CudaEvent& end) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.handle), static_cast<cudaEvent_t>(end.handle)));
  return ms;
}

void cuda_stream_wait(const CudaStream& stream, const CudaEvent& event) {
  CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle), static_cast<cudaEvent_t>(event.handle), 0));
}

bool cuda_graphs_supported() { return true; }

void cuda_graph_begin_capture(const CudaStream& stream) {
  check(stream.handle != nullptr, "cuda_graph_begin_capture: the legacy default stream cannot be captured");
  // Thread-local: other threads (the SQL pool, the tokenizer) may use CUDA meanwhile.
  CUDA_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream.handle), cudaStreamCaptureModeThreadLocal));
}

CudaGraph cuda_graph_end_capture(const CudaStream& stream) {
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(static_cast<cudaStream_t>(stream.handle), &graph));
  cudaGraphExec_t exec = nullptr;
  cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(status);
  return CudaGraph{exec, stream.device};
}

void cuda_graph_launch(const CudaGraph& graph, const CudaStream& stream) {
  check(graph.exec != nullptr, "cuda_graph_launch: no graph");
  CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.exec), static_cast<cudaStream_t>(stream.handle)));
}

void cuda_event_record_captured(const CudaEvent& event, const CudaStream& stream) {
  check(event.handle != nullptr, "cuda_event_record_captured: event was not created");
  CUDA_CHECK(cudaEventRecordWithFlags(static_cast<cudaEvent_t>(event.handle), static_cast<cudaStream_t>(stream.handle),
                                      cudaEventRecordExternal));
}

void cuda_graph_destroy(CudaGraph& graph) {
  if (graph.exec) CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph.exec)));
  graph.exec = nullptr;
}

}  // namespace sqlrl
