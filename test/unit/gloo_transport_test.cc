// SPDX-License-Identifier: Apache-2.0
// The Gloo transport with thread ranks over an in-memory store: rendezvous, point-to-point on
// the tcp mesh linked to Gloo's (a failure or abort of either ends both), abort inside a native
// collective, a lost peer named by every survivor of a native collective, native collectives,
// split and creation errors. The point-to-point contract itself: tcp_transport_test.cc.
// Catch2 assertions are not thread-safe: rank threads record what they saw and the main thread
// checks it after joining them. Transports come from the registry, so this file builds (and
// its cases return early) when kolo is configured without Gloo.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "bootstrap/registry.h"
#include "kernels/reduce_cpu.h"
#include "test/unit/loopback_ranks.h"

using namespace kolo;
using kolo::testing::onRanks;
using kolo::testing::requireAllOk;
using namespace std::chrono_literals;

namespace {

using Group = std::vector<std::unique_ptr<Transport>>;

bool glooBuilt() {
  if (!transportBuilt(TransportKind::kGloo)) WARN("kolo was built without Gloo");
  return transportBuilt(TransportKind::kGloo);
}

Status createGloo(std::shared_ptr<Store> store, int rank, int size, const std::string& iface,
                  std::chrono::milliseconds timeout, std::unique_ptr<Transport>* out) {
  Config cfg;
  cfg.transport = TransportKind::kGloo;
  cfg.shm = ShmMode::kOff;  // the Gloo transport itself, not the shared-memory one over it
  cfg.glooIface = iface;
  cfg.startTimeoutSeconds = cfg.timeoutSeconds = timeout.count() / 1000.0;
  return createTransport(cfg, std::move(store), rank, size, out);
}

Group makeGroup(int n, std::shared_ptr<Store> store = makeMemoryStore(),
                std::chrono::milliseconds timeout = 10s) {
  Group g(static_cast<size_t>(n));
  requireAllOk(onRanks(
      n, [&](int r) { return createGloo(store, r, n, "", timeout, &g[static_cast<size_t>(r)]); }));
  for (auto& t : g) t->setTimeout(timeout);
  return g;
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double seconds(std::chrono::milliseconds d) { return std::chrono::duration<double>(d).count(); }

// "Promptly": what a case configures (here an abort's delay) plus this slack. CI runs these
// cases under ThreadSanitizer, two test programs at a time on 2 cores, where a thread can wait a
// second for a core. A hang runs into the 10 s group timeout, still far above.
constexpr double kSlackSeconds = 2.5;

// Stores a small integral value x as one element of dtype dt at p.
void encode(double x, DataType dt, uint8_t* p) {
  auto put = [p](auto v) { std::memcpy(p, &v, sizeof v); };
  switch (dt) {
    case DataType::kUInt8:
      put(static_cast<uint8_t>(x));
      break;
    case DataType::kInt8:
      put(static_cast<int8_t>(x));
      break;
    case DataType::kBool:
      put(static_cast<uint8_t>(x != 0));
      break;
    case DataType::kUInt16:
      put(static_cast<uint16_t>(x));
      break;
    case DataType::kInt16:
      put(static_cast<int16_t>(x));
      break;
    case DataType::kFloat16:
      put(kernels::floatToHalf(static_cast<float>(x)));
      break;
    case DataType::kBFloat16:
      put(kernels::floatToBfloat16(static_cast<float>(x)));
      break;
    case DataType::kInt32:
      put(static_cast<int32_t>(x));
      break;
    case DataType::kFloat32:
      put(static_cast<float>(x));
      break;
    case DataType::kInt64:
      put(static_cast<int64_t>(x));
      break;
    case DataType::kFloat64:
      put(x);
      break;
  }
}

}  // namespace

TEST_CASE("gloo: identity and capabilities") {
  if (!glooBuilt()) return;
  Group g = makeGroup(3);
  for (int r = 0; r < 3; ++r) {
    CHECK(std::string(g[r]->name()) == "gloo");
    CHECK(g[r]->rank() == r);
    CHECK(g[r]->size() == 3);
    CHECK(g[r]->globalRank(r) == r);
    CHECK(g[r]->capabilities().nativeAllreduce);
    CHECK(g[r]->capabilities().nativeAlltoallv);
    CHECK_FALSE(g[r]->capabilities().nativeReducescatter);
  }
  int x = 0;
  CHECK(g[0]->reducescatter(&x, &x, {1, 0, 0}, DataType::kInt32, ReduceOp::kSum).code() ==
        ErrorCode::kUnsupported);
  std::unique_ptr<PendingOps> p;
  CHECK(g[0]->post({sendOp(0, 1, &x, 4)}, &p).code() == ErrorCode::kInvalidArgument);
  CHECK(g[0]->post({sendOp(3, 1, &x, 4)}, &p).code() == ErrorCode::kInvalidArgument);
}

// Point-to-point is kolo's tcp transport (its contract: tcp_transport_test.cc); what is Gloo's
// own here is the link between the two meshes: either one's failure or abort ends the other.
TEST_CASE("gloo: point-to-point runs on the tcp mesh; a p2p failure ends the natives too") {
  if (!glooBuilt()) return;
  Group g = makeGroup(3);
  std::vector<std::vector<int>> got(3, std::vector<int>(2, -1));
  requireAllOk(onRanks(3, [&](int r) {
    const int next = (r + 1) % 3, prev = (r + 2) % 3;
    int a = r * 10, b = r * 10 + 1;
    return g[r]->exchange({sendOp(next, 7, &a, 4), sendOp(next, 7, &b, 4),
                           recvOp(prev, 7, &got[r][0], 4), recvOp(prev, 7, &got[r][1], 4)});
  }));
  for (int r = 0; r < 3; ++r)
    CHECK(got[r] == std::vector<int>{(r + 2) % 3 * 10, (r + 2) % 3 * 10 + 1});
  // A p2p batch abandoned after its timeout aborts the whole transport: its natives fail with
  // the same cause, and the peer whose connections closed names rank 0.
  int in = 0;
  std::unique_ptr<PendingOps> p;
  REQUIRE(g[0]->post({recvOp(1, 4, &in, sizeof in)}, &p).isOk());
  CHECK(p->wait(Clock::now() + 100ms).code() == ErrorCode::kTimeout);
  p.reset();
  int x = 0;
  Status native = g[0]->allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum);
  CHECK(native.code() == ErrorCode::kTimeout);
  CHECK_THAT(native.message(), Catch::Contains("receive from rank 1 (global 1)"));
  CHECK_THAT(native.message(), Catch::Contains("abandoned"));
  Status peer = g[1]->exchange({recvOp(0, 4, &in, sizeof in)});
  CHECK((peer.code() == ErrorCode::kPeerLost || peer.code() == ErrorCode::kTimeout));
  CHECK_THAT(peer.message(), Catch::Contains("rank 0 (global 0)"));
}

TEST_CASE("gloo: abort from another thread ends a p2p wait, and the natives fail with the cause") {
  if (!glooBuilt()) return;
  Group g = makeGroup(2);
  int in = 0;
  std::unique_ptr<PendingOps> p;
  REQUIRE(g[0]->post({recvOp(1, 5, &in, sizeof in)}, &p).isOk());
  const Status cause(ErrorCode::kAborted, "rank 3 lost its GPU");
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
  int x = 0;
  CHECK(g[0]->allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum).message() == cause.message());
}

TEST_CASE("gloo: a peer that goes away during a p2p wait is named, and the natives fail after") {
  if (!glooBuilt()) return;
  Group g = makeGroup(3, makeMemoryStore(), 20s);
  int in1 = 0, in2 = 0;
  std::unique_ptr<PendingOps> p;
  REQUIRE(g[0]->post({recvOp(1, 6, &in1, sizeof in1), recvOp(2, 6, &in2, sizeof in2)}, &p).isOk());
  std::thread leaver([&] {
    std::this_thread::sleep_for(100ms);
    g[2].reset();
  });
  auto start = Clock::now();
  Status s = p->wait(Clock::now() + 20s);
  leaver.join();
  CHECK(s.code() == ErrorCode::kPeerLost);
  CHECK_THAT(s.message(), Catch::Contains("rank 2 (global 2)"));
  CHECK(secondsSince(start) < 5.0);
  int x = 0;
  CHECK(g[0]->allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum).message() == s.message());
}

TEST_CASE("gloo: abort interrupts a native allreduce that a peer never joins") {
  if (!glooBuilt()) return;
  Group g = makeGroup(2);
  std::vector<float> data(1000, 1.0f);
  const Status cause(ErrorCode::kAborted, "shutting down");
  const auto abortAfter = 150ms;
  std::thread aborter([&] {
    std::this_thread::sleep_for(abortAfter);
    g[0]->abort(cause);
  });
  auto start = Clock::now();
  Status s = g[0]->allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
  aborter.join();
  CHECK(s.message() == cause.message());
  CHECK(secondsSince(start) < seconds(abortAfter) + kSlackSeconds);
}

TEST_CASE("gloo: a peer that goes away during a native allreduce is named by every survivor") {
  if (!glooBuilt()) return;
  // Gloo names the peer's address only; the survivors find the rank by asking Gloo which of
  // their connections failed (rank 0 may hear of it from rank 1's abort note).
  Group g = makeGroup(3, makeMemoryStore(), 20s);
  std::vector<float> a(64, 1.0f), b(64, 1.0f);
  std::vector<Status> s(2);
  auto start = Clock::now();
  std::thread r0(
      [&] { s[0] = g[0]->allreduce(a.data(), a.size(), DataType::kFloat32, ReduceOp::kSum); });
  std::thread r1(
      [&] { s[1] = g[1]->allreduce(b.data(), b.size(), DataType::kFloat32, ReduceOp::kSum); });
  std::this_thread::sleep_for(100ms);
  g[2].reset();
  r0.join();
  r1.join();
  for (const Status& x : s) {
    CHECK(x.code() == ErrorCode::kPeerLost);
    CHECK_THAT(x.message(), Catch::Contains("rank 2 (global 2)"));
  }
  CHECK(secondsSince(start) < 5.0);
}

TEST_CASE("gloo: native collectives over every dtype") {
  if (!glooBuilt()) return;
  constexpr int n = 3;
  Group g = makeGroup(n);
  const std::vector<DataType> dtypes = {DataType::kUInt8,   DataType::kInt8,     DataType::kUInt16,
                                        DataType::kInt16,   DataType::kInt32,    DataType::kInt64,
                                        DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                                        DataType::kFloat64, DataType::kBool};
  for (DataType dt : dtypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kProduct}) {
      const size_t count = 1001, elem = sizeOf(dt);
      // Inputs: small integers (exact in every dtype), bools as 0/1.
      std::vector<std::vector<uint8_t>> data(n, std::vector<uint8_t>(count * elem));
      std::vector<uint8_t> expect;
      for (int r = 0; r < n; ++r) {
        std::vector<double> v(count);
        for (size_t i = 0; i < count; ++i) {
          v[i] = dt == DataType::kBool ? static_cast<double>((i + r) % 2) : (i * 7 + r) % 3 + 1;
        }
        for (size_t i = 0; i < count; ++i) encode(v[i], dt, data[r].data() + i * elem);
        if (r == 0) {
          expect = data[0];
        } else {
          kernels::reduceInto(expect.data(), data[r].data(), count, dt, op);
        }
      }
      requireAllOk(
          onRanks(n, [&](int r) { return g[r]->allreduce(data[r].data(), count, dt, op); }));
      for (int r = 0; r < n; ++r) {
        INFO(toString(dt) << " " << toString(op) << " rank " << r);
        CHECK(data[r] == expect);  // small integers: exact in every dtype and order
      }
    }
  }
  int x = 0;
  float f = 0;
  CHECK(g[0]->allreduce(&f, 1, DataType::kFloat32, ReduceOp::kBitAnd).code() ==
        ErrorCode::kInvalidArgument);
  requireAllOk(
      onRanks(n, [&](int r) { return g[r]->allreduce(&x, 0, DataType::kInt32, ReduceOp::kSum); }));

  // allgatherv with unequal blocks (one empty), once with aliasing send.
  for (bool alias : {false, true}) {
    const std::vector<size_t> bytes = {5, 0, 70001};
    const size_t total = 5 + 70001;
    std::vector<std::vector<uint8_t>> out(n, std::vector<uint8_t>(total, 0));
    std::vector<uint8_t> expect(total);
    size_t off = 0;
    std::vector<size_t> offs;
    for (int r = 0; r < n; ++r) {
      offs.push_back(off);
      for (size_t i = 0; i < bytes[r]; ++i) expect[off + i] = static_cast<uint8_t>(r * 50 + i);
      off += bytes[r];
    }
    std::vector<std::vector<uint8_t>> in(n);
    for (int r = 0; r < n; ++r) {
      in[r].assign(expect.begin() + offs[r], expect.begin() + offs[r] + bytes[r]);
      // memcpy from an empty vector's null data() is UB even for 0 bytes (UBSan: nonnull).
      if (alias && bytes[r] > 0) std::memcpy(out[r].data() + offs[r], in[r].data(), bytes[r]);
    }
    requireAllOk(onRanks(n, [&](int r) {
      const void* send = alias ? out[r].data() + offs[r] : in[r].data();
      return g[r]->allgatherv(send, bytes[r], out[r].data(), bytes);
    }));
    for (int r = 0; r < n; ++r) CHECK(out[r] == expect);
  }

  // broadcast from every root.
  for (int root = 0; root < n; ++root) {
    std::vector<std::vector<uint8_t>> buf(n, std::vector<uint8_t>(100003, 0));
    for (size_t i = 0; i < buf[root].size(); ++i) buf[root][i] = static_cast<uint8_t>(i ^ root);
    const auto expect = buf[root];
    requireAllOk(
        onRanks(n, [&](int r) { return g[r]->broadcast(buf[r].data(), buf[r].size(), root); }));
    for (int r = 0; r < n; ++r) CHECK(buf[r] == expect);
  }

  // alltoallv: rank s sends (s + d) % 3 * 1000 + 1 bytes to rank d, valued s * 16 + d.
  auto len = [](int s, int d) { return static_cast<size_t>(((s + d) % 3) * 1000 + 1); };
  std::vector<std::vector<uint8_t>> send(n), recv(n);
  std::vector<std::vector<size_t>> sb(n), rb(n);
  for (int r = 0; r < n; ++r) {
    for (int d = 0; d < n; ++d) {
      sb[r].push_back(len(r, d));
      rb[r].push_back(len(d, r));
      send[r].insert(send[r].end(), len(r, d), static_cast<uint8_t>(r * 16 + d));
    }
    recv[r].assign(std::accumulate(rb[r].begin(), rb[r].end(), size_t{0}), 0xEE);
  }
  requireAllOk(onRanks(
      n, [&](int r) { return g[r]->alltoallv(send[r].data(), sb[r], recv[r].data(), rb[r]); }));
  for (int r = 0; r < n; ++r) {
    std::vector<uint8_t> expect;
    for (int s = 0; s < n; ++s)
      expect.insert(expect.end(), len(s, r), static_cast<uint8_t>(s * 16 + r));
    CHECK(recv[r] == expect);
  }
}

TEST_CASE("gloo: split gives members a connected sub-group and non-members nullptr") {
  if (!glooBuilt()) return;
  constexpr int n = 3;
  Group g = makeGroup(n);
  for (int round = 0; round < 2; ++round) {  // the same set id twice: keys must not collide
    Group sub(n);
    requireAllOk(onRanks(n, [&](int r) { return g[r]->split({0, 2}, 5, &sub[r]); }));
    REQUIRE(sub[0] != nullptr);
    REQUIRE(sub[2] != nullptr);
    CHECK(sub[1] == nullptr);
    CHECK(sub[0]->size() == 2);
    CHECK(sub[2]->rank() == 1);
    CHECK(sub[2]->globalRank(1) == 2);
    CHECK(sub[0]->timeout() == g[0]->timeout());
    std::vector<int64_t> v = {10, 1};
    std::vector<int64_t> w = {5, 2};
    std::vector<Status> s(2);
    std::thread a([&] { s[0] = sub[0]->allreduce(v.data(), 2, DataType::kInt64, ReduceOp::kSum); });
    std::thread b([&] { s[1] = sub[2]->allreduce(w.data(), 2, DataType::kInt64, ReduceOp::kSum); });
    a.join();
    b.join();
    requireAllOk(s);
    CHECK(v == std::vector<int64_t>{15, 3});
    CHECK(w == std::vector<int64_t>{15, 3});
  }
  std::unique_ptr<Transport> bad;
  CHECK(g[0]->split({2, 0}, 6, &bad).code() == ErrorCode::kInvalidArgument);
  // Aborting the parent aborts its children.
  Group sub(n);
  requireAllOk(onRanks(n, [&](int r) { return g[r]->split({0, 1, 2}, 7, &sub[r]); }));
  g[0]->abort(Status(ErrorCode::kAborted, "parent gone"));
  int x = 0;
  CHECK(sub[0]->allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum).message() == "parent gone");
}

TEST_CASE("gloo: creation errors and successive generations over one store") {
  if (!glooBuilt()) return;
  std::unique_ptr<Transport> t;
  auto store = makeMemoryStore();
  CHECK(createGloo(nullptr, 0, 1, "", 1s, &t).code() == ErrorCode::kInvalidArgument);
  CHECK(createGloo(store, 2, 2, "", 1s, &t).code() == ErrorCode::kInvalidArgument);
  CHECK(createGloo(store, 0, 1, "no-such-if0", 1s, &t).code() == ErrorCode::kInvalidArgument);
  // Rank 1 never arrives: rank 0 gives up after its timeout, naming what is missing.
  auto start = Clock::now();
  Status s = createGloo(makeMemoryStore(), 0, 2, "", 300ms, &t);
  CHECK(s.code() == ErrorCode::kTimeout);
  CHECK(secondsSince(start) < 3.0);
  // Two jobs one after the other over the same store: the second must not read stale keys.
  for (int job = 0; job < 2; ++job) {
    Group g = makeGroup(2, store);
    std::vector<int32_t> v = {job, 1};
    std::vector<int32_t> w = {job, 2};
    std::vector<Status> r(2);
    std::thread a([&] { r[0] = g[0]->allreduce(v.data(), 2, DataType::kInt32, ReduceOp::kSum); });
    std::thread b([&] { r[1] = g[1]->allreduce(w.data(), 2, DataType::kInt32, ReduceOp::kSum); });
    a.join();
    b.join();
    requireAllOk(r);
    CHECK(v == std::vector<int32_t>{2 * job, 3});
  }
}
