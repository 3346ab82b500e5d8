// SPDX-License-Identifier: Apache-2.0
#include "transport/tcp/tcp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace kolo::tcp_detail {
namespace {

// Waits for `events` on fd until the deadline: ok, kTimeout, or kIo.
Status waitFor(int fd, short events, Deadline deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, msUntil(deadline));
    if (n > 0) return Status::ok();
    if (n < 0 && errno != EINTR) return Status(ErrorCode::kIo, std::string("tcp: poll: ") + errnoText(errno));
    if (n == 0 && Clock::now() >= deadline) {
      return Status(ErrorCode::kTimeout, std::string("tcp: timed out ") + what);
    }
  }
}

Status setNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return Status(ErrorCode::kIo, "tcp: fcntl(O_NONBLOCK): " + errnoText(errno));
  }
  return Status::ok();
}

}  // namespace

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string errnoText(int err) {
  char buf[128];
  // GNU strerror_r returns the message (maybe not in buf).
  const char* text = ::strerror_r(err, buf, sizeof buf);
  return std::string(text) + " (errno " + std::to_string(err) + ")";
}

std::string SocketAddress::text() const {
  char host[INET6_ADDRSTRLEN] = {0};
  if (storage.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&storage);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&storage);
  ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
  std::string text = std::string("[") + host;
  if (in6->sin6_scope_id != 0) text += "%" + std::to_string(in6->sin6_scope_id);
  return text + "]:" + std::to_string(ntohs(in6->sin6_port));
}

Status parseAddress(const std::string& text, SocketAddress* out) {
  const Status bad(ErrorCode::kInvalidArgument, "tcp: malformed peer address '" + text + "'");
  *out = SocketAddress{};
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 >= text.size()) return bad;
  char* end = nullptr;
  const long port = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port <= 0 || port > 65535) return bad;
  std::string host = text.substr(0, colon);
  if (!host.empty() && host.front() == '[') {
    if (host.back() != ']') return bad;
    host = host.substr(1, host.size() - 2);
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&out->storage);
    const size_t pct = host.find('%');
    if (pct != std::string::npos) {
      in6->sin6_scope_id = static_cast<uint32_t>(std::strtoul(host.c_str() + pct + 1, nullptr, 10));
      host = host.substr(0, pct);
    }
    if (::inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) != 1) return bad;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    out->length = sizeof(sockaddr_in6);
    return Status::ok();
  }
  auto* in = reinterpret_cast<sockaddr_in*>(&out->storage);
  if (::inet_pton(AF_INET, host.c_str(), &in->sin_addr) != 1) return bad;
  in->sin_family = AF_INET;
  in->sin_port = htons(static_cast<uint16_t>(port));
  out->length = sizeof(sockaddr_in);
  return Status::ok();
}

Status resolveListenAddress(const std::string& iface, const std::string& host, SocketAddress* out) {
  *out = SocketAddress{};
  if (!iface.empty()) {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) {
      return Status(ErrorCode::kIo, "tcp: getifaddrs: " + errnoText(errno));
    }
    bool seen = false;
    const ifaddrs* v4 = nullptr;
    const ifaddrs* v6 = nullptr;
    for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_name == nullptr || iface != a->ifa_name) continue;
      seen = true;
      if (a->ifa_addr == nullptr) continue;
      if (a->ifa_addr->sa_family == AF_INET && v4 == nullptr) v4 = a;
      if (a->ifa_addr->sa_family == AF_INET6 && v6 == nullptr) v6 = a;
    }
    const ifaddrs* pick = v4 != nullptr ? v4 : v6;
    if (pick != nullptr) {
      const socklen_t len = pick == v4 ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      std::memcpy(&out->storage, pick->ifa_addr, len);
      out->length = len;
    }
    ::freeifaddrs(list);
    if (pick == nullptr) {
      return Status(ErrorCode::kInvalidArgument,
                    "tcp: cannot listen on network interface '" + iface + "': " +
                        (seen ? "it has no IPv4 or IPv6 address" : "no such interface"));
    }
  } else {
    const std::string name = host.empty() ? "127.0.0.1" : host;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &res);
    if (rc != 0 || res == nullptr) {
      return Status(ErrorCode::kInvalidArgument, "tcp: cannot listen on address '" + name +
                                                     "': " + ::gai_strerror(rc));
    }
    // IPv4 first, as Gloo's TCP device resolves.
    const addrinfo* pick = res;
    for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
      if (a->ai_family == AF_INET) {
        pick = a;
        break;
      }
    }
    std::memcpy(&out->storage, pick->ai_addr, pick->ai_addrlen);
    out->length = static_cast<socklen_t>(pick->ai_addrlen);
    ::freeaddrinfo(res);
  }
  if (out->storage.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&out->storage)->sin_port = 0;
  } else {
    reinterpret_cast<sockaddr_in6*>(&out->storage)->sin6_port = 0;
  }
  return Status::ok();
}

Status listenOn(const SocketAddress& addr, int backlog, Fd* out, SocketAddress* bound) {
  Fd fd(::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status(ErrorCode::kIo, "tcp: socket: " + errnoText(errno));
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.length) != 0) {
    return Status(ErrorCode::kInvalidArgument,
                  "tcp: cannot listen on " + addr.text() + ": " + errnoText(errno));
  }
  if (::listen(fd.get(), backlog) != 0) {
    return Status(ErrorCode::kIo, "tcp: listen on " + addr.text() + ": " + errnoText(errno));
  }
  *bound = SocketAddress{};
  bound->length = sizeof(bound->storage);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound->storage), &bound->length) != 0) {
    return Status(ErrorCode::kIo, "tcp: getsockname: " + errnoText(errno));
  }
  KOLO_RETURN_IF_ERROR(setNonBlocking(fd.get()));
  *out = std::move(fd);
  return Status::ok();
}

Status connectTo(const SocketAddress& addr, Deadline deadline, Fd* out) {
  auto pause = std::chrono::milliseconds(1);
  int lastError = 0;
  for (;;) {
    Fd fd(::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return Status(ErrorCode::kIo, "tcp: socket: " + errnoText(errno));
    int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.length);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      Status s = waitFor(fd.get(), POLLOUT, deadline, ("connecting to " + addr.text()).c_str());
      if (!s.isOk()) return s;
      socklen_t len = sizeof err;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) {
      *out = std::move(fd);
      return Status::ok();
    }
    lastError = err;
    if (err == ECONNREFUSED || err == ECONNRESET) {
      return Status(ErrorCode::kPeerLost, "tcp: nothing listens at " + addr.text() + " any more (" +
                                              errnoText(err) +
                                              "): the process that published it is gone");
    }
    const bool retry =
        err == ENETUNREACH || err == EHOSTUNREACH || err == ETIMEDOUT || err == EAGAIN;
    if (!retry) break;
    if (Clock::now() + pause >= deadline) {
      return Status(ErrorCode::kTimeout,
                    "tcp: could not connect to " + addr.text() + ": " + errnoText(lastError));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
  return Status(ErrorCode::kIo,
                "tcp: could not connect to " + addr.text() + ": " + errnoText(lastError));
}

Status acceptOne(int listener, Deadline deadline, Fd* out) {
  for (;;) {
    KOLO_RETURN_IF_ERROR(waitFor(listener, POLLIN, deadline, "waiting for connections"));
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      *out = Fd(fd);
      return Status::ok();
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      return Status(ErrorCode::kIo, "tcp: accept: " + errnoText(errno));
    }
  }
}

Status sendAll(int fd, const void* data, size_t bytes, Deadline deadline) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      KOLO_RETURN_IF_ERROR(waitFor(fd, POLLOUT, deadline, "sending"));
      continue;
    }
    return Status(ErrorCode::kPeerLost, "tcp: send: " + errnoText(errno));
  }
  return Status::ok();
}

Status recvAll(int fd, void* data, size_t bytes, Deadline deadline) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Status(ErrorCode::kPeerLost, "tcp: connection closed by peer");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      KOLO_RETURN_IF_ERROR(waitFor(fd, POLLIN, deadline, "receiving"));
      continue;
    }
    return Status(ErrorCode::kPeerLost, "tcp: recv: " + errnoText(errno));
  }
  return Status::ok();
}

Status configureDataSocket(int fd) {
  KOLO_RETURN_IF_ERROR(setNonBlocking(fd));
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    return Status(ErrorCode::kIo, "tcp: TCP_NODELAY: " + errnoText(errno));
  }
  return Status::ok();
}

}  // namespace kolo::tcp_detail
