// The Gloo transport with thread ranks over an in-memory store: rendezvous, FIFO per tag, a
// non-blocking test(), timeouts and lost peers that name the rank, abort from another thread
// (also inside a native collective), native collectives, split and creation errors.
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

#include "kernels/reduce_cpu.h"
#include "bootstrap/registry.h"

using namespace kolo;
using namespace std::chrono_literals;

namespace {

using Group = std::vector<std::unique_ptr<Transport>>;

// Runs fn(rank) on one thread per rank and returns the per-rank results.
std::vector<Status> onRanks(int n, const std::function<Status(int)>& fn) {
  std::vector<Status> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { results[r] = fn(r); });
  for (auto& t : threads) t.join();
  return results;
}

void requireAllOk(const std::vector<Status>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    INFO("rank " << r << ": " << results[r].toString());
    REQUIRE(results[r].isOk());
  }
}

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
      put(ops::floatToHalf(static_cast<float>(x)));
      break;
    case DataType::kBFloat16:
      put(ops::floatToBfloat16(static_cast<float>(x)));
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

TEST_CASE("gloo: ring exchange keeps FIFO order per tag, tags are independent") {
  if (!glooBuilt()) return;
  constexpr int n = 3, kMsgs = 20;
  Group g = makeGroup(n);
  std::vector<std::vector<int>> got(n, std::vector<int>(kMsgs + 1, -1));
  std::vector<std::vector<uint8_t>> big(n, std::vector<uint8_t>(3 << 20));
  std::vector<std::vector<uint8_t>> bigIn(n, std::vector<uint8_t>(3 << 20));
  requireAllOk(onRanks(n, [&](int r) {
    Transport& t = *g[r];
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<int> out(kMsgs + 1);
    for (int i = 0; i < kMsgs; ++i) out[i] = r * 1000 + i;
    out[kMsgs] = -7 - r;
    for (size_t i = 0; i < big[r].size(); ++i) big[r][i] = static_cast<uint8_t>(i * 31 + r);
    std::vector<P2POp> ops;
    // Receives first for tag 9, sends first for tag 7: matching must not care.
    ops.push_back(recvOp(prev, 9, &got[r][kMsgs], sizeof(int)));
    for (int i = 0; i < kMsgs; ++i) ops.push_back(sendOp(next, 7, &out[i], sizeof(int)));
    for (int i = 0; i < kMsgs; ++i) ops.push_back(recvOp(prev, 7, &got[r][i], sizeof(int)));
    ops.push_back(sendOp(next, 9, &out[kMsgs], sizeof(int)));
    ops.push_back(sendOp(next, 11, nullptr, 0));  // empty messages travel too
    ops.push_back(recvOp(prev, 11, nullptr, 0));
    ops.push_back(sendOp(next, 12, big[r].data(), big[r].size()));
    ops.push_back(recvOp(prev, 12, bigIn[r].data(), bigIn[r].size()));
    return t.exchange(ops);
  }));
  for (int r = 0; r < n; ++r) {
    const int prev = (r + n - 1) % n;
    for (int i = 0; i < kMsgs; ++i) CHECK(got[r][i] == prev * 1000 + i);
    CHECK(got[r][kMsgs] == -7 - prev);
    CHECK(bigIn[r] == big[prev]);
  }
}

TEST_CASE("gloo: test() does not block and completes once the peer sends") {
  if (!glooBuilt()) return;
  Group g = makeGroup(2);
  int in = 0, out = 1234;
  std::unique_ptr<PendingOps> recv;
  REQUIRE(g[1]->post({recvOp(0, 3, &in, sizeof in)}, &recv).isOk());
  bool done = true;
  auto start = Clock::now();
  REQUIRE(recv->test(&done).isOk());
  CHECK_FALSE(done);
  CHECK(secondsSince(start) < 0.1);
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

TEST_CASE("gloo: a silent peer gives kTimeout naming it, and the abandoned batch aborts") {
  if (!glooBuilt()) return;
  Group g = makeGroup(2);
  int in = 0;
  std::unique_ptr<PendingOps> p;
  REQUIRE(g[0]->post({recvOp(1, 4, &in, sizeof in)}, &p).isOk());
  auto start = Clock::now();
  Status s = p->wait(Clock::now() + 200ms);
  CHECK(s.code() == ErrorCode::kTimeout);
  CHECK_THAT(s.message(), Catch::Contains("receive from rank 1 (global 1)"));
  CHECK(secondsSince(start) < 1.0);
  p.reset();  // abandoned: Gloo cannot withdraw the receive
  Status after = g[0]->post({recvOp(1, 4, &in, sizeof in)}, &p);
  CHECK(after.code() == ErrorCode::kTimeout);  // the cause recorded is the timeout itself
  CHECK_THAT(after.message(), Catch::Contains("receive from rank 1 (global 1)"));
  CHECK_THAT(after.message(), Catch::Contains("abandoned"));
  // The peer notices at once: its connection to rank 0 was closed. Rank 0 left its cause as an
  // abort note, so rank 1 reports that cause (the timeout), relayed by rank 0.
  std::unique_ptr<PendingOps> q;
  auto noticed = Clock::now();
  Status peer = g[1]->post({recvOp(0, 4, &in, sizeof in)}, &q);
  if (peer.isOk()) peer = q->wait(Clock::now() + 5s);
  CHECK(secondsSince(noticed) < 2.0);
  CHECK((peer.code() == ErrorCode::kPeerLost || peer.code() == ErrorCode::kTimeout));
  CHECK_THAT(peer.message(), Catch::Contains("rank 0 (global 0)"));
}

TEST_CASE("gloo: abort from another thread ends a wait promptly with the cause") {
  if (!glooBuilt()) return;
  Group g = makeGroup(2);
  int in = 0;
  std::unique_ptr<PendingOps> p;
  REQUIRE(g[0]->post({recvOp(1, 5, &in, sizeof in)}, &p).isOk());
  const Status cause(ErrorCode::kAborted, "rank 3 lost its GPU");
  std::thread aborter([&] {
    std::this_thread::sleep_for(100ms);
    g[0]->abort(cause);
  });
  auto start = Clock::now();
  Status s = p->wait(Clock::now() + 10s);
  aborter.join();
  CHECK(s.code() == ErrorCode::kAborted);
  CHECK(s.message() == cause.message());
  CHECK(secondsSince(start) < 2.0);
  int x = 0;
  CHECK(g[0]->allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum).message() == cause.message());
}

TEST_CASE("gloo: abort interrupts a native allreduce that a peer never joins") {
  if (!glooBuilt()) return;
  Group g = makeGroup(2);
  std::vector<float> data(1000, 1.0f);
  const Status cause(ErrorCode::kAborted, "shutting down");
  std::thread aborter([&] {
    std::this_thread::sleep_for(150ms);
    g[0]->abort(cause);
  });
  auto start = Clock::now();
  Status s = g[0]->allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
  aborter.join();
  CHECK(s.message() == cause.message());
  CHECK(secondsSince(start) < 2.0);
}

TEST_CASE("gloo: a peer that goes away gives kPeerLost naming it, well before the timeout") {
  if (!glooBuilt()) return;
  Group g = makeGroup(3, makeMemoryStore(), 20s);
  int in = 0;
  std::unique_ptr<PendingOps> p;
  REQUIRE(g[0]->post({recvOp(2, 6, &in, sizeof in), recvOp(1, 6, &in, sizeof in)}, &p).isOk());
  std::thread leaver([&] {
    std::this_thread::sleep_for(100ms);
    g[2].reset();  // closes its connections, as a dying process would
  });
  auto start = Clock::now();
  Status s = p->wait(Clock::now() + 20s);
  leaver.join();
  CHECK(s.code() == ErrorCode::kPeerLost);
  CHECK_THAT(s.message(), Catch::Contains("rank 2 (global 2)"));
  CHECK(secondsSince(start) < 5.0);
}

TEST_CASE("gloo: a peer lost behind a silent one is noticed while the batch waits") {
  if (!glooBuilt()) return;
  // The batch waits for the silent rank 1 first: Gloo tells only the waits on rank 2's buffers
  // that rank 2 went away, so the batch must move on to them (its slices), not wait 20 s.
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

TEST_CASE("gloo: a wait that reaches its deadline leaves the batch and the connections usable") {
  if (!glooBuilt()) return;
  // kolo's deadline interrupts Gloo's wait (Gloo's own timeout would close every connection).
  Group g = makeGroup(2);
  int in = 0, out = 4321;
  std::unique_ptr<PendingOps> recv;
  REQUIRE(g[1]->post({recvOp(0, 8, &in, sizeof in)}, &recv).isOk());
  auto start = Clock::now();
  CHECK(recv->wait(Clock::now() + 100ms).code() == ErrorCode::kTimeout);
  CHECK(secondsSince(start) < 1.0);
  std::unique_ptr<PendingOps> send;
  REQUIRE(g[0]->post({sendOp(1, 8, &out, sizeof out)}, &send).isOk());
  CHECK(recv->wait(Clock::now() + 5s).isOk());
  CHECK(send->wait(Clock::now() + 5s).isOk());
  CHECK(in == 4321);
  std::vector<int32_t> v = {1, 2}, w = {3, 4};
  requireAllOk(onRanks(2, [&](int r) {
    return g[r]->allreduce(r == 0 ? v.data() : w.data(), 2, DataType::kInt32, ReduceOp::kSum);
  }));
  CHECK(v == std::vector<int32_t>{4, 6});
  // A batch that completed meanwhile is done even for a deadline already past.
  REQUIRE(g[1]->post({recvOp(0, 9, &in, sizeof in)}, &recv).isOk());
  out = 99;
  REQUIRE(g[0]->post({sendOp(1, 9, &out, sizeof out)}, &send).isOk());
  std::this_thread::sleep_for(200ms);
  CHECK(recv->wait(Clock::now() - 1ms).isOk());
  CHECK(in == 99);
  CHECK(send->wait(Clock::now() + 5s).isOk());
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
          ops::reduceInto(expect.data(), data[r].data(), count, dt, op);
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
