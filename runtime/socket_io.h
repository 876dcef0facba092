// Whole-buffer transfers on a stream socket, retried across EINTR and short transfers: the
// rendezvous of a multi-process job (runtime/rendezvous.cpp) and the SQL sandbox's pipe to its
// workers (sql/exec/sandbox.cpp).
#pragma once
#include <chrono>
#include <cstddef>

namespace sqlrl {

// Sends all n bytes (MSG_NOSIGNAL: a closed peer is a false return, not SIGPIPE).
bool socket_send_all(int fd, const void* data, size_t n);

// Receives exactly n bytes before `deadline`: 1 done, 0 the peer closed or the socket failed,
// -1 the deadline passed first.
int socket_recv_all(int fd, void* data, size_t n,
                    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

}  // namespace sqlrl
