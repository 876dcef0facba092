#include "runtime/comm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "runtime/error.h"

namespace sqlrl {

namespace {

// A launcher variable as an int; nullopt-like -1 when unset. Fails naming it when not a number.
int env_int(EnvLookup env, const char* name, int min_value) {
  const char* text = env(name);
  if (text == nullptr || *text == '\0') return -1;
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  check(errno == 0 && end != text && *end == '\0' && value >= min_value && value <= INT_MAX, "launcher variable ",
        name, "='", text, "' is not a number >= ", min_value);
  return static_cast<int>(value);
}

// The first of `names` that is set, or -1.
int first_env_int(EnvLookup env, std::initializer_list<const char*> names, int min_value) {
  for (const char* name : names) {
    int v = env_int(env, name, min_value);
    if (v >= 0) return v;
  }
  return -1;
}

// The watchdog: a host collective that waits longer than the limit means another rank is dead
// or stuck (srun without --kill-on-bad-exit does not end a step when one task dies; a rank can
// hang): the waiting rank ends the job with a message instead of waiting forever.
struct Watchdog {
  std::atomic<int64_t> entered_ms{0};  // steady-clock ms when the current collective began; 0 = none
  std::atomic<bool> stop{false};
  std::thread thread;
  // A process that ends by std::exit (an interrupted train or sft) destroys this at exit: a
  // joinable thread would call std::terminate there.
  ~Watchdog() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
};
Watchdog g_watchdog;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void start_watchdog(const Comm& c) {
  const char* text = std::getenv("SQLRL_COMM_TIMEOUT_S");
  const double limit = text ? std::atof(text) : 3600.0;
  if (c.world_size == 1 || limit <= 0 || g_watchdog.thread.joinable()) return;
  const int rank = c.rank, world = c.world_size;
  const bool mpi = c.mpi;
  g_watchdog.stop = false;
  g_watchdog.thread = std::thread([limit, rank, world, mpi] {
    while (!g_watchdog.stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp<int64_t>(static_cast<int64_t>(limit * 100), 10, 1000)));
      const int64_t since = g_watchdog.entered_ms;
      if (since == 0 || static_cast<double>(now_ms() - since) < limit * 1000) continue;
      std::fprintf(stderr, "error (rank %d of %d): a collective has waited %.0f s for the other ranks: one of them is "
                   "dead or stuck (limit: SQLRL_COMM_TIMEOUT_S=%g); ending the job\n",
                   rank, world, static_cast<double>(now_ms() - since) / 1000, limit);
      std::fflush(stderr);
      if (mpi) mpi::abort(124);
      std::_Exit(124);
    }
  });
}

void stop_watchdog() {
  if (!g_watchdog.thread.joinable()) return;
  g_watchdog.stop = true;
  g_watchdog.thread.join();
}

// Adds the enclosing collective's wall time to comm.seconds, and arms the watchdog meanwhile.
struct Timed {
  const Comm& comm;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  int64_t outer = g_watchdog.entered_ms.exchange(g_watchdog.entered_ms ? g_watchdog.entered_ms.load() : now_ms());
  ~Timed() {
    g_watchdog.entered_ms = outer;
    comm.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

[[noreturn]] void fail_no_transport(const Comm& c, const char* what) {
  fail("rank ", c.rank, " of ", c.world_size, " (", c.source, "): no transport for the host ", what,
       ": the job was not started by an MPI launcher (mpirun, srun --mpi=pmix) and has no NCCL communicator; a CPU "
       "run of several processes needs MPI");
}

void reduce(const Comm& c, void* data, int64_t n, mpi::Type type, bool max) {
  if (c.world_size == 1 || n == 0) return;
  Timed timed{c};
  if (c.mpi) return mpi::all_reduce(c.group, data, n, type, max);
  if (c.nccl) return nccl_host_all_reduce(c, data, n, static_cast<int>(type), max);
  fail_no_transport(c, "all-reduce");
}

}  // namespace

Launch detect_launch(EnvLookup env) {
  Launch l;
  int rank = -1, size = -1, local = -1;
  // MPI launchers first: Open MPI, then PMIx (srun --mpi=pmix, prterun), then PMI-1/2 (MPICH, srun --mpi=pmi2).
  if ((rank = env_int(env, "OMPI_COMM_WORLD_RANK", 0)) >= 0) {
    size = env_int(env, "OMPI_COMM_WORLD_SIZE", 1);
    local = env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
    l.source = "mpirun";
  } else if ((rank = first_env_int(env, {"PMIX_RANK", "PMI_RANK"}, 0)) >= 0) {
    size = first_env_int(env, {"PMI_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, 1);
    local = first_env_int(env, {"MPI_LOCALRANKID", "SLURM_LOCALID"}, 0);
    l.source = env("SLURM_STEP_ID") ? "srun (PMI)" : "PMI launcher";
  }
  if (rank >= 0) {
    l.under_mpi = true;
  } else if (env_int(env, "SLURM_STEP_NUM_TASKS", 1) >= 0 && env_int(env, "SLURM_PROCID", 0) >= 0) {
    // Only an srun step: a batch script itself also has SLURM_PROCID=0 and the allocation's
    // SLURM_NTASKS, but it is one process.
    rank = env_int(env, "SLURM_PROCID", 0);
    size = env_int(env, "SLURM_STEP_NUM_TASKS", 1);
    local = env_int(env, "SLURM_LOCALID", 0);
    l.source = "srun";
  } else if ((rank = env_int(env, "RANK", 0)) >= 0) {
    size = env_int(env, "WORLD_SIZE", 1);
    check(size >= 1, "launcher variable RANK=", rank, " is set but WORLD_SIZE is not");
    // torchrun always sets LOCAL_RANK; without it, assume one node (GPU = rank).
    local = env_int(env, "LOCAL_RANK", 0);
    if (local < 0) local = rank;
    l.source = "RANK/WORLD_SIZE";
  } else {
    return l;
  }
  l.rank = rank;
  l.world_size = size >= 1 ? size : 1;
  l.local_rank = local >= 0 ? local : 0;
  check(l.rank < l.world_size, l.source, ": rank ", l.rank, " is not below the world size ", l.world_size);
  return l;
}

Launch detect_launch() { return detect_launch([](const char* name) -> const char* { return std::getenv(name); }); }

Comm comm_init(const CommOptions& options) {
  Launch launch = detect_launch();
  Comm c;
  c.rank = launch.rank, c.world_size = launch.world_size, c.local_rank = launch.local_rank;
  c.source = launch.source;
  if (launch.under_mpi) {
    check(mpi_compiled() || launch.world_size == 1, launch.source, " started ", launch.world_size,
          " processes but this build has no MPI (install libopenmpi-dev and rebuild; `llm_sqlrl info` shows what a "
          "build has)");
    int rank = 0, size = 1;
    if (mpi::init(rank, size)) {
      c.mpi = true;
      c.rank = rank, c.world_size = size;
    }
  }
  auto apply = [&](int value, int& field, const char* flag) {
    if (value < 0) return;
    check(!c.mpi || value == field, "--", flag, " ", value, " disagrees with MPI, which says ", field);
    field = value;
  };
  apply(options.rank, c.rank, "rank");
  apply(options.world_size, c.world_size, "world-size");
  apply(options.local_rank, c.local_rank, "local-rank");
  if (options.rank >= 0 || options.world_size >= 0 || options.local_rank >= 0) c.source = "flags";
  check(c.world_size >= 1 && c.rank >= 0 && c.rank < c.world_size, c.source, ": rank ", c.rank,
        " is not in [0, world size ", c.world_size, ")");
  check(c.local_rank >= 0, c.source, ": local rank ", c.local_rank, " is negative");
  start_watchdog(c);
  return c;
}

void comm_finalize(Comm& comm) {
  stop_watchdog();
  if (comm.nccl) nccl_destroy(comm);
  if (comm.mpi) mpi::finalize();
  comm.mpi = false;
}

void comm_abort(const Comm& comm, int code) {
  if (comm.mpi) mpi::abort(code);
  std::exit(code);
}

void comm_barrier(const Comm& comm) {
  if (comm.world_size == 1) return;
  if (comm.mpi) {
    Timed timed{comm};
    return mpi::barrier(comm.group);
  }
  int64_t one = 1;
  reduce(comm, &one, 1, mpi::Type::I64, false);
}

void comm_broadcast(const Comm& comm, void* data, int64_t bytes, int root) {
  check(root >= 0 && root < comm.world_size, "broadcast: root ", root, " is not a rank of ", comm.world_size);
  if (comm.world_size == 1 || bytes == 0) return;
  Timed timed{comm};
  if (comm.mpi) return mpi::broadcast(comm.group, data, bytes, root);
  if (comm.nccl) return nccl_host_broadcast(comm, data, bytes, root);
  fail_no_transport(comm, "broadcast");
}

Comm comm_split(const Comm& comm, int color) {
  check(color >= 0, "comm split: color ", color, " is negative");
  Comm g = comm;
  g.nccl = nullptr, g.stream = nullptr, g.staging = nullptr, g.staging_bytes = 0, g.seconds = 0;
  if (!comm.mpi) {  // one process (or no MPI): every rank is its own group
    check(comm.world_size == 1, "comm split: rank ", comm.rank, " of ", comm.world_size, " (", comm.source,
          ") has no MPI to split the job with");
    return g;
  }
  Timed timed{comm};
  g.group = mpi::split(comm.group, color, g.rank, g.world_size);
  return g;
}

namespace {
void check_peer(const Comm& comm, int peer, const char* what) {
  check(peer >= 0 && peer < comm.world_size && peer != comm.rank, what, ": rank ", peer, " is not another rank of ",
        comm.world_size, " (this is rank ", comm.rank, ")");
  if (!comm.mpi) fail_no_transport(comm, what);
}
}  // namespace

void comm_send(const Comm& comm, const void* data, int64_t bytes, int to) {
  check_peer(comm, to, "send");
  Timed timed{comm};
  mpi::send(comm.group, data, bytes, to);
}

void comm_recv(const Comm& comm, void* data, int64_t bytes, int from) {
  check_peer(comm, from, "receive");
  Timed timed{comm};
  mpi::recv(comm.group, data, bytes, from);
}

void comm_send_bytes(const Comm& comm, const std::string& bytes, int to) {
  const int64_t size = static_cast<int64_t>(bytes.size());
  comm_send(comm, &size, sizeof size, to);
  comm_send(comm, bytes.data(), size, to);
}

std::string comm_recv_bytes(const Comm& comm, int from) {
  int64_t size = 0;
  comm_recv(comm, &size, sizeof size, from);
  check(size >= 0, "receive from rank ", from, ": a message of ", size, " bytes");
  std::string out(static_cast<size_t>(size), '\0');
  comm_recv(comm, out.data(), size, from);
  return out;
}

void comm_broadcast_bytes(const Comm& comm, std::string& bytes, int root) {
  int64_t size = static_cast<int64_t>(bytes.size());
  comm_broadcast(comm, &size, sizeof size, root);
  bytes.resize(static_cast<size_t>(size));
  comm_broadcast(comm, bytes.data(), size, root);
}

void comm_all_reduce_sum(const Comm& comm, float* data, int64_t n) { reduce(comm, data, n, mpi::Type::F32, false); }
void comm_all_reduce_sum(const Comm& comm, double* data, int64_t n) { reduce(comm, data, n, mpi::Type::F64, false); }
void comm_all_reduce_sum(const Comm& comm, int64_t* data, int64_t n) { reduce(comm, data, n, mpi::Type::I64, false); }
void comm_all_reduce_max(const Comm& comm, double* data, int64_t n) { reduce(comm, data, n, mpi::Type::F64, true); }

void comm_sum_in_rank_order(const Comm& comm, std::vector<double>& values) {
  if (comm.world_size == 1) return;
  // A table with one row per rank, each rank filling its own: x + 0 = x, so the all-reduce is a
  // gather whatever order the transport adds in; then the rows are summed in rank order.
  const size_t k = values.size();
  std::vector<double> table(k * static_cast<size_t>(comm.world_size), 0.0);
  std::copy(values.begin(), values.end(), table.begin() + static_cast<int64_t>(k) * comm.rank);
  comm_all_reduce_sum(comm, table.data(), static_cast<int64_t>(table.size()));
  std::fill(values.begin(), values.end(), 0.0);
  for (int r = 0; r < comm.world_size; ++r)
    for (size_t i = 0; i < k; ++i) values[i] += table[static_cast<size_t>(r) * k + i];
}

std::vector<std::string> comm_all_gather_bytes(const Comm& comm, const std::string& mine) {
  if (comm.world_size == 1) return {mine};
  // Sizes, then the bytes packed into int64 words at per-rank offsets, zeros elsewhere: an integer
  // sum is then a gather on every transport (x + 0 = x exactly).
  std::vector<int64_t> sizes(comm.world_size, 0);
  sizes[comm.rank] = static_cast<int64_t>(mine.size());
  comm_all_reduce_sum(comm, sizes.data(), comm.world_size);
  std::vector<int64_t> offsets(comm.world_size + 1, 0);
  for (int r = 0; r < comm.world_size; ++r) offsets[r + 1] = offsets[r] + (sizes[r] + 7) / 8;
  std::vector<int64_t> words(offsets.back(), 0);
  if (!mine.empty()) std::memcpy(words.data() + offsets[comm.rank], mine.data(), mine.size());
  comm_all_reduce_sum(comm, words.data(), static_cast<int64_t>(words.size()));
  std::vector<std::string> out(comm.world_size);
  for (int r = 0; r < comm.world_size; ++r)
    out[r].assign(reinterpret_cast<const char*>(words.data() + offsets[r]), static_cast<size_t>(sizes[r]));
  return out;
}

std::vector<int64_t> shard_bounds(int64_t n, int world_size) {
  check(n >= 0 && world_size >= 1, "shard_bounds: n ", n, ", world size ", world_size);
  constexpr int64_t kAlign = 64;
  int64_t chunk = (n + world_size - 1) / world_size;
  chunk = (chunk + kAlign - 1) / kAlign * kAlign;
  std::vector<int64_t> bounds(world_size + 1);
  for (int r = 0; r <= world_size; ++r) bounds[r] = std::min(n, static_cast<int64_t>(r) * chunk);
  bounds[world_size] = n;
  return bounds;
}

void add_in_rank_order(float* acc, const std::vector<const float*>& parts, int64_t n) {
  check(!parts.empty(), "add_in_rank_order: no parts");
  if (n <= 0) return;
  if (acc != parts[0]) std::memmove(acc, parts[0], static_cast<size_t>(n) * sizeof(float));
  for (size_t p = 1; p < parts.size(); ++p) {
    const float* x = parts[p];
    for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
  }
}

void comm_reduce_scatter_sum(const Comm& comm, const float* full, float* shard, int64_t n, bool ordered) {
  comm_reduce_scatter_sum(comm, {full}, shard, shard_bounds(n, comm.world_size), ordered);
}

void comm_reduce_scatter_sum(const Comm& comm, const std::vector<const float*>& parts, float* shard,
                             const std::vector<int64_t>& bounds, bool ordered) {
  const int W = comm.world_size;
  const int64_t A = static_cast<int64_t>(parts.size());
  check(A >= 1 && static_cast<int>(bounds.size()) == W + 1, "reduce-scatter: ", A, " parts, ", bounds.size(),
        " bounds for ", W, " ranks");
  const int64_t lo = bounds[comm.rank], count = bounds[comm.rank + 1] - lo;
  std::vector<const float*> mine;  // the parts' pieces of this rank's shard, in shard order
  if (W == 1) {
    for (const float* p : parts) mine.push_back(p + lo);
    if (count > 0) add_in_rank_order(shard, mine, count);
    return;
  }
  if (!comm.mpi) fail_no_transport(comm, "reduce-scatter");
  Timed timed{comm};
  std::vector<int64_t> counts(W);
  for (int r = 0; r < W; ++r) counts[r] = bounds[r + 1] - bounds[r];
  const int64_t n = bounds[W];
  std::vector<float> summed;
  if (!ordered) {  // the local parts first (in order), then MPI's reduction
    const float* local = parts[0];
    if (A > 1) summed.resize(static_cast<size_t>(n)), add_in_rank_order(summed.data(), parts, n), local = summed.data();
    return mpi::reduce_scatter(comm.group, local, shard, counts);
  }
  // Rank q receives, from every rank in rank order, each of its parts' pieces of q's shard: the
  // pieces arrive in shard order (rank, then part), and their sum is add_in_rank_order's.
  const float* send = parts[0];  // one part: block q is rank q's piece already
  std::vector<float> packed;
  if (A > 1) {
    packed.resize(static_cast<size_t>(n * A));
    float* out = packed.data();
    for (int q = 0; q < W; ++q)
      for (const float* p : parts) out = std::copy(p + bounds[q], p + bounds[q + 1], out);
    send = packed.data();
  }
  std::vector<int64_t> send_counts(counts);
  for (int64_t& c : send_counts) c *= A;
  std::vector<float> received(static_cast<size_t>(count * A) * W);
  mpi::all_to_all(comm.group, send, send_counts, received.data(), count * A);
  for (int64_t k = 0; k < A * W; ++k) mine.push_back(received.data() + k * count);
  if (count > 0) add_in_rank_order(shard, mine, count);
}

void comm_all_gather(const Comm& comm, float* full, int64_t n) {
  comm_all_gather(comm, full, shard_bounds(n, comm.world_size));
}

void comm_all_gather(const Comm& comm, float* full, const std::vector<int64_t>& bounds) {
  if (comm.world_size == 1) return;
  if (!comm.mpi) fail_no_transport(comm, "all-gather");
  Timed timed{comm};
  std::vector<int64_t> counts(comm.world_size);
  for (int r = 0; r < comm.world_size; ++r) counts[r] = bounds[r + 1] - bounds[r];
  mpi::all_gather(comm.group, full, counts);
}

void comm_all_reduce_sum_ordered(const Comm& comm, float* data, int64_t n) {
  if (comm.world_size == 1) return;
  comm_all_reduce_sum(comm, {data}, data, shard_bounds(n, comm.world_size), true);
}

void comm_all_reduce_sum(const Comm& comm, const std::vector<const float*>& parts, float* out,
                         const std::vector<int64_t>& bounds, bool ordered) {
  const int64_t lo = bounds[comm.rank], count = bounds[comm.rank + 1] - lo;
  std::vector<float> shard(static_cast<size_t>(count));
  comm_reduce_scatter_sum(comm, parts, shard.data(), bounds, ordered);
  if (count > 0) std::memcpy(out + lo, shard.data(), static_cast<size_t>(count) * sizeof(float));
  comm_all_gather(comm, out, bounds);
}

}  // namespace sqlrl
