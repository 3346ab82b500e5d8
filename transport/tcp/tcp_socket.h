// SPDX-License-Identifier: Apache-2.0
// Internal to the TCP transport: file descriptors, addresses, listening, connecting and the
// blocking helpers the connection handshake uses.
//
// Ownership: Fd owns one descriptor and closes it. Thread safety: none needed (each object is
// used by the thread that builds a mesh). Blocking: every blocking call takes a deadline and
// returns kTimeout past it. Errors: Status with the address and errno text.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/clock.h"
#include "base/status.h"

namespace kolo::tcp_detail {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  std::string text() const;  // "10.0.0.1:5000" or "[fe80::1]:5000"
};

// The address to listen on: the first IPv4 (else IPv6) address of network interface `iface`
// when given, else `host` resolved (a name or a numeric address), else 127.0.0.1. Port 0.
// kInvalidArgument when the interface or host has no usable address.
Status resolveListenAddress(const std::string& iface, const std::string& host, SocketAddress* out);
// Parses what SocketAddress::text() printed.
Status parseAddress(const std::string& text, SocketAddress* out);

// A listening socket on `addr` with a port the kernel picks; *bound gets the actual address.
Status listenOn(const SocketAddress& addr, int backlog, Fd* out, SocketAddress* bound);
// Connects to `addr`, retrying unreachable or timed-out attempts until `deadline`. `addr` is a
// peer that published it after it started listening, so a refused (or reset) attempt means that
// peer is gone: kPeerLost at once, not a retry until the deadline.
Status connectTo(const SocketAddress& addr, Deadline deadline, Fd* out);
// Accepts one connection on `listener` before `deadline`.
Status acceptOne(int listener, Deadline deadline, Fd* out);

// Blocking exact-length I/O on a (blocking or non-blocking) socket, bounded by `deadline`.
Status sendAll(int fd, const void* data, size_t bytes, Deadline deadline);
Status recvAll(int fd, void* data, size_t bytes, Deadline deadline);

// The options of a connected data socket: non-blocking, TCP_NODELAY, close-on-exec.
Status configureDataSocket(int fd);

// "connection reset by peer (errno 104)"
std::string errnoText(int err);

}  // namespace kolo::tcp_detail
