// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the rendezvous store's TCP protocol as TcpStoreServer (rendezvous/store.h) serves
// it. The input is one client's byte stream: the harness starts a fresh server on 127.0.0.1 for
// every input (so runs are independent and reproducible), sends the bytes over a real loopback
// connection, half-closes it and reads every reply until the server closes.
//
// The replies are checked against a reference model of the protocol written from its
// documentation (store.h, store_wire.h): the server's reply stream must equal the model's, reply
// by reply (OK payloads byte for byte; for timeout and error replies the status, with a non-empty
// text). One allowance: a GET/WAIT on a missing key parks the connection; when the server then
// sees the half-close it drops the client (a rank that left), so the stream may stop at a park,
// or, when the wait was short, carry the timeout reply and go on. A reply stream that is not a
// sequence of well-formed replies, or a server that stops answering, is a finding.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/store.h"
#include "test/support/tcp_store_server.h"
#include "test/fuzz/fuzz_util.h"

namespace {

using Bytes = std::vector<uint8_t>;

using fuzz::fail;
using fuzz::le;

Bytes le8(uint64_t v) {
  Bytes b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  return b;
}

struct Reply {
  uint8_t status = 0;  // 0 ok, 1 timeout, 2 error
  Bytes payload;
  bool parkedBefore = false;  // the request was a wait on a missing key (the stream may stop)
};

// The protocol as store.h documents it, for one connection with nobody else writing.
std::vector<Reply> model(const uint8_t* p, size_t n) {
  constexpr uint64_t kMaxKey = 1u << 20, kMaxValue = 1ull << 32;
  std::map<std::string, Bytes> kv;
  std::vector<Reply> out;
  auto ok = [&out](Bytes b) { out.push_back({0, std::move(b), false}); };
  auto err = [&out](uint8_t status) { out.push_back({status, {}, false}); };
  size_t pos = 0;
  for (;;) {
    size_t avail = n - pos;
    if (avail < 5) break;
    uint64_t keyLen = le(p + pos + 1, 4);
    if (keyLen > kMaxKey) {
      err(2);  // and the server closes: the stream cannot be resynchronized
      break;
    }
    if (avail < 5 + keyLen + 8) break;
    uint64_t valLen = le(p + pos + 5 + keyLen, 8);
    if (valLen > kMaxValue) {
      err(2);
      break;
    }
    if (avail < 13 + keyLen + valLen) break;
    uint8_t cmd = p[pos];
    std::string key(reinterpret_cast<const char*>(p + pos + 5), keyLen);
    const uint8_t* val = p + pos + 13 + keyLen;
    pos += 13 + keyLen + valLen;
    auto it = kv.find(key);
    switch (cmd) {
      case 1:  // SET
        kv[key].assign(val, val + valLen);
        ok({});
        break;
      case 2:  // GET
      case 4:  // WAIT
        if (valLen != 4) {
          err(2);
        } else if (it != kv.end()) {
          ok(cmd == 2 ? it->second : Bytes{});
        } else {
          err(1);
          out.back().parkedBefore = le(val, 4) != 0;
        }
        break;
      case 3:  // ADD
        if (valLen != 8 || (it != kv.end() && it->second.size() != 8)) {
          err(2);
        } else {
          uint64_t old = it == kv.end() ? 0 : le(it->second.data(), 8);
          kv[key] = le8(old + le(val, 8));
          ok(kv[key]);
        }
        break;
      case 5:  // CHECK
        ok({static_cast<uint8_t>(it != kv.end() ? 1 : 0)});
        break;
      case 6:  // DEL
        kv.erase(key);
        ok({});
        break;
      default:
        err(2);
    }
  }
  return out;
}

// Sends the input, half-closes, returns everything the server wrote until it closed.
Bytes exchange(int port, const uint8_t* data, size_t size) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) fail(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
    fail(std::string("connect: ") + std::strerror(errno));
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  size_t sent = 0;
  bool halfClosed = false;
  Bytes got;
  for (;;) {
    if (sent == size && !halfClosed) {
      ::shutdown(fd, SHUT_WR);
      halfClosed = true;
    }
    pollfd pfd{fd, static_cast<short>(POLLIN | (halfClosed ? 0 : POLLOUT)), 0};
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0 || ::poll(&pfd, 1, left) == 0) fail("the server stopped answering");
    if (!halfClosed && (pfd.revents & POLLOUT)) {
      ssize_t w = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
      if (w > 0) sent += static_cast<size_t>(w);
      if (w < 0 && errno != EAGAIN && errno != EINTR) {
        // The server may close early (a key too long); what it wrote is still readable.
        sent = size;
      }
    }
    if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
      uint8_t buf[65536];
      ssize_t r = ::recv(fd, buf, sizeof buf, 0);
      if (r > 0) got.insert(got.end(), buf, buf + r);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) break;
    }
  }
  ::close(fd);
  return got;
}

void check(const uint8_t* data, size_t size, const Bytes& got) {
  std::vector<Reply> want = model(data, size);
  size_t pos = 0, i = 0;
  while (pos < got.size()) {
    if (i >= want.size()) fail("more replies than requests (reply " + std::to_string(i) + ")");
    const Reply& w = want[i];
    if (got[pos] != w.status) {
      fail("reply " + std::to_string(i) + " has status " + std::to_string(got[pos]) +
           ", expected " + std::to_string(w.status));
    }
    if (got.size() - pos < 9) break;  // cut inside a header
    uint64_t len = le(&got[pos + 1], 8);
    if (w.status == 0 && len != w.payload.size()) {
      fail("reply " + std::to_string(i) + " has length " + std::to_string(len) + ", expected " +
           std::to_string(w.payload.size()));
    }
    if (w.status != 0 && len == 0) fail("reply " + std::to_string(i) + ": error without text");
    size_t have = std::min<uint64_t>(len, got.size() - pos - 9);
    if (w.status == 0 && have > 0 && std::memcmp(&got[pos + 9], w.payload.data(), have) != 0) {
      fail("reply " + std::to_string(i) + " has the wrong payload");
    }
    if (have < len) break;  // cut inside a payload
    pos += 9 + len;
    ++i;
  }
  bool complete = pos == got.size() && i == want.size();
  if (complete) return;
  // Stopped early: only allowed at or before a parked wait the half-close ended.
  for (size_t j = i; j < want.size(); ++j) {
    if (want[j].parkedBefore) return;
  }
  fail("the reply stream stopped after " + std::to_string(i) + " of " +
       std::to_string(want.size()) + " replies (" + std::to_string(got.size()) + " bytes)");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<kolo::TcpStoreServer> server;
  kolo::Status st = kolo::startTcpStoreServer("127.0.0.1", 0, &server);
  if (!st.isOk()) fail("cannot start the server: " + st.toString());
  Bytes got = exchange(server->port(), data, size);
  server.reset();
  check(data, size, got);
  return 0;
}
