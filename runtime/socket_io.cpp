#include "runtime/socket_io.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

namespace sqlrl {

bool socket_send_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

int socket_recv_all(int fd, void* data, size_t n, std::chrono::steady_clock::time_point deadline) {
  using Clock = std::chrono::steady_clock;
  const bool timed = deadline != Clock::time_point::max();
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (timed) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return -1;
      pollfd pfd{fd, POLLIN, 0};
      const int ready = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) return 0;
      if (ready == 0) continue;  // the loop re-checks the deadline
    }
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return 0;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return 1;
}

}  // namespace sqlrl
