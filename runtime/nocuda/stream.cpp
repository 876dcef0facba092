#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/stream.h"

namespace sqlrl {

CudaStream cuda_stream_create(int device) { fail("cuda:", device, ": ", cuda_unavailable_reason()); }
void cuda_stream_destroy(CudaStream& stream) { stream.handle = nullptr; }
void cuda_stream_synchronize(const CudaStream&) { fail(cuda_unavailable_reason()); }
CudaEvent cuda_event_create(int device) { fail("cuda:", device, ": ", cuda_unavailable_reason()); }
void cuda_event_destroy(CudaEvent& event) { event.handle = nullptr; }
void cuda_event_record(const CudaEvent&, const CudaStream&) { fail(cuda_unavailable_reason()); }
void cuda_event_synchronize(const CudaEvent&) { fail(cuda_unavailable_reason()); }
float cuda_event_elapsed_ms(const CudaEvent&, const CudaEvent&) { fail(cuda_unavailable_reason()); }
void cuda_stream_wait(const CudaStream&, const CudaEvent&) { fail(cuda_unavailable_reason()); }

bool cuda_graphs_supported() { return false; }
void cuda_graph_begin_capture(const CudaStream&) { fail(cuda_unavailable_reason()); }
CudaGraph cuda_graph_end_capture(const CudaStream&) { fail(cuda_unavailable_reason()); }
void cuda_graph_launch(const CudaGraph&, const CudaStream&) { fail(cuda_unavailable_reason()); }
void cuda_graph_destroy(CudaGraph& graph) { graph.exec = nullptr; }
void cuda_event_record_captured(const CudaEvent&, const CudaStream&) { fail(cuda_unavailable_reason()); }

}  // namespace sqlrl
