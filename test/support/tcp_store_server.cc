// SPDX-License-Identifier: Apache-2.0
// TcpStoreServer: the store server for tests (kolorun serves the same protocol from
// Python). The wire protocol is documented in rendezvous/store.h, its constants are in store_wire.h.
//
// One background thread runs a poll() loop over the listening socket, a self-pipe (the
// destructor's wake-up) and every client. Input is buffered per client and parsed only when a
// whole request has arrived; replies are queued and written as the socket accepts them, so one
// slow reader never blocks the others. A GET/WAIT for a missing key parks its client (later
// requests on that connection stay buffered, keeping replies in order) until a SET/ADD creates
// the key or the client's deadline passes, which bounds the poll timeout. The map is touched
// only by that thread, so it needs no lock. Destroying the server closes every connection: a
// parked client sees EOF and reports kPeerLost rather than hanging.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include "test/support/tcp_store_server.h"
#include "rendezvous/store.h"
#include "rendezvous/store_wire.h"

namespace kolo {
namespace {

using namespace store_wire;
using std::chrono::milliseconds;

std::string errnoText(int err) { return std::strerror(err); }

class TcpStoreServerImpl final : public TcpStoreServer {
 public:
  TcpStoreServerImpl(int listenFd, int port, int wakeRead, int wakeWrite)
      : listenFd_(listenFd), port_(port), wakeRead_(wakeRead), wakeWrite_(wakeWrite) {
    thread_ = std::thread([this] { run(); });
  }

  ~TcpStoreServerImpl() override {
    uint8_t byte = 1;
    while (::write(wakeWrite_, &byte, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
    ::close(listenFd_);
    ::close(wakeRead_);
    ::close(wakeWrite_);
  }

  int port() const override { return port_; }

 private:
  struct Conn {
    int fd = -1;
    std::vector<uint8_t> in, out;
    size_t inOff = 0, outOff = 0;
    bool parked = false;
    uint8_t parkedCmd = 0;
    uint32_t parkedMs = 0;
    std::string parkedKey;
    Clock::time_point parkedDeadline;
    bool eof = false, dead = false, closeAfterFlush = false;
  };

  void run() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.assign({{wakeRead_, POLLIN, 0}, {listenFd_, POLLIN, 0}});
      int timeoutMs = -1;
      for (auto& c : conns_) {
        short ev =
            static_cast<short>((c->eof ? 0 : POLLIN) | (c->outOff < c->out.size() ? POLLOUT : 0));
        fds.push_back({c->fd, ev, 0});
        if (c->parked) {
          int ms = msUntil(c->parkedDeadline);
          timeoutMs = timeoutMs < 0 ? ms : std::min(timeoutMs, ms);
        }
      }
      if (::poll(fds.data(), fds.size(), timeoutMs) < 0 && errno != EINTR) break;
      if (fds[0].revents != 0) break;
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) readSome(*conns_[i - 2]);
      }
      if (fds[1].revents & POLLIN) acceptAll();
      for (bool changed = true; changed;) {
        changed = false;
        for (auto& c : conns_) changed |= serve(*c);
      }
      for (auto& c : conns_) flush(*c);
      conns_.erase(std::remove_if(conns_.begin(), conns_.end(),
                                  [](const std::unique_ptr<Conn>& c) {
                                    // A peer that half-closed still gets its queued replies;
                                    // one that left while parked is gone (a killed rank).
                                    bool flushed = c->outOff == c->out.size();
                                    bool drop = c->dead || (c->eof && (c->parked || flushed)) ||
                                                (c->closeAfterFlush && flushed);
                                    if (drop) ::close(c->fd);
                                    return drop;
                                  }),
                   conns_.end());
    }
    for (auto& c : conns_) ::close(c->fd);
    conns_.clear();
  }

  void acceptAll() {
    for (;;) {
      int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN, or out of descriptors: try again on the next readiness
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      conns_.push_back(std::make_unique<Conn>());
      conns_.back()->fd = fd;
    }
  }

  void readSome(Conn& c) {
    constexpr size_t kChunk = 256 * 1024;
    while (!c.eof && !c.dead) {
      size_t old = c.in.size();
      c.in.resize(old + kChunk);
      ssize_t n = ::recv(c.fd, c.in.data() + old, kChunk, 0);
      c.in.resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
      if (n > 0 && static_cast<size_t>(n) == kChunk) continue;
      if (n > 0) return;
      if (n == 0) {
        c.eof = true;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return;
      } else if (errno != EINTR) {
        c.dead = true;
      }
    }
  }

  void flush(Conn& c) {
    while (!c.dead && c.outOff < c.out.size()) {
      ssize_t n = ::send(c.fd, c.out.data() + c.outOff, c.out.size() - c.outOff,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.outOff += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
      } else if (n < 0 && errno != EINTR) {
        c.dead = true;
      }
    }
    c.out.clear();
    c.outOff = 0;
  }

  void reply(Conn& c, uint8_t status, const uint8_t* payload, size_t n) {
    c.out.push_back(status);
    appendLe(&c.out, n, 8);
    c.out.insert(c.out.end(), payload, payload + n);
  }
  void replyText(Conn& c, uint8_t status, const std::string& text) {
    reply(c, status, reinterpret_cast<const uint8_t*>(text.data()), text.size());
  }

  // Answers a GET/WAIT whose key exists.
  void answer(Conn& c, uint8_t cmd, const std::string& key) {
    if (cmd == kCmdGet) {
      const auto& v = data_[key];
      reply(c, kReplyOk, v.data(), v.size());
    } else {
      reply(c, kReplyOk, nullptr, 0);
    }
  }

  // Settles a parked request if it can, then handles every complete buffered request. Returns
  // true when the map gained or changed a key (parked clients may now be answerable).
  bool serve(Conn& c) {
    if (c.dead) return false;
    if (c.parked) {
      if (data_.count(c.parkedKey) != 0) {
        answer(c, c.parkedCmd, c.parkedKey);
      } else if (Clock::now() >= c.parkedDeadline) {
        replyText(c, kReplyTimeout,
                  "timed out after " + std::to_string(c.parkedMs) + " ms waiting for key '" +
                      c.parkedKey + "'");
      } else {
        return false;
      }
      c.parked = false;
    }
    bool changed = false;
    while (!c.parked && !c.closeAfterFlush) {
      size_t avail = c.in.size() - c.inOff;
      const uint8_t* p = c.in.data() + c.inOff;
      if (avail < kRequestHeader) break;
      uint64_t keyLen = loadLe(p + 1, 4);
      if (keyLen > kMaxKeyBytes) {
        replyText(c, kReplyError, "key longer than " + std::to_string(kMaxKeyBytes) + " bytes");
        c.closeAfterFlush = true;  // the stream cannot be resynchronized
        break;
      }
      if (avail < kRequestHeader + keyLen + 8) break;
      uint64_t valLen = loadLe(p + kRequestHeader + keyLen, 8);
      if (valLen > kMaxValueBytes) {
        replyText(c, kReplyError, "value larger than 4 GiB");
        c.closeAfterFlush = true;
        break;
      }
      size_t total = kRequestHeader + keyLen + 8 + valLen;
      if (avail < total) break;
      std::string key(reinterpret_cast<const char*>(p + kRequestHeader), keyLen);
      changed |= handle(c, p[0], key, p + kRequestHeader + keyLen + 8, valLen);
      c.inOff += total;
    }
    if (c.inOff == c.in.size()) {
      c.in.clear();
      c.inOff = 0;
    } else if (c.inOff > 0) {
      c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(c.inOff));
      c.inOff = 0;
    }
    return changed;
  }

  bool handle(Conn& c, uint8_t cmd, const std::string& key, const uint8_t* val, size_t len) {
    switch (cmd) {
      case kCmdSet:
        data_[key].assign(val, val + len);
        reply(c, kReplyOk, nullptr, 0);
        return true;
      case kCmdGet:
      case kCmdWait: {
        if (len != 4) {
          replyText(c, kReplyError, std::string(cmdName(cmd)) + " expects a 4-byte timeout");
          return false;
        }
        uint32_t ms = static_cast<uint32_t>(loadLe(val, 4));
        if (data_.count(key) != 0) {
          answer(c, cmd, key);
        } else if (ms == 0) {
          replyText(c, kReplyTimeout, "key '" + key + "' is not set");
        } else {
          c.parked = true;
          c.parkedCmd = cmd;
          c.parkedMs = ms;
          c.parkedKey = key;
          c.parkedDeadline = Clock::now() + milliseconds(ms);
        }
        return false;
      }
      case kCmdAdd: {
        if (len != 8) {
          replyText(c, kReplyError, "ADD expects an 8-byte delta");
          return false;
        }
        auto it = data_.find(key);
        if (it != data_.end() && it->second.size() != 8) {
          replyText(c, kReplyError,
                    "key '" + key + "' holds a " + std::to_string(it->second.size()) +
                        "-byte value, not an 8-byte counter");
          return false;
        }
        uint64_t v = (it == data_.end() ? 0 : loadLe(it->second.data(), 8)) + loadLe(val, 8);
        std::vector<uint8_t> enc;
        appendLe(&enc, v, 8);
        data_[key] = enc;
        reply(c, kReplyOk, enc.data(), enc.size());
        return true;
      }
      case kCmdCheck: {
        uint8_t exists = data_.count(key) != 0 ? 1 : 0;
        reply(c, kReplyOk, &exists, 1);
        return false;
      }
      case kCmdDel:
        data_.erase(key);
        reply(c, kReplyOk, nullptr, 0);
        return false;
      default:
        replyText(c, kReplyError, "unknown command " + std::to_string(cmd));
        return false;
    }
  }

  const int listenFd_, port_, wakeRead_, wakeWrite_;
  std::thread thread_;
  std::vector<std::unique_ptr<Conn>> conns_;          // server thread only
  std::map<std::string, std::vector<uint8_t>> data_;  // server thread only
};

}  // namespace

Status startTcpStoreServer(const std::string& host, int port,
                           std::unique_ptr<TcpStoreServer>* out) {
  KOLO_REQUIRE(out != nullptr, kInvalidArgument, "startTcpStoreServer: out must not be null");
  KOLO_REQUIRE(port >= 0 && port < 65536, kInvalidArgument,
               "startTcpStoreServer: port " + std::to_string(port) + " is out of range");
  std::string bindHost = host.empty() ? "0.0.0.0" : host;
  std::string where = bindHost + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int gai = ::getaddrinfo(bindHost.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) {
    return Status(ErrorCode::kIo,
                  "store server: cannot resolve " + bindHost + ": " + ::gai_strerror(gai));
  }
  // IPv4 first: clients given "127.0.0.1" must reach a server started on "localhost".
  std::vector<addrinfo*> addrs;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) addrs.push_back(ai);
  std::stable_partition(addrs.begin(), addrs.end(),
                        [](addrinfo* ai) { return ai->ai_family == AF_INET; });
  int fd = -1;
  std::string err = "no address";
  for (addrinfo* ai : addrs) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = "socket: " + errnoText(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) break;
    err = errnoText(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) return Status(ErrorCode::kIo, "store server: cannot listen on " + where + ": " + err);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  int wake[2];
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      ::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    int e = errno;
    ::close(fd);
    return Status(ErrorCode::kIo, "store server on " + where + ": " + errnoText(e));
  }
  int actualPort = addr.ss_family == AF_INET6
                       ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                       : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  *out = std::make_unique<TcpStoreServerImpl>(fd, actualPort, wake[0], wake[1]);
  return Status::ok();
}

}  // namespace kolo
