// SPDX-License-Identifier: Apache-2.0
// kolo's TCP transport with thread ranks over an in-memory store: matching (FIFO per (peer, tag),
// messages that come before their receive, zero-byte and large messages, both directions at
// once), test() without blocking, a byte count that differs from the receive's, timeouts and lost
// peers that name the rank, abort from another thread, split, creation errors and a stray
// connection at set-up. Rank threads record what they saw; the main thread checks it.
#include "transport/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "test/unit/loopback_ranks.h"
#include "transport/abort_notes.h"

using namespace kolo;
using kolo::testing::onRanks;
using kolo::testing::requireAllOk;
using namespace std::chrono_literals;

namespace {

using Group = std::vector<std::unique_ptr<TcpTransport>>;

Group makeGroup(int n, std::shared_ptr<Store> store = makeMemoryStore(),
                std::chrono::milliseconds timeout = 10s) {
  Group g(static_cast<size_t>(n));
  requireAllOk(onRanks(n, [&](int r) {
    return createTcpTransport(store, r, n, "", "", timeout, &g[static_cast<size_t>(r)]);
  }));
  for (auto& t : g) t->setTimeout(timeout);
  return g;
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double seconds(std::chrono::milliseconds d) { return std::chrono::duration<double>(d).count(); }

// "Promptly": what a case configures (a deadline, an abort's delay) plus this slack. CI runs
// these cases under ThreadSanitizer, two test programs at a time on 2 cores, where a thread can
// wait a second for a core. A hang runs into the 10 s group timeout, still far above.
constexpr double kSlackSeconds = 2.5;

std::vector<uint8_t> pattern(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed * 7 + (i >> 12));
  return v;
}

}  // namespace

TEST_CASE("tcp: identity, capabilities and argument checks") {
  Group g = makeGroup(3);
  for (int r = 0; r < 3; ++r) {
    CHECK(std::string(g[r]->name()) == "tcp");
    CHECK(g[r]->rank() == r);
    CHECK(g[r]->size() == 3);
    CHECK(g[r]->globalRank(2) == 2);
    CHECK(g[r]->globalRank(3) == -1);
    CHECK_FALSE(g[r]->capabilities().nativeAllreduce);
    CHECK_FALSE(g[r]->capabilities().sharedMemory);
  }
  int x = 0;
  CHECK(g[0]->allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum).code() == ErrorCode::kUnsupported);
  std::unique_ptr<PendingOps> p;
  CHECK(g[0]->post({sendOp(0, 1, &x, 4)}, &p).code() == ErrorCode::kInvalidArgument);
  CHECK(g[0]->post({sendOp(3, 1, &x, 4)}, &p).code() == ErrorCode::kInvalidArgument);
  CHECK(g[0]->post({recvOp(1, 1, nullptr, 4)}, &p).code() == ErrorCode::kInvalidArgument);
  // A rejected batch posted nothing: the transport is still usable.
  requireAllOk(onRanks(2, [&](int r) {
    int out = 40 + r, in = 0;
    Status s = g[r]->exchange({sendOp(1 - r, 1, &out, 4), recvOp(1 - r, 1, &in, 4)});
    return s.isOk() && in != 41 - r ? Status(ErrorCode::kInternal, "wrong value") : s;
  }));
}

TEST_CASE("tcp: FIFO per tag, independent tags, zero-byte and large messages in one batch") {
  constexpr int n = 3, kMsgs = 50;
  Group g = makeGroup(n);
  std::vector<std::vector<int>> got(n, std::vector<int>(kMsgs + 1, -1));
  std::vector<std::vector<uint8_t>> big(n), bigIn(n, std::vector<uint8_t>(5 << 20));
  for (int r = 0; r < n; ++r) big[r] = pattern(5 << 20, r);
  requireAllOk(onRanks(n, [&](int r) {
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<int> out(kMsgs + 1);
    for (int i = 0; i < kMsgs; ++i) out[i] = r * 1000 + i;
    out[kMsgs] = -7 - r;
    std::vector<P2POp> ops;
    // Receives first for tag 9, sends first for tag 7: matching must not care.
    ops.push_back(recvOp(prev, 9, &got[r][kMsgs], sizeof(int)));
    for (int i = 0; i < kMsgs; ++i) ops.push_back(sendOp(next, 7, &out[i], sizeof(int)));
    for (int i = 0; i < kMsgs; ++i) ops.push_back(recvOp(prev, 7, &got[r][i], sizeof(int)));
    ops.push_back(sendOp(next, 9, &out[kMsgs], sizeof(int)));
    ops.push_back(sendOp(next, 11, nullptr, 0));
    ops.push_back(recvOp(prev, 11, nullptr, 0));
    ops.push_back(sendOp(next, 12, big[r].data(), big[r].size()));
    ops.push_back(recvOp(prev, 12, bigIn[r].data(), bigIn[r].size()));
    return g[r]->exchange(ops);
  }));
  for (int r = 0; r < n; ++r) {
    const int prev = (r + n - 1) % n;
    for (int i = 0; i < kMsgs; ++i) CHECK(got[r][i] == prev * 1000 + i);
    CHECK(got[r][kMsgs] == -7 - prev);
    CHECK(bigIn[r] == big[prev]);
  }
}

TEST_CASE("tcp: messages that arrive before their receive is posted are kept, in order") {
  Group g = makeGroup(2);
  // Rank 0 sends a mix of small and large messages on two tags and finishes before rank 1
  // posts anything; rank 1 then receives tag 5 first, then tag 4, in two batches.
  const auto large = pattern(3 << 20, 1);
  std::vector<int> small = {1, 2, 3};
  std::vector<P2POp> sends = {sendOp(1, 4, &small[0], 4), sendOp(1, 4, large.data(), large.size()),
                              sendOp(1, 5, &small[1], 4), sendOp(1, 4, &small[2], 4),
                              sendOp(1, 5, nullptr, 0)};
  std::unique_ptr<PendingOps> sent;
  REQUIRE(g[0]->post(sends, &sent).isOk());
  // The large message does not fit in the kernel's buffers: rank 1 must read it early (while
  // waiting for tag 5) for rank 0's sends to finish.
  int a = 0, b = 0, c = 0;
  std::vector<uint8_t> largeIn(large.size());
  REQUIRE(g[1]->exchange({recvOp(0, 5, &b, 4), recvOp(0, 5, nullptr, 0)}).isOk());
  REQUIRE(sent->wait(Clock::now() + 5s).isOk());
  REQUIRE(g[1]->exchange({recvOp(0, 4, &a, 4), recvOp(0, 4, largeIn.data(), largeIn.size()),
                          recvOp(0, 4, &c, 4)})
              .isOk());
  CHECK(a == 1);
  CHECK(b == 2);
  CHECK(c == 3);
  CHECK(largeIn == large);
}

TEST_CASE("tcp: large messages both ways at once do not deadlock") {
  Group g = makeGroup(2);
  constexpr size_t kBytes = 48 << 20;
  std::vector<std::vector<uint8_t>> out = {pattern(kBytes, 3), pattern(kBytes, 4)};
  std::vector<std::vector<uint8_t>> in(2, std::vector<uint8_t>(kBytes));
  requireAllOk(onRanks(2, [&](int r) {
    // Sends posted first: both write until the kernel's buffers are full, then read.
    return g[r]->exchange(
        {sendOp(1 - r, 1, out[r].data(), kBytes), recvOp(1 - r, 1, in[r].data(), kBytes)});
  }));
  CHECK(in[0] == out[1]);
  CHECK(in[1] == out[0]);
}

TEST_CASE("tcp: test() does not block and completes once the peer sends") {
  Group g = makeGroup(2);
  int in = 0, out = 1234;
  std::unique_ptr<PendingOps> recv;
  REQUIRE(g[1]->post({recvOp(0, 3, &in, sizeof in)}, &recv).isOk());
  bool done = true;
  auto start = Clock::now();
  REQUIRE(recv->test(&done).isOk());
  CHECK_FALSE(done);
  // Nobody sends yet: a test() that blocked would wait for the 10 s timeout.
  CHECK(secondsSince(start) < kSlackSeconds);
  std::unique_ptr<PendingOps> send;
  REQUIRE(g[0]->post({sendOp(1, 3, &out, sizeof out)}, &send).isOk());
  auto deadline = Clock::now() + 5s;
  while (!done && Clock::now() < deadline) {
    REQUIRE(recv->test(&done).isOk());
    std::this_thread::sleep_for(1ms);
  }
  CHECK(done);
  CHECK(in == 1234);
  CHECK(send->wait(Clock::now() + 5s).isOk());
}

TEST_CASE("tcp: a byte count that differs from the posted receive aborts naming both") {
  Group g = makeGroup(2);
  int64_t out = 5;
  int32_t in = 0;
  std::unique_ptr<PendingOps> send;
  REQUIRE(g[0]->post({sendOp(1, 2, &out, sizeof out)}, &send).isOk());
  Status s = g[1]->exchange({recvOp(0, 2, &in, sizeof in)});
  CHECK(s.code() == ErrorCode::kInternal);
  CHECK_THAT(s.message(), Catch::Contains("8-byte message with tag 2"));
  CHECK_THAT(s.message(), Catch::Contains("posted for 4 bytes"));
  CHECK_THAT(s.message(), Catch::Contains("rank 0 (global 0)"));
  // Later calls fail with the same cause.
  CHECK(g[1]->exchange({recvOp(0, 2, &in, sizeof in)}).message() == s.message());
}

TEST_CASE("tcp: a silent peer gives kTimeout naming it; the batch stays usable until abandoned") {
  Group g = makeGroup(2);
  int in = 0, out = 4321;
  std::unique_ptr<PendingOps> p;
  REQUIRE(g[0]->post({recvOp(1, 4, &in, sizeof in)}, &p).isOk());
  const auto waitFor = 200ms;
  auto start = Clock::now();
  Status s = p->wait(Clock::now() + waitFor);
  CHECK(s.code() == ErrorCode::kTimeout);
  CHECK_THAT(s.message(), Catch::Contains("receive from rank 1 (global 1)"));
  // The deadline, then up to a quarter of it looking for the peers' abort notes.
  CHECK(secondsSince(start) < seconds(waitFor + waitFor / 4) + kSlackSeconds);
  // Still usable: the message comes, the same batch completes.
  std::unique_ptr<PendingOps> send;
  REQUIRE(g[1]->post({sendOp(0, 4, &out, sizeof out)}, &send).isOk());
  CHECK(p->wait(Clock::now() + 5s).isOk());
  CHECK(in == 4321);
  CHECK(send->wait(Clock::now() + 5s).isOk());
  // A deadline already past still sees a batch that completed meanwhile.
  REQUIRE(g[0]->post({recvOp(1, 9, &in, sizeof in)}, &p).isOk());
  out = 99;
  REQUIRE(g[1]->post({sendOp(0, 9, &out, sizeof out)}, &send).isOk());
  std::this_thread::sleep_for(100ms);
  CHECK(p->wait(Clock::now() - 1ms).isOk());
  CHECK(in == 99);
  CHECK(send->wait(Clock::now() + 5s).isOk());
  // Abandoned after a timeout: the transport aborts with the timeout, the peer hears of it.
  REQUIRE(g[0]->post({recvOp(1, 6, &in, sizeof in)}, &p).isOk());
  CHECK(p->wait(Clock::now() + 100ms).code() == ErrorCode::kTimeout);
  p.reset();
  Status after = g[0]->post({recvOp(1, 6, &in, sizeof in)}, &p);
  CHECK(after.code() == ErrorCode::kTimeout);
  CHECK_THAT(after.message(), Catch::Contains("abandoned"));
  CHECK(g[0]->abortCause().code() == ErrorCode::kTimeout);
  auto noticed = Clock::now();
  Status peer = g[1]->exchange({recvOp(0, 6, &in, sizeof in)});
  // The closed connection at once, then up to kNoteWait for rank 0's abort note.
  CHECK(secondsSince(noticed) < seconds(AbortNotes::kNoteWait) + kSlackSeconds);
  CHECK((peer.code() == ErrorCode::kPeerLost || peer.code() == ErrorCode::kTimeout));
  CHECK_THAT(peer.message(), Catch::Contains("rank 0 (global 0)"));
}

TEST_CASE("tcp: abort from another thread ends a wait promptly with the cause") {
  Group g = makeGroup(2);
  int in = 0;
  std::unique_ptr<PendingOps> p;
  REQUIRE(g[0]->post({recvOp(1, 5, &in, sizeof in)}, &p).isOk());
  const Status cause(ErrorCode::kAborted, "rank 3 lost its GPU");
  std::atomic<int> heard{0};
  g[0]->setAbortListener([&](const Status& s) {
    if (s.message() == cause.message()) ++heard;
  });
  const auto abortAfter = 100ms;
  std::thread aborter([&] {
    std::this_thread::sleep_for(abortAfter);
    g[0]->abort(cause);
  });
  auto start = Clock::now();
  Status s = p->wait(Clock::now() + 10s);
  aborter.join();
  CHECK(s.code() == ErrorCode::kAborted);
  CHECK(s.message() == cause.message());
  CHECK(secondsSince(start) < seconds(abortAfter) + kSlackSeconds);
  CHECK(heard == 1);
  g[0]->abort(Status(ErrorCode::kAborted, "again"));  // idempotent: the first cause stays
  CHECK(g[0]->abortCause().message() == cause.message());
  CHECK(heard == 1);
  // The peer sees its connection shut down, and names rank 0 with rank 0's cause.
  Status peer = g[1]->exchange({recvOp(0, 5, &in, sizeof in)});
  CHECK(peer.code() == ErrorCode::kAborted);
  CHECK_THAT(peer.message(), Catch::Contains("rank 3 lost its GPU"));
  CHECK_THAT(peer.message(), Catch::Contains("seen by rank 0 (global 0)"));
}

TEST_CASE("tcp: a peer that goes away gives kPeerLost naming it, also behind a silent one") {
  for (bool silentFirst : {false, true}) {
    Group g = makeGroup(3, makeMemoryStore(), 20s);
    int in1 = 0, in2 = 0;
    std::unique_ptr<PendingOps> p;
    std::vector<P2POp> ops = {recvOp(2, 6, &in2, sizeof in2), recvOp(1, 6, &in1, sizeof in1)};
    if (silentFirst) std::swap(ops[0], ops[1]);
    REQUIRE(g[0]->post(ops, &p).isOk());
    std::thread leaver([&] {
      std::this_thread::sleep_for(100ms);
      g[2].reset();  // closes its connections, as a dying process would
    });
    auto start = Clock::now();
    Status s = p->wait(Clock::now() + 20s);
    leaver.join();
    CHECK(s.code() == ErrorCode::kPeerLost);
    CHECK_THAT(s.message(), Catch::Contains("lost rank 2 (global 2) during a receive of 4 bytes"));
    CHECK(secondsSince(start) < 5.0);
  }
}

TEST_CASE("tcp: a peer that went away while nobody waited fails the next operation on it") {
  Group g = makeGroup(3);
  g[2].reset();
  std::this_thread::sleep_for(50ms);
  int x = 7, y[2] = {0, 0};  // a receive buffer per rank thread (one shared was a data race)
  // Other peers still work.
  requireAllOk(onRanks(2, [&](int r) {
    return g[r]->exchange({sendOp(1 - r, 1, &x, 4), recvOp(1 - r, 1, &y[r], 4)});
  }));
  CHECK(y[0] == 7);
  CHECK(y[1] == 7);
  Status s = g[0]->exchange({sendOp(2, 1, &x, 4), recvOp(2, 1, &y[0], 4)});
  CHECK(s.code() == ErrorCode::kPeerLost);
  CHECK_THAT(s.message(), Catch::Contains("rank 2 (global 2)"));
}

TEST_CASE("tcp: split gives members a connected sub-group and non-members nullptr") {
  constexpr int n = 3;
  Group g = makeGroup(n);
  for (int round = 0; round < 2; ++round) {  // the same set id twice: keys must not collide
    std::vector<std::unique_ptr<Transport>> sub(n);
    requireAllOk(onRanks(n, [&](int r) { return g[r]->split({0, 2}, 5, &sub[r]); }));
    REQUIRE(sub[0] != nullptr);
    REQUIRE(sub[2] != nullptr);
    CHECK(sub[1] == nullptr);
    CHECK(sub[0]->size() == 2);
    CHECK(sub[2]->rank() == 1);
    CHECK(sub[2]->globalRank(1) == 2);
    CHECK(sub[0]->globalRank(1) == 2);
    CHECK(sub[0]->timeout() == g[0]->timeout());
    int a = 10 + round, b = 20 + round, ina = 0, inb = 0;
    Status s0;  // Catch is not thread-safe: the thread reports, the main thread checks
    std::thread t0([&] { s0 = sub[0]->exchange({sendOp(1, 1, &a, 4), recvOp(1, 1, &ina, 4)}); });
    CHECK(sub[2]->exchange({sendOp(0, 1, &b, 4), recvOp(0, 1, &inb, 4)}).isOk());
    t0.join();
    CHECK(s0.isOk());
    CHECK(ina == 20 + round);
    CHECK(inb == 10 + round);
  }
  std::unique_ptr<Transport> bad;
  CHECK(g[0]->split({2, 0}, 6, &bad).code() == ErrorCode::kInvalidArgument);
  // Aborting the parent aborts its children; a child's lost peer is named by its global rank.
  std::vector<std::unique_ptr<Transport>> sub(n);
  requireAllOk(onRanks(n, [&](int r) { return g[r]->split({1, 2}, 7, &sub[r]); }));
  g[1]->abort(Status(ErrorCode::kAborted, "parent gone"));
  int x = 0;
  CHECK(sub[1]->exchange({recvOp(1, 1, &x, 4)}).message() == "parent gone");
  Status s = sub[2]->exchange({recvOp(0, 1, &x, 4)});
  CHECK_THAT(s.message(), Catch::Contains("parent gone"));
}

TEST_CASE("tcp: creation errors, a stray connection, successive generations over one store") {
  std::unique_ptr<TcpTransport> t;
  auto store = makeMemoryStore();
  CHECK(createTcpTransport(nullptr, 0, 1, "", "", 1s, &t).code() == ErrorCode::kInvalidArgument);
  CHECK(createTcpTransport(store, 2, 2, "", "", 1s, &t).code() == ErrorCode::kInvalidArgument);
  Status noIf = createTcpTransport(store, 0, 1, "no-such-if0", "", 1s, &t);
  CHECK(noIf.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(noIf.message(), Catch::Contains("no-such-if0"));
  CHECK(createTcpTransport(store, 0, 1, "", "no.such.host.invalid", 1s, &t).code() ==
        ErrorCode::kInvalidArgument);
  REQUIRE(createTcpTransport(makeMemoryStore(), 0, 1, "lo", "", 1s, &t).isOk());
  CHECK(t->size() == 1);
  // Rank 2 never arrives: rank 0 gives up after its timeout, naming it.
  {
    auto s3 = makeMemoryStore();
    std::unique_ptr<TcpTransport> t1;
    std::thread r1([&] { createTcpTransport(s3, 1, 3, "", "", 300ms, &t1).ignore(); });
    auto start = Clock::now();
    Status s = createTcpTransport(s3, 0, 3, "", "", 300ms, &t);
    r1.join();
    CHECK(s.code() == ErrorCode::kTimeout);
    CHECK_THAT(s.message(), Catch::Contains("rank(s) 2 did not connect"));
    CHECK(secondsSince(start) < 3.0);
  }
  // A stray client connects to rank 0's listener and says something else first: it is dropped
  // and the mesh still forms.
  {
    auto s2 = makeMemoryStore();
    std::unique_ptr<TcpTransport> t0, t1;
    Status s0;
    std::thread r0([&] { s0 = createTcpTransport(s2, 0, 2, "", "", 5s, &t0); });
    std::vector<uint8_t> addr;
    REQUIRE(s2->get("kolo/tcp/0/tcp/addr/0", &addr, 5s).isOk());
    const std::string text(addr.begin(), addr.end());
    const std::string hostPort = text.substr(text.find('|') + 1);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(std::stoi(hostPort.substr(hostPort.rfind(':') + 1))));
    inet_pton(AF_INET, hostPort.substr(0, hostPort.rfind(':')).c_str(), &sa.sin_addr);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    const char junk[16] = "GET / HTTP/1.0\n";
    REQUIRE(::write(fd, junk, sizeof junk) == static_cast<ssize_t>(sizeof junk));
    Status s1 = createTcpTransport(s2, 1, 2, "", "", 5s, &t1);
    r0.join();
    ::close(fd);
    REQUIRE(s0.isOk());
    REQUIRE(s1.isOk());
    int x = 5, y = 0;
    Status sent;
    std::thread a([&] { sent = t0->exchange({sendOp(1, 1, &x, 4)}); });
    CHECK(t1->exchange({recvOp(0, 1, &y, 4)}).isOk());
    a.join();
    CHECK(sent.isOk());
    CHECK(y == 5);
  }
  // Two jobs one after the other over the same store: the second must not read stale keys.
  for (int job = 0; job < 2; ++job) {
    Group g = makeGroup(2, store);
    int out0 = job * 10, out1 = job * 10 + 1, in0 = -1, in1 = -1;
    Status s0;
    std::thread a([&] { s0 = g[0]->exchange({sendOp(1, 1, &out0, 4), recvOp(1, 1, &in0, 4)}); });
    CHECK(g[1]->exchange({sendOp(0, 1, &out1, 4), recvOp(0, 1, &in1, 4)}).isOk());
    a.join();
    CHECK(s0.isOk());
    CHECK(in0 == job * 10 + 1);
    CHECK(in1 == job * 10);
  }
}
