// The MPI transport of runtime/comm.h on host buffers: MPI_COMM_WORLD and the groups split from
// it. Built against MPI when CMake finds it (SQLRL_HAVE_MPI); otherwise init() says there is none
// and nothing else is called.
// MPI's counts are int: every call is split into pieces of at most kPiece elements.
#include "runtime/comm.h"

#include <algorithm>
#include <cstring>

#include "runtime/error.h"

#if SQLRL_HAVE_MPI
// The C API only: MPI's removed C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace sqlrl {

#if SQLRL_HAVE_MPI

namespace {

constexpr int64_t kPiece = int64_t{1} << 27;

MPI_Datatype mpi_type(mpi::Type type) {
  switch (type) {
    case mpi::Type::F32: return MPI_FLOAT;
    case mpi::Type::F64: return MPI_DOUBLE;
    case mpi::Type::I64: return MPI_INT64_T;
    case mpi::Type::Bytes: return MPI_BYTE;
  }
  return MPI_BYTE;
}

// memcpy of n floats; nothing when n is 0 (an empty shard's buffers may be null, and memcpy with
// a null pointer is undefined even for 0 bytes: UBSan's nonnull-attribute check).
void copy_floats(float* dst, const float* src, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

int64_t type_size(mpi::Type type) { return type == mpi::Type::F32 ? 4 : type == mpi::Type::Bytes ? 1 : 8; }

// The communicators of Comm::group: 0 is MPI_COMM_WORLD, split() appends. Only the main thread
// makes MPI calls, so the table needs no lock.
std::vector<MPI_Comm> g_groups;

MPI_Comm handle(int group) {
  check(group >= 0 && group < static_cast<int>(g_groups.size()), "MPI: communicator ", group, " was never split off");
  return g_groups[static_cast<size_t>(group)];
}

void ok(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  fail("MPI ", what, ": ", std::string(text, static_cast<size_t>(len)));
}

}  // namespace

bool mpi_compiled() { return true; }

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<size_t>(len));
  if (size_t nl = s.find_first_of("\r\n"); nl != std::string::npos) s.resize(nl);
  return s;
}

namespace mpi {

bool init(int& rank, int& world_size) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Only the main thread makes MPI calls (the SQL pool's workers never do).
    int provided = 0;
    ok(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
  }
  // Errors come back as codes and become sqlrl::Error naming the call, instead of MPI's abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (g_groups.empty()) g_groups.push_back(MPI_COMM_WORLD);
  ok(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "comm rank");
  ok(MPI_Comm_size(MPI_COMM_WORLD, &world_size), "comm size");
  return true;
}

void finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

int split(int group, int color, int& rank, int& world_size) {
  MPI_Comm out = MPI_COMM_NULL;
  ok(MPI_Comm_split(handle(group), color, 0, &out), "comm split");
  MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  ok(MPI_Comm_rank(out, &rank), "comm rank");
  ok(MPI_Comm_size(out, &world_size), "comm size");
  g_groups.push_back(out);
  return static_cast<int>(g_groups.size()) - 1;
}

void barrier(int group) { ok(MPI_Barrier(handle(group)), "barrier"); }

void broadcast(int group, void* data, int64_t bytes, int root) {
  char* p = static_cast<char*>(data);
  for (int64_t o = 0; o < bytes; o += kPiece)
    ok(MPI_Bcast(p + o, static_cast<int>(std::min(kPiece, bytes - o)), MPI_BYTE, root, handle(group)), "broadcast");
}

// Pieces of at most kPiece bytes, all with tag 0: MPI keeps the order of one sender's messages
// to one receiver on one communicator and tag, so pieces and messages arrive in the order sent.
void send(int group, const void* data, int64_t bytes, int to) {
  const char* p = static_cast<const char*>(data);
  for (int64_t o = 0; o < bytes; o += kPiece)
    ok(MPI_Send(p + o, static_cast<int>(std::min(kPiece, bytes - o)), MPI_BYTE, to, 0, handle(group)), "send");
}

void recv(int group, void* data, int64_t bytes, int from) {
  char* p = static_cast<char*>(data);
  for (int64_t o = 0; o < bytes; o += kPiece) {
    const int n = static_cast<int>(std::min(kPiece, bytes - o));
    MPI_Status status;
    ok(MPI_Recv(p + o, n, MPI_BYTE, from, 0, handle(group), &status), "receive");
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    check(got == n, "MPI receive from rank ", from, ": ", got, " bytes where ", n, " were expected (the sender sent "
          "another message)");
  }
}

void all_reduce(int group, void* data, int64_t n, Type type, bool max) {
  char* p = static_cast<char*>(data);
  const int64_t size = type_size(type);
  for (int64_t o = 0; o < n; o += kPiece)
    ok(MPI_Allreduce(MPI_IN_PLACE, p + o * size, static_cast<int>(std::min(kPiece, n - o)), mpi_type(type),
                     max ? MPI_MAX : MPI_SUM, handle(group)),
       "all-reduce");
}

// Pieces of the per-rank blocks: piece k carries elements [k * kPiece, (k + 1) * kPiece) of each.
namespace {
struct Pieces {
  std::vector<int> counts, displs;
  int64_t total = 0;
};
Pieces piece_of(const std::vector<int64_t>& counts, int64_t offset) {
  Pieces p;
  for (int64_t c : counts) {
    const int64_t k = std::clamp<int64_t>(c - offset, 0, kPiece);
    p.displs.push_back(static_cast<int>(p.total));
    p.counts.push_back(static_cast<int>(k));
    p.total += k;
  }
  return p;
}
int64_t max_count(const std::vector<int64_t>& counts) { return *std::max_element(counts.begin(), counts.end()); }
}  // namespace

void all_to_all(int group, const float* send, const std::vector<int64_t>& send_counts, float* recv, int64_t recv_count) {
  const int world = static_cast<int>(send_counts.size());
  std::vector<int64_t> send_off(world + 1, 0);
  for (int r = 0; r < world; ++r) send_off[r + 1] = send_off[r] + send_counts[r];
  std::vector<int64_t> recv_counts(world, recv_count);
  std::vector<float> packed, unpacked;
  for (int64_t o = 0; o < std::max(max_count(send_counts), recv_count); o += kPiece) {
    Pieces s = piece_of(send_counts, o), r = piece_of(recv_counts, o);
    packed.resize(static_cast<size_t>(s.total)), unpacked.resize(static_cast<size_t>(r.total));
    for (int q = 0; q < world; ++q)
      copy_floats(packed.data() + s.displs[q], send + send_off[q] + o, s.counts[q]);
    ok(MPI_Alltoallv(packed.data(), s.counts.data(), s.displs.data(), MPI_FLOAT, unpacked.data(), r.counts.data(),
                     r.displs.data(), MPI_FLOAT, handle(group)),
       "all-to-all");
    for (int q = 0; q < world; ++q)
      copy_floats(recv + q * recv_count + o, unpacked.data() + r.displs[q], r.counts[q]);
  }
}

void reduce_scatter(int group, const float* full, float* shard, const std::vector<int64_t>& counts) {
  const int world = static_cast<int>(counts.size());
  std::vector<int64_t> off(world + 1, 0);
  for (int r = 0; r < world; ++r) off[r + 1] = off[r] + counts[r];
  std::vector<float> packed;
  for (int64_t o = 0; o < max_count(counts); o += kPiece) {
    Pieces p = piece_of(counts, o);
    packed.resize(static_cast<size_t>(p.total));
    for (int q = 0; q < world; ++q)
      copy_floats(packed.data() + p.displs[q], full + off[q] + o, p.counts[q]);
    ok(MPI_Reduce_scatter(packed.data(), shard + o, p.counts.data(), MPI_FLOAT, MPI_SUM, handle(group)),
       "reduce-scatter");
  }
}

void all_gather(int group, float* full, const std::vector<int64_t>& counts) {
  const int world = static_cast<int>(counts.size());
  std::vector<int64_t> off(world + 1, 0);
  for (int r = 0; r < world; ++r) off[r + 1] = off[r] + counts[r];
  std::vector<float> packed;
  int rank = 0;
  MPI_Comm_rank(handle(group), &rank);
  for (int64_t o = 0; o < max_count(counts); o += kPiece) {
    Pieces p = piece_of(counts, o);
    packed.resize(static_cast<size_t>(p.total));
    copy_floats(packed.data() + p.displs[rank], full + off[rank] + o, p.counts[rank]);
    ok(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, packed.data(), p.counts.data(), p.displs.data(), MPI_FLOAT,
                      handle(group)),
       "all-gather");
    for (int q = 0; q < world; ++q)
      copy_floats(full + off[q] + o, packed.data() + p.displs[q], p.counts[q]);
  }
}

}  // namespace mpi

#else  // no MPI in this build

bool mpi_compiled() { return false; }
std::string mpi_library_version() { return "none (CMake found no MPI; Debian: libopenmpi-dev)"; }

namespace mpi {
bool init(int&, int&) { return false; }
void finalize() {}
void abort(int code) { std::exit(code); }
[[noreturn]] static void absent() { fail("this build has no MPI"); }
int split(int, int, int&, int&) { absent(); }
void barrier(int) { absent(); }
void broadcast(int, void*, int64_t, int) { absent(); }
void all_reduce(int, void*, int64_t, Type, bool) { absent(); }
void send(int, const void*, int64_t, int) { absent(); }
void recv(int, void*, int64_t, int) { absent(); }
void all_to_all(int, const float*, const std::vector<int64_t>&, float*, int64_t) { absent(); }
void reduce_scatter(int, const float*, float*, const std::vector<int64_t>&) { absent(); }
void all_gather(int, float*, const std::vector<int64_t>&) { absent(); }
}  // namespace mpi

#endif

}  // namespace sqlrl
