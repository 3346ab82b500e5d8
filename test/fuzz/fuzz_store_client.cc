// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the rendezvous store's TCP client (makeTcpStore, rendezvous/store.h) reading
// replies from a server that sends arbitrary bytes.
//
// For every input a fake server on 127.0.0.1 accepts the client's connection, writes the input as
// its whole reply stream, half-closes and drains whatever the client sends. The client then runs
// a fixed script of store calls (set, get, add, check, wait on two keys, remove, get, add). A
// reference model reads the same bytes as the reply frames of store.h (u8 status | u64 len |
// payload) and predicts each call's outcome: the error code, the value a GET returns, the counter
// an ADD returns, the flag a CHECK returns; a connection that failed mid-reply must answer every
// later call with kPeerLost. The client must never crash, hang, or allocate memory it has not
// received (a reply header announcing 4 GiB over a connection that then closes must not cost
// 4 GiB: libFuzzer's -malloc_limit_mb turns that into a finding).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/store.h"
#include "test/fuzz/fuzz_util.h"

namespace {

using Bytes = std::vector<uint8_t>;
using kolo::ErrorCode;
using std::chrono::milliseconds;

using fuzz::fail;
using fuzz::le;

// What one store call should return.
struct Outcome {
  ErrorCode code = ErrorCode::kOk;
  Bytes value;  // GET: the value; ADD: the 8 counter bytes; CHECK: the flag byte
};

// The reply stream as the protocol defines it, consumed one exchange at a time.
class ModelServer {
 public:
  ModelServer(const uint8_t* p, size_t n) : p_(p), n_(n) {}

  // One request's reply. kOk with the payload, kTimeout, kInvalidArgument (an error reply), or
  // a broken connection (kPeerLost: closed early; kIo: a malformed header), after which every
  // exchange is kPeerLost.
  Outcome exchange() {
    if (broken_) return {ErrorCode::kPeerLost, {}};
    if (n_ - pos_ < 9) return breakWith(ErrorCode::kPeerLost);
    uint8_t status = p_[pos_];
    uint64_t len = le(p_ + pos_ + 1, 8);
    if (status > 2 || len > (1ull << 32)) return breakWith(ErrorCode::kIo);
    if (n_ - pos_ - 9 < len) return breakWith(ErrorCode::kPeerLost);
    Bytes payload(p_ + pos_ + 9, p_ + pos_ + 9 + len);
    pos_ += 9 + len;
    if (status == 1) return {ErrorCode::kTimeout, {}};
    if (status == 2) return {ErrorCode::kInvalidArgument, {}};
    return {ErrorCode::kOk, payload};
  }

 private:
  Outcome breakWith(ErrorCode code) {
    broken_ = true;
    return {code, {}};
  }
  const uint8_t* p_;
  size_t n_, pos_ = 0;
  bool broken_ = false;
};

// The fake server: one connection, the input as replies, then drain until the client leaves.
class FakeServer {
 public:
  explicit FakeServer(Bytes replies) : replies_(std::move(replies)) {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (listen_ < 0 || ::bind(listen_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_, 1) != 0 ||
        ::getsockname(listen_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      fail(std::string("fake server: ") + std::strerror(errno));
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    thread_.join();
    ::close(listen_);
  }
  int port() const { return port_; }

 private:
  void serve() {
    int fd = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    size_t off = 0;
    while (off < replies_.size()) {
      ssize_t w = ::send(fd, replies_.data() + off, replies_.size() - off, MSG_NOSIGNAL);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    ::shutdown(fd, SHUT_WR);
    uint8_t buf[4096];
    while (::recv(fd, buf, sizeof buf, 0) > 0) {
    }
    ::close(fd);
  }
  Bytes replies_;
  int listen_ = -1, port_ = 0;
  std::thread thread_;
};

void expect(const char* call, const kolo::Status& st, const Outcome& want) {
  if (st.code() != want.code) {
    fail(std::string(call) + " returned " + st.toString() + ", the model expected " +
         kolo::toString(want.code));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ModelServer model(data, size);
  std::shared_ptr<kolo::Store> store;
  {
    FakeServer server(Bytes(data, data + size));
    kolo::Status st = kolo::makeTcpStore("127.0.0.1", server.port(), milliseconds(5000), &store);
    if (!st.isOk()) fail("cannot connect to the fake server: " + st.toString());

    expect("set", store->set("a", {1, 2, 3}), model.exchange());

    Bytes value = {9};
    Outcome want = model.exchange();
    kolo::Status st2 = store->get("a", &value, milliseconds(50));
    expect("get", st2, want);
    if (st2.isOk() && value != want.value) fail("get returned the wrong value");

    int64_t counter = 0;
    want = model.exchange();
    if (want.code == ErrorCode::kOk && want.value.size() != 8) want = {ErrorCode::kIo, {}};
    kolo::Status st3 = store->add("n", 5, &counter);
    expect("add", st3, want);
    if (st3.isOk() && counter != static_cast<int64_t>(le(want.value.data(), 8))) {
      fail("add returned the wrong counter");
    }

    bool exists = false;
    want = model.exchange();
    if (want.code == ErrorCode::kOk && want.value.size() != 1) want = {ErrorCode::kIo, {}};
    kolo::Status st4 = store->check("a", &exists);
    expect("check", st4, want);
    if (st4.isOk() && exists != (want.value[0] != 0)) fail("check returned the wrong flag");

    // wait() asks for one key at a time and stops at the first failure.
    want = model.exchange();
    if (want.code == ErrorCode::kOk) want = model.exchange();
    expect("wait", store->wait({"a", "b"}, milliseconds(50)), want);

    expect("remove", store->remove("a"), model.exchange());

    want = model.exchange();
    kolo::Status st5 = store->get("b", &value, milliseconds(0));
    expect("get (2)", st5, want);
    if (st5.isOk() && value != want.value) fail("get (2) returned the wrong value");

    want = model.exchange();
    if (want.code == ErrorCode::kOk && want.value.size() != 8) want = {ErrorCode::kIo, {}};
    expect("add (2)", store->add("n", -1, &counter), want);

    store.reset();  // closes the connection, so the fake server's drain ends
  }
  return 0;
}
