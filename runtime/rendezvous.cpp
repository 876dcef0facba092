#include "runtime/rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/socket_io.h"

namespace sqlrl {

namespace {

using Clock = std::chrono::steady_clock;


const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void send_all(int fd, const void* data, size_t n, const std::string& where) {
  check(socket_send_all(fd, data, n), where, ": send failed: ", std::strerror(errno));
}

void recv_all(int fd, void* data, size_t n, const std::string& where) {
  check(socket_recv_all(fd, data, n) == 1, where, ": connection closed before the rendezvous payload arrived");
}

std::string tcp_root(const Rendezvous& r, int world_size, const std::string& payload) {
  const std::string where = str_cat("rendezvous on port ", r.port, " (rank 0)");
  Fd s;
  s.fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  bool v6 = s.fd >= 0;
  if (!v6) s.fd = ::socket(AF_INET, SOCK_STREAM, 0);
  check(s.fd >= 0, where, ": socket: ", std::strerror(errno));
  int one = 1, zero = 0;
  ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int bound = -1;
  if (v6) {
    ::setsockopt(s.fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // IPv4 peers too
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6, a.sin6_addr = in6addr_any, a.sin6_port = htons(static_cast<uint16_t>(r.port));
    bound = ::bind(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_ANY), a.sin_port = htons(static_cast<uint16_t>(r.port));
    bound = ::bind(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  check(bound == 0, where, ": bind: ", std::strerror(errno), " (is MASTER_PORT free?)");
  check(::listen(s.fd, world_size) == 0, where, ": listen: ", std::strerror(errno));
  const auto start = Clock::now();
  const uint64_t size = payload.size();
  for (int served = 1; served < world_size; ++served) {
    pollfd p{s.fd, POLLIN, 0};
    const int left_ms = static_cast<int>((r.timeout_s - seconds_since(start)) * 1000);
    check(left_ms > 0 && ::poll(&p, 1, left_ms) > 0, where, ": only ", served - 1, " of ", world_size - 1,
          " ranks connected within ", r.timeout_s, " s");
    Fd c;
    c.fd = ::accept(s.fd, nullptr, nullptr);
    check(c.fd >= 0, where, ": accept: ", std::strerror(errno));
    send_all(c.fd, &size, sizeof size, where);
    send_all(c.fd, payload.data(), payload.size(), where);
  }
  return payload;
}

std::string tcp_peer(const Rendezvous& r, int rank) {
  const std::string where = str_cat("rendezvous with ", r.addr, ":", r.port, " (rank ", rank, ")");
  const auto start = Clock::now();
  std::string last_error = "no attempt";
  while (seconds_since(start) < r.timeout_s) {
    addrinfo hints{}, *found = nullptr;
    hints.ai_family = AF_UNSPEC, hints.ai_socktype = SOCK_STREAM;
    const std::string port = std::to_string(r.port);
    if (int e = ::getaddrinfo(r.addr.c_str(), port.c_str(), &hints, &found); e != 0) {
      last_error = ::gai_strerror(e);
    } else {
      for (addrinfo* a = found; a; a = a->ai_next) {
        Fd c;
        c.fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (c.fd < 0) continue;
        if (::connect(c.fd, a->ai_addr, a->ai_addrlen) != 0) {
          last_error = std::strerror(errno);
          continue;
        }
        ::freeaddrinfo(found);
        uint64_t size = 0;
        recv_all(c.fd, &size, sizeof size, where);
        check(size < (1u << 20), where, ": payload of ", size, " bytes is not a rendezvous message");
        std::string payload(size, '\0');
        recv_all(c.fd, payload.data(), payload.size(), where);
        return payload;
      }
      ::freeaddrinfo(found);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  fail(where, ": rank 0 did not answer within ", r.timeout_s, " s (last error: ", last_error, ")");
}

std::string file_root(const Rendezvous& r, const std::string& payload) {
  const std::string tmp = r.file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    check(static_cast<bool>(out), "rendezvous file ", tmp, ": cannot write: ", std::strerror(errno));
    out << r.job_key << '\n' << payload.size() << '\n';
    out.write(payload.data(), static_cast<std::streamsize>(payload.size()));
    out.flush();
    check(static_cast<bool>(out), "rendezvous file ", tmp, ": write failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, r.file, ec);
  check(!ec, "rendezvous file ", r.file, ": ", ec.message());
  return payload;
}

std::string file_peer(const Rendezvous& r, int rank) {
  const auto start = Clock::now();
  while (seconds_since(start) < r.timeout_s) {
    std::ifstream in(r.file, std::ios::binary);
    std::string key;
    uint64_t size = 0;
    if (in && std::getline(in, key) && key == r.job_key && (in >> size) && in.get() == '\n') {
      std::string payload(size, '\0');
      if (in.read(payload.data(), static_cast<std::streamsize>(size))) return payload;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  fail("rendezvous file ", r.file, " (rank ", rank, "): no payload with job key '", r.job_key, "' within ",
       r.timeout_s, " s");
}

}  // namespace

Rendezvous rendezvous_from_env() {
  Rendezvous r;
  r.file = env_or("SQLRL_RENDEZVOUS_FILE", "");
  r.addr = env_or("MASTER_ADDR", "");
  const std::string port = env_or("MASTER_PORT", "");
  if (!port.empty()) {
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    check(*end == '\0' && p > 0 && p < 65536, "MASTER_PORT='", port, "' is not a port number");
    r.port = static_cast<int>(p);
  }
  if (const char* job = std::getenv("SLURM_JOB_ID")) r.job_key = str_cat(job, ".", env_or("SLURM_STEP_ID", "0"));
  else r.job_key = port;
  if (const char* t = std::getenv("SQLRL_RENDEZVOUS_TIMEOUT_S")) r.timeout_s = std::atof(t);
  check(!r.file.empty() || (!r.addr.empty() && r.port > 0),
        "a job of several processes without MPI needs a rendezvous: set MASTER_ADDR and MASTER_PORT (as torchrun "
        "does), or SQLRL_RENDEZVOUS_FILE to a path every rank sees");
  return r;
}

std::string rendezvous_broadcast(const Rendezvous& r, int rank, int world_size, const std::string& payload) {
  if (world_size == 1) return payload;
  if (!r.file.empty()) return rank == 0 ? file_root(r, payload) : file_peer(r, rank);
  return rank == 0 ? tcp_root(r, world_size, payload) : tcp_peer(r, rank);
}

}  // namespace sqlrl
