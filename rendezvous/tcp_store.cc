// SPDX-License-Identifier: Apache-2.0
// The TCP store client: one connection per TcpStore, speaking the wire protocol documented in
// rendezvous/store.h (constants in store_wire.h). The server is in tcp_store_server.cc.
//
// Requests are serialized by a mutex: the protocol has no request ids, so a reply belongs
// to whichever request is outstanding. A get()/wait() therefore holds the connection while the
// server waits; threads that block on keys while others write should use their own TcpStore.
// Every socket operation waits in poll() against a deadline: kIoTimeout for sending a request
// and, for the reply, the server-side wait plus kIoTimeout. A connection that failed mid-request
// (closed, reset, silent past its deadline) is out of sync, so it stays failed: later calls
// return kPeerLost naming the first failure instead of reading someone else's reply.
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>
#include <thread>

#include "rendezvous/store.h"
#include "rendezvous/store_wire.h"

namespace kolo {
namespace {

using namespace store_wire;
using std::chrono::milliseconds;
constexpr std::chrono::seconds kIoTimeout{60};

std::string errnoText(int err) { return std::strerror(err); }

// Sends or receives exactly n bytes on a non-blocking socket before the deadline.
Status transfer(int fd, bool sending, uint8_t* p, size_t n, Clock::time_point deadline,
                const std::string& peer) {
  while (n > 0) {
    ssize_t r = sending ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0)
      return Status(ErrorCode::kPeerLost, "store server " + peer + " closed the connection");
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET) {
      return Status(ErrorCode::kPeerLost,
                    "store server " + peer + " closed the connection (" + errnoText(errno) + ")");
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status(ErrorCode::kIo, "store connection to " + peer + ": " + errnoText(errno));
    }
    pollfd pfd{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    int ready = ::poll(&pfd, 1, msUntil(deadline));
    if (ready < 0 && errno != EINTR) {
      return Status(ErrorCode::kIo, "store connection to " + peer + ": poll: " + errnoText(errno));
    }
    if (ready == 0) {
      return Status(ErrorCode::kPeerLost, "store server " + peer + " stopped answering");
    }
  }
  return Status::ok();
}

// One non-blocking connect attempt to every address of host:port, each bounded by the deadline.
int connectOnce(const std::string& host, int port, Clock::time_point deadline, std::string* err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) {
    *err = std::string("cannot resolve host: ") + ::gai_strerror(gai);
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      *err = "socket: " + errnoText(errno);
      continue;
    }
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd pfd{fd, POLLOUT, 0};
      int ready;
      do {
        // At least 100 ms, so that even a zero connectTimeout gets one real attempt.
        ready = ::poll(&pfd, 1, std::max(msUntil(deadline), 100));
      } while (ready < 0 && errno == EINTR);
      int soErr = ETIMEDOUT;
      socklen_t len = sizeof(soErr);
      if (ready > 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soErr, &len);
      rc = soErr == 0 ? 0 : -1;
      errno = soErr;
    }
    if (rc != 0) {
      *err = errnoText(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd >= 0) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

class TcpStore final : public Store {
 public:
  TcpStore(std::string peer, int fd) : peer_(std::move(peer)), fd_(fd) {}
  ~TcpStore() override { ::close(fd_); }

  Status set(const std::string& key, const std::vector<uint8_t>& value) override {
    std::vector<uint8_t> reply;
    return request(kCmdSet, key, value, milliseconds(0), &reply);
  }

  Status get(const std::string& key, std::vector<uint8_t>* value, milliseconds timeout) override {
    KOLO_REQUIRE(value != nullptr, kInvalidArgument, "store get: value must not be null");
    return request(kCmdGet, key, timeoutValue(timeout), timeout, value);
  }

  Status add(const std::string& key, int64_t delta, int64_t* newValue) override {
    std::vector<uint8_t> arg, reply;
    appendLe(&arg, static_cast<uint64_t>(delta), 8);
    KOLO_RETURN_IF_ERROR(request(kCmdAdd, key, arg, milliseconds(0), &reply));
    KOLO_REQUIRE(reply.size() == 8, kIo,
                 "store server " + peer_ + " sent a " + std::to_string(reply.size()) +
                     "-byte ADD reply for '" + key + "' (expected 8)");
    if (newValue != nullptr) *newValue = static_cast<int64_t>(loadLe(reply.data(), 8));
    return Status::ok();
  }

  // The protocol waits for one key at a time; each WAIT gets what is left of the timeout.
  Status wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    auto deadline = deadlineAfter(timeout);
    for (const auto& key : keys) {
      auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
      left = std::max(left, milliseconds(0));
      std::vector<uint8_t> reply;
      Status s = request(kCmdWait, key, timeoutValue(left), left, &reply);
      if (s.code() == ErrorCode::kTimeout) {
        return Status(ErrorCode::kTimeout, timeoutMessage(timeout, key, "server " + peer_));
      }
      KOLO_RETURN_IF_ERROR(s);
    }
    return Status::ok();
  }

  Status check(const std::string& key, bool* exists) override {
    KOLO_REQUIRE(exists != nullptr, kInvalidArgument, "store check: exists must not be null");
    std::vector<uint8_t> reply;
    KOLO_RETURN_IF_ERROR(request(kCmdCheck, key, {}, milliseconds(0), &reply));
    KOLO_REQUIRE(reply.size() == 1, kIo,
                 "store server " + peer_ + " sent a malformed CHECK reply for '" + key + "'");
    *exists = reply[0] != 0;
    return Status::ok();
  }

  Status remove(const std::string& key) override {
    std::vector<uint8_t> reply;
    return request(kCmdDel, key, {}, milliseconds(0), &reply);
  }

 private:
  static std::vector<uint8_t> timeoutValue(milliseconds t) {
    std::vector<uint8_t> v;
    appendLe(&v, static_cast<uint64_t>(clampTimeout(t).count()), 4);
    return v;
  }

  // One request/reply exchange. serverWait is how long the server may legitimately hold the
  // reply (GET/WAIT); the reply deadline adds kIoTimeout to it.
  Status request(uint8_t cmd, const std::string& key, const std::vector<uint8_t>& value,
                 milliseconds serverWait, std::vector<uint8_t>* reply) {
    KOLO_REQUIRE(key.size() <= kMaxKeyBytes, kInvalidArgument,
                 "store key longer than " + std::to_string(kMaxKeyBytes) + " bytes");
    KOLO_REQUIRE(value.size() <= kMaxValueBytes, kInvalidArgument,
                 "store value for '" + key + "' is larger than 4 GiB");
    serverWait = clampTimeout(serverWait);
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.isOk()) {
      return Status(ErrorCode::kPeerLost,
                    "store connection to " + peer_ +
                        " is unusable after an earlier failure: " + broken_.message());
    }
    std::vector<uint8_t> head;
    head.reserve(kRequestHeader + key.size() + 8);
    head.push_back(cmd);
    appendLe(&head, key.size(), 4);
    head.insert(head.end(), key.begin(), key.end());
    appendLe(&head, value.size(), 8);
    auto deadline = Clock::now() + kIoTimeout;
    Status s = transfer(fd_, true, head.data(), head.size(), deadline, peer_);
    if (s.isOk()) {
      s = transfer(fd_, true, const_cast<uint8_t*>(value.data()), value.size(), deadline, peer_);
    }
    uint8_t rh[kReplyHeader];
    if (s.isOk()) {
      deadline = Clock::now() + serverWait + kIoTimeout;
      s = transfer(fd_, false, rh, sizeof(rh), deadline, peer_);
    }
    uint64_t len = s.isOk() ? loadLe(rh + 1, 8) : 0;
    if (s.isOk() && (rh[0] > kReplyError || len > kMaxValueBytes)) {
      s = Status(ErrorCode::kIo, "store server " + peer_ + " sent a malformed reply");
    }
    // The buffer grows with the bytes that actually arrive (1 MiB at a time), so a header that
    // announces up to 4 GiB and then stops cannot make the client allocate it (found by
    // test/fuzz/fuzz_store_client).
    std::vector<uint8_t> payload;
    while (s.isOk() && payload.size() < len) {
      size_t have = payload.size();
      size_t chunk = static_cast<size_t>(std::min<uint64_t>(len - have, uint64_t{1} << 20));
      payload.resize(have + chunk);
      s = transfer(fd_, false, payload.data() + have, chunk, deadline, peer_);
    }
    if (!s.isOk()) {
      broken_ = s;
      return Status(s.code(), std::string(cmdName(cmd)) + " '" + key + "': " + s.message());
    }
    if (rh[0] == kReplyTimeout) {
      return Status(ErrorCode::kTimeout, timeoutMessage(serverWait, key, "server " + peer_));
    }
    if (rh[0] == kReplyError) {
      return Status(ErrorCode::kInvalidArgument,
                    "store server " + peer_ + " rejected " + cmdName(cmd) + " '" + key +
                        "': " + std::string(payload.begin(), payload.end()));
    }
    *reply = std::move(payload);
    return Status::ok();
  }

  const std::string peer_;
  const int fd_;
  std::mutex mu_;
  Status broken_;  // guarded by mu_
};

}  // namespace

Status makeTcpStore(const std::string& host, int port, milliseconds connectTimeout,
                    std::shared_ptr<Store>* out) {
  KOLO_REQUIRE(out != nullptr, kInvalidArgument, "makeTcpStore: out must not be null");
  KOLO_REQUIRE(!host.empty(), kInvalidArgument, "makeTcpStore: empty host");
  KOLO_REQUIRE(port > 0 && port < 65536, kInvalidArgument,
               "makeTcpStore: port " + std::to_string(port) + " is out of range");
  std::string peer = host + ":" + std::to_string(port);
  auto deadline = Clock::now() + std::clamp(connectTimeout, milliseconds(0), milliseconds(INT_MAX));
  auto backoff = milliseconds(10);
  std::string err;
  for (;;) {
    int fd = connectOnce(host, port, deadline, &err);
    if (fd >= 0) {
      *out = std::make_shared<TcpStore>(peer, fd);
      return Status::ok();
    }
    // The server (kolorun, rank 0's helper) may not be up yet: retry until the deadline.
    int left = msUntil(deadline);
    if (left <= 0) break;
    std::this_thread::sleep_for(std::min(backoff, milliseconds(left)));
    backoff = std::min(backoff * 2, milliseconds(500));
  }
  return Status(ErrorCode::kTimeout, "could not connect to store server " + peer + " within " +
                                         std::to_string(connectTimeout.count()) +
                                         " ms (last error: " + err + ")");
}

}  // namespace kolo
