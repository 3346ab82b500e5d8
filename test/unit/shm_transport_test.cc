// SPDX-License-Identifier: Apache-2.0
// The shared-memory transport: thread ranks of this process (each maps the segment itself, as
// separate processes would), over a loopback base; and forked processes over Gloo for the
// dead/closed-peer cases. Point-to-point matching, streaming through small rings, timeouts,
// abort, cancellation, every native collective against an independent reference (test/mp's
// mp_data.h) at 1..5 ranks with tiny chunks (many chunks, every staging buffer), the ring
// algorithms over shm point-to-point, mismatch recovery, split, and the KOLO_SHM switch.
#include "transport/shm/shm_transport.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <thread>

#include "rendezvous/store.h"
#include "ops/collectives.h"
#include "test/mp/mp_data.h"
#include "transport/loopback/loopback_transport.h"
#include "bootstrap/registry.h"
#include "test/unit/loopback_ranks.h"

using namespace kolo;
using kolo::testing::onRanks;
using kolo::testing::requireAllOk;
using namespace kolo::mptest;
using namespace std::chrono_literals;

namespace {

using Group = std::vector<std::unique_ptr<Transport>>;

const std::vector<DataType> kDtypes = {DataType::kUInt8,   DataType::kInt8,     DataType::kUInt16,
                                       DataType::kInt16,   DataType::kInt32,    DataType::kInt64,
                                       DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                                       DataType::kFloat64, DataType::kBool};

std::vector<ReduceOp> reduceOps(DataType dt) {
  std::vector<ReduceOp> v = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};
  if (!isFloatingPoint(dt)) v.push_back(ReduceOp::kBitAnd);
  return v;
}


Group makeGroup(int n, ShmOptions options = {}, std::chrono::milliseconds timeout = 10s) {
  Group base, out(static_cast<size_t>(n));
  REQUIRE(createLoopbackGroup(n, &base).isOk());
  requireAllOk(onRanks(n, [&](int r) {
    base[r]->setTimeout(timeout);
    return createShmTransport(&base[r], options, &out[r]);
  }));
  return out;
}

Status fail(const std::string& what) { return Status(ErrorCode::kInternal, what); }

// Checks one rank's reduced elements against the reference; "" when right.
std::string checkReduced(DataType dt, ReduceOp op, int n, size_t count, uint64_t seed,
                         const uint8_t* got, size_t first = 0) {
  if (isFloatingPoint(dt)) {
    return compareReduced(dt, got, {}, referenceFloats(dt, op, n, count, seed, first), count,
                          first);
  }
  return compareReduced(dt, got, referenceInts(dt, op, n, count, seed, first), {}, count, first);
}

}  // namespace

TEST_CASE("shm: identity, capabilities and the control transport") {
  Group g = makeGroup(3);
  for (int r = 0; r < 3; ++r) {
    CHECK(std::string(g[r]->name()) == "shm");
    CHECK(g[r]->rank() == r);
    CHECK(g[r]->size() == 3);
    CHECK(g[r]->globalRank(r) == r);
    CHECK(g[r]->timeout() == 10s);
    const Capabilities c = g[r]->capabilities();
    CHECK(c.sharedMemory);
    CHECK(c.nativeAllreduce);
    CHECK(c.nativeBroadcast);
    CHECK(c.nativeAllgatherv);
    CHECK(c.nativeReducescatter);
    CHECK(c.nativeAllreduceSpans);
    CHECK_FALSE(c.deviceMemory);
    CHECK(std::string(controlTransport(*g[r]).name()) == "loopback");
  }
  ops::AlgorithmConfig cfg;
  CHECK(ops::plannedStep(*g[0], cfg, OpType::kAllreduce, 64 << 20) == "SHM_ALLREDUCE");
  CHECK(ops::plannedStep(*g[0], cfg, OpType::kAlltoall, 4096) == "P2P_ALLTOALL");
  // Every allreduce size is native here: the crossovers decide nothing (autotune skips them),
  // unless one of ours is forced, which reads them neither.
  CHECK_FALSE(ops::allreduceCrossoversUsed(*g[0], cfg));
  cfg.allreduce = ops::Algorithm::kRing;
  CHECK_FALSE(ops::allreduceCrossoversUsed(*g[0], cfg));
}

TEST_CASE("shm: point-to-point keeps FIFO per tag across out-of-order posts, streams, self") {
  ShmOptions small;
  small.ringBytes = 64 * 1024;  // the 1 MiB message wraps the ring many times
  Group g = makeGroup(2, small);
  const size_t bigBytes = (1 << 20) + 3;
  requireAllOk(onRanks(2, [&](int r) -> Status {
    Transport& t = *g[r];
    std::vector<uint8_t> big(bigBytes);
    uint32_t a1 = 0xA1, a2 = 0xA2, self = 0x5E1F, selfIn = 0;
    if (r == 0) {
      fillBytes(big.data(), big.size(), 0, 9);
      // Tag 5 first, then the big tag 6, then tag 5 again, an empty tag 7, and to itself.
      KOLO_RETURN_IF_ERROR(t.exchange({sendOp(1, 5, &a1, 4), sendOp(1, 6, big.data(), big.size()),
                                       sendOp(1, 5, &a2, 4), sendOp(1, 7, nullptr, 0),
                                       sendOp(0, 9, &self, 4), recvOp(0, 9, &selfIn, 4)}));
      return selfIn == 0x5E1F ? Status::ok() : fail("self message lost");
    }
    // Rank 1 asks for tag 6 and 7 first: the first tag-5 message must wait aside.
    KOLO_RETURN_IF_ERROR(
        t.exchange({recvOp(0, 6, big.data(), big.size()), recvOp(0, 7, nullptr, 0)}));
    uint32_t in1 = 0, in2 = 0;
    KOLO_RETURN_IF_ERROR(t.exchange({recvOp(0, 5, &in1, 4), recvOp(0, 5, &in2, 4)}));
    std::vector<uint8_t> expect(bigBytes);
    fillBytes(expect.data(), expect.size(), 0, 9);
    if (big != expect) return fail("the 1 MiB message arrived damaged");
    if (in1 != 0xA1 || in2 != 0xA2) return fail("tag 5 messages out of order");
    return Status::ok();
  }));
  // Self-messages, on rank 0 alone: received before and after being sent.
  uint32_t x = 11, y = 0, z = 22, w = 0;
  std::unique_ptr<PendingOps> pending;
  REQUIRE(g[0]->post({recvOp(0, 3, &y, 4)}, &pending).isOk());
  REQUIRE(g[0]->exchange({sendOp(0, 3, &x, 4), sendOp(0, 4, &z, 4)}).isOk());
  REQUIRE(pending->wait(Clock::now() + 1s).isOk());
  REQUIRE(g[0]->exchange({recvOp(0, 4, &w, 4)}).isOk());
  CHECK(y == 11);
  CHECK(w == 22);
}

TEST_CASE("shm: a receive of the wrong size fails with kMismatch; the stream stays in step") {
  Group g = makeGroup(2);
  auto results = onRanks(2, [&](int r) -> Status {
    Transport& t = *g[r];
    uint64_t sent[2] = {1, 2}, got[2] = {0, 0};
    uint32_t after = 77, afterIn = 0;
    if (r == 0) return t.exchange({sendOp(1, 1, sent, 16), sendOp(1, 2, &after, 4)});
    Status s = t.exchange({recvOp(0, 1, got, 8)});
    if (s.code() != ErrorCode::kMismatch) return fail("expected kMismatch, got " + s.toString());
    if (s.message().find("sent 16 bytes") == std::string::npos) return fail(s.message());
    KOLO_RETURN_IF_ERROR(t.exchange({recvOp(0, 2, &afterIn, 4)}));
    return afterIn == 77 ? Status::ok() : fail("the next message is wrong");
  });
  requireAllOk(results);
}

TEST_CASE("shm: a silent peer gives kTimeout naming it, promptly") {
  Group g = makeGroup(3);
  int in = 0;
  std::unique_ptr<PendingOps> p;
  REQUIRE(g[1]->post({recvOp(2, 31, &in, sizeof in)}, &p).isOk());
  const auto start = Clock::now();
  Status s = p->wait(Clock::now() + 200ms);
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  CHECK(s.code() == ErrorCode::kTimeout);
  CHECK_THAT(s.message(), Catch::Contains("rank 1 (global 1) waited"));
  CHECK_THAT(s.message(), Catch::Contains("1 recv(s) from rank 2 (global 2) (tag 31)"));
  CHECK(took >= 0.19);
  CHECK(took < 1.0);
  bool done = true;
  CHECK(p->test(&done).isOk());
  CHECK_FALSE(done);
}

TEST_CASE("shm: abort from another thread ends waits promptly on every rank") {
  Group g = makeGroup(2);
  const Status cause(ErrorCode::kAborted, "test abort");
  std::vector<Status> got(2);
  std::vector<double> took(2);
  std::thread aborter([&] {
    std::this_thread::sleep_for(100ms);
    g[0]->abort(cause);
  });
  onRanks(2, [&](int r) {
    int in = 0;
    const auto start = Clock::now();
    if (r == 0) {
      got[r] = g[r]->exchange({recvOp(1, 1, &in, 4)});
    } else {
      got[r] = g[r]->allreduce(&in, 1, DataType::kInt32, ReduceOp::kSum);  // rank 0 never joins
    }
    took[r] = std::chrono::duration<double>(Clock::now() - start).count();
    return Status::ok();
  });
  aborter.join();
  CHECK(got[0].code() == ErrorCode::kAborted);
  CHECK(got[0].message() == "test abort");
  CHECK(got[1].code() == ErrorCode::kAborted);
  CHECK_THAT(got[1].message(), Catch::Contains("rank 0 (global 0) aborted"));
  CHECK_THAT(got[1].message(), Catch::Contains("test abort"));
  CHECK(took[0] < 2.0);
  CHECK(took[1] < 2.0);
  int x = 0;
  std::unique_ptr<PendingOps> p;
  CHECK(g[0]->post({sendOp(1, 1, &x, 4)}, &p).code() == ErrorCode::kAborted);
  CHECK(g[1]->broadcast(&x, 4, 0).code() == ErrorCode::kAborted);
}

TEST_CASE("shm: cancelled receives leave the stream usable") {
  ShmOptions small;
  small.ringBytes = 16 * 1024;
  Group g = makeGroup(2, small);
  std::vector<uint8_t> big(256 * 1024, 0x42), bigIn(big.size());
  uint32_t x = 5, xIn = 0, y = 6, yIn = 0;
  // An unmatched receive withdrawn: the message goes to the next receive of its tag.
  {
    std::unique_ptr<PendingOps> p;
    REQUIRE(g[1]->post({recvOp(0, 3, &xIn, 4)}, &p).isOk());
  }
  REQUIRE(g[0]->exchange({sendOp(1, 3, &x, 4)}).isOk());
  REQUIRE(g[1]->exchange({recvOp(0, 3, &xIn, 4)}).isOk());
  CHECK(xIn == 5);
  // A receive abandoned half way: the rest of its message is discarded, the next one arrives.
  std::unique_ptr<PendingOps> sends;
  REQUIRE(g[0]->post({sendOp(1, 4, big.data(), big.size()), sendOp(1, 5, &y, 4)}, &sends).isOk());
  {
    std::unique_ptr<PendingOps> p;
    REQUIRE(g[1]->post({recvOp(0, 4, bigIn.data(), bigIn.size())}, &p).isOk());
    bool done = true;
    REQUIRE(p->test(&done).isOk());
    CHECK_FALSE(done);  // 16 KiB ring: most of the 256 KiB is still to come
  }
  requireAllOk(onRanks(2, [&](int r) {
    if (r == 0) return sends->wait(Clock::now() + 5s);
    return g[1]->exchange({recvOp(0, 5, &yIn, 4)});
  }));
  CHECK(yIn == 6);
}

TEST_CASE("shm: native allreduce, every dtype x op, many chunks, 1..5 ranks") {
  ShmOptions tiny;
  tiny.chunkBytes = 4096;  // 3-element to 4096-element chunks: every staging buffer, wrapping
  for (int n : {1, 2, 3, 5}) {
    Group g = makeGroup(n, tiny);
    uint64_t seed = 100 * n;
    for (DataType dt : kDtypes) {
      const size_t perChunk = 4096 / sizeOf(dt);
      for (ReduceOp op : reduceOps(dt)) {
        for (size_t count :
             {size_t{0}, size_t{1}, static_cast<size_t>(n + 1), perChunk, 3 * perChunk + 7}) {
          ++seed;
          std::vector<std::vector<uint8_t>> data(static_cast<size_t>(n));
          auto results = onRanks(n, [&](int r) -> Status {
            data[r] = reduceInput(dt, op, r, count, seed);
            KOLO_RETURN_IF_ERROR(g[r]->allreduce(data[r].data(), count, dt, op));
            std::string bad = checkReduced(dt, op, n, count, seed, data[r].data());
            return bad.empty() ? Status::ok() : fail(bad);
          });
          INFO(n << " ranks, " << toString(dt) << " " << toString(op) << " count " << count);
          requireAllOk(results);
          for (int r = 1; r < n; ++r) CHECK(data[r] == data[0]);  // the same bits everywhere
        }
      }
    }
  }
}

TEST_CASE("shm: allreduceSpans gives the packed allreduce's bits, in and out of place") {
  ShmOptions tiny;
  tiny.chunkBytes = 4096;  // pieces cross chunk and part boundaries
  for (int n : {1, 2, 3, 5}) {
    Group g = makeGroup(n, tiny);
    for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
      const size_t perChunk = 4096 / sizeOf(dt);
      // One-shot sizes (all small) and chunked sizes (zero-length spans in the middle too).
      for (std::vector<size_t> counts : {std::vector<size_t>{1, 0, 5, 2},
                                         std::vector<size_t>{perChunk / 3, 0, perChunk + 5, 1,
                                                             2 * perChunk + 11, 0, 7}}) {
        const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
        const uint64_t seed = 1000 * n + total;
        std::vector<std::vector<uint8_t>> packed(static_cast<size_t>(n)), spread(packed);
        auto results = onRanks(n, [&](int r) -> Status {
          const size_t elem = sizeOf(dt);
          packed[r] = reduceInput(dt, ReduceOp::kSum, r, total, seed);
          const std::vector<uint8_t> input = packed[r];
          KOLO_RETURN_IF_ERROR(g[r]->allreduce(packed[r].data(), total, dt, ReduceOp::kSum));
          // Each span its own allocation; odd spans out of place (their inputs must survive).
          std::vector<std::vector<uint8_t>> ins, outs;
          std::vector<ReduceSpan> spans;
          size_t off = 0;
          for (size_t i = 0; i < counts.size(); ++i) {
            ins.emplace_back(input.begin() + off * elem, input.begin() + (off + counts[i]) * elem);
            outs.emplace_back(counts[i] * elem, 0xEE);
            off += counts[i];
          }
          for (size_t i = 0; i < counts.size(); ++i) {
            void* out = i % 2 == 1 ? outs[i].data() : ins[i].data();
            spans.push_back(ReduceSpan{ins[i].data(), out, counts[i]});
          }
          KOLO_RETURN_IF_ERROR(g[r]->allreduceSpans(spans, dt, ReduceOp::kSum));
          off = 0;
          for (size_t i = 0; i < counts.size(); ++i) {
            const auto& got = i % 2 == 1 ? outs[i] : ins[i];
            spread[r].insert(spread[r].end(), got.begin(), got.end());
            if (i % 2 == 1 && !std::equal(ins[i].begin(), ins[i].end(), input.begin() + off * elem)) {
              return fail("an out-of-place span's input was written");
            }
            off += counts[i];
          }
          return Status::ok();
        });
        INFO(n << " ranks, " << toString(dt) << ", " << counts.size() << " spans, " << total);
        requireAllOk(results);
        for (int r = 0; r < n; ++r) CHECK(spread[r] == packed[r]);
      }
    }
  }
}

TEST_CASE("shm: native allreduce of 24 MiB with the default chunk, in place, 4 ranks") {
  Group g = makeGroup(4);
  const size_t count = (24u << 20) / 4;
  auto results = onRanks(4, [&](int r) -> Status {
    std::vector<uint8_t> data = reduceInput(DataType::kFloat32, ReduceOp::kSum, r, count, 7);
    for (int rep = 0; rep < 2; ++rep) {
      if (rep == 1) data = reduceInput(DataType::kFloat32, ReduceOp::kSum, r, count, 7);
      KOLO_RETURN_IF_ERROR(g[r]->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum));
    }
    std::string bad = checkReduced(DataType::kFloat32, ReduceOp::kSum, 4, count, 7, data.data());
    return bad.empty() ? Status::ok() : fail(bad);
  });
  requireAllOk(results);
}

TEST_CASE("shm: native broadcast, allgatherv and reducescatter") {
  ShmOptions tiny;
  tiny.chunkBytes = 4096;
  for (int n : {1, 2, 3, 4}) {
    Group g = makeGroup(n, tiny);
    INFO(n << " ranks");
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, size_t{70001}}) {
      for (int root = 0; root < n; ++root) {
        requireAllOk(onRanks(n, [&](int r) -> Status {
          std::vector<uint8_t> expect(bytes), buf(bytes, 0xEE);
          fillBytes(expect.data(), bytes, root, bytes + root);
          if (r == root) buf = expect;
          KOLO_RETURN_IF_ERROR(g[r]->broadcast(buf.data(), bytes, root));
          return buf == expect ? Status::ok() : fail("broadcast result differs");
        }));
      }
      for (bool alias : {false, true}) {
        std::vector<size_t> blocks(static_cast<size_t>(n));
        for (int q = 0; q < n; ++q) blocks[q] = q % 2 == 1 ? 0 : bytes + 13 * q;
        const size_t total = std::accumulate(blocks.begin(), blocks.end(), size_t{0});
        requireAllOk(onRanks(n, [&](int r) -> Status {
          std::vector<uint8_t> expect(total), out(total, 0xA5);
          size_t off = 0, mine = 0;
          for (int q = 0; q < n; ++q) {
            if (q == r) mine = off;
            fillBytes(expect.data() + off, blocks[q], q, 5 + bytes);
            off += blocks[q];
          }
          std::vector<uint8_t> in(expect.begin() + mine, expect.begin() + mine + blocks[r]);
          const void* send = in.data();
          if (alias) {
            std::copy(in.begin(), in.end(), out.begin() + mine);
            send = out.data() + mine;
          }
          KOLO_RETURN_IF_ERROR(g[r]->allgatherv(send, blocks[r], out.data(), blocks));
          return out == expect ? Status::ok() : fail("allgatherv result differs");
        }));
      }
    }
    for (DataType dt : {DataType::kFloat32, DataType::kInt64, DataType::kBFloat16}) {
      for (size_t total : {size_t{0}, size_t{5}, size_t{3000}}) {
        const std::vector<size_t> counts = ops::evenSplit(total, n);
        requireAllOk(onRanks(n, [&](int r) -> Status {
          std::vector<uint8_t> in = reduceInput(dt, ReduceOp::kMax, r, total, 9 + total);
          size_t begin = 0;
          for (int q = 0; q < r; ++q) begin += counts[q];
          std::vector<uint8_t> out(counts[r] * sizeOf(dt) + 1, 0xEE);
          KOLO_RETURN_IF_ERROR(
              g[r]->reducescatter(in.data(), out.data(), counts, dt, ReduceOp::kMax));
          std::string bad =
              checkReduced(dt, ReduceOp::kMax, n, counts[r], 9 + total, out.data(), begin);
          if (out.back() != 0xEE) bad += " wrote past its block";
          return bad.empty() ? Status::ok() : fail(bad);
        }));
      }
    }
  }
}

TEST_CASE("shm: the ring algorithms over shm point-to-point") {
  const int n = 3;
  Group g = makeGroup(n);
  const size_t count = 300001;
  requireAllOk(onRanks(n, [&](int r) -> Status {
    Transport& t = *g[r];
    std::vector<uint8_t> data = reduceInput(DataType::kInt32, ReduceOp::kSum, r, count, 3);
    KOLO_RETURN_IF_ERROR(
        ops::ringAllreduce(t, data.data(), count, DataType::kInt32, ReduceOp::kSum, 64 * 1024));
    std::string bad = checkReduced(DataType::kInt32, ReduceOp::kSum, n, count, 3, data.data());
    if (!bad.empty()) return fail("ring allreduce: " + bad);
    std::vector<uint8_t> bcast(100000), expect(100000);
    fillBytes(expect.data(), expect.size(), 1, 4);
    if (r == 1) bcast = expect;
    KOLO_RETURN_IF_ERROR(ops::p2pBroadcast(t, bcast.data(), bcast.size(), 1, 16 * 1024));
    if (bcast != expect) return fail("p2p broadcast differs");
    // Alltoallv: rank s sends (s + d + 1) * 1000 bytes to rank d.
    std::vector<size_t> sendBytes(n), recvBytes(n);
    std::vector<uint8_t> send, want;
    for (int d = 0; d < n; ++d) {
      sendBytes[d] = static_cast<size_t>(r + d + 1) * 1000;
      std::vector<uint8_t> block(sendBytes[d]);
      fillBytes(block.data(), block.size(), r, 50 + d);
      send.insert(send.end(), block.begin(), block.end());
    }
    for (int s = 0; s < n; ++s) {
      recvBytes[s] = static_cast<size_t>(s + r + 1) * 1000;
      std::vector<uint8_t> block(recvBytes[s]);
      fillBytes(block.data(), block.size(), s, 50 + r);
      want.insert(want.end(), block.begin(), block.end());
    }
    std::vector<uint8_t> got(want.size());
    KOLO_RETURN_IF_ERROR(ops::p2pAlltoallv(t, send.data(), sendBytes, got.data(), recvBytes));
    return got == want ? Status::ok() : fail("p2p alltoallv differs");
  }));
}

TEST_CASE("shm: disagreeing calls fail with kMismatch on every rank; the group recovers") {
  Group g = makeGroup(3);
  auto results = onRanks(3, [&](int r) -> Status {
    std::vector<float> v(100 + (r == 2 ? 1 : 0), 1.0f);
    Status s = g[r]->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    if (s.code() != ErrorCode::kMismatch) return fail("expected kMismatch, got " + s.toString());
    if (s.message().find("101 x float32") == std::string::npos) return fail(s.message());
    int64_t x = r;
    KOLO_RETURN_IF_ERROR(g[r]->allreduce(&x, 1, DataType::kInt64, ReduceOp::kSum));
    return x == 3 ? Status::ok() : fail("allreduce after the mismatch: " + std::to_string(x));
  });
  requireAllOk(results);
}

TEST_CASE("shm: split into the even ranks; aborting the parent aborts the child") {
  Group g = makeGroup(4);
  Group subs(4);
  requireAllOk(onRanks(4, [&](int r) { return g[r]->split({0, 2}, 7, &subs[r]); }));
  CHECK(subs[1] == nullptr);
  CHECK(subs[3] == nullptr);
  REQUIRE(subs[0] != nullptr);
  REQUIRE(subs[2] != nullptr);
  CHECK(std::string(subs[2]->name()) == "shm");
  CHECK(subs[2]->rank() == 1);
  CHECK(subs[2]->globalRank(1) == 2);
  std::vector<int64_t> v = {10, 30};
  requireAllOk(onRanks(2, [&](int i) {
    return subs[2 * i]->allreduce(&v[i], 1, DataType::kInt64, ReduceOp::kMax);
  }));
  CHECK(v[0] == 30);
  CHECK(v[1] == 30);
  g[0]->abort(Status(ErrorCode::kPeerLost, "parent gone"));
  int64_t x = 0;
  Status s = subs[0]->allreduce(&x, 1, DataType::kInt64, ReduceOp::kSum);
  CHECK(s.code() == ErrorCode::kPeerLost);
  CHECK(s.message() == "parent gone");
}

TEST_CASE("shm: KOLO_SHM off / auto / on over a base transport") {
  auto wrapped = [](ShmMode mode, int n, int localSize) {
    Group base;
    REQUIRE(createLoopbackGroup(n, &base).isOk());
    Config cfg;
    cfg.shm = mode;
    cfg.localSize = localSize;
    requireAllOk(onRanks(n, [&](int r) { return applyShmConfig(cfg, &base[r]); }));
    return std::string(base[0]->name());
  };
  CHECK(wrapped(ShmMode::kOff, 2, -1) == "loopback");
  CHECK(wrapped(ShmMode::kAuto, 1, -1) == "loopback");
  CHECK(wrapped(ShmMode::kAuto, 4, 2) == "loopback");  // spans two hosts
  CHECK(wrapped(ShmMode::kAuto, 2, -1) == "shm");
  CHECK(wrapped(ShmMode::kAuto, 3, 3) == "shm");
  CHECK(wrapped(ShmMode::kOn, 1, -1) == "shm");
  Config cfg;
  REQUIRE(Config::fromEnvironment(&cfg, [](const char* name) -> const char* {
            return std::string(name) == "KOLO_SHM" ? "off" : nullptr;
          }).isOk());
  CHECK(cfg.shm == ShmMode::kOff);
  Status bad = Config::fromEnvironment(&cfg, [](const char* name) -> const char* {
    return std::string(name) == "KOLO_SHM" ? "maybe" : nullptr;
  });
  CHECK(bad.code() == ErrorCode::kInvalidArgument);
}

namespace {

// Two processes over Gloo + a file store, with KOLO_SHM=on through the registry. The child
// (rank 1) does one allreduce, then either gets killed or destroys its transport.
enum class Fate { kKilled, kClosed };

std::unique_ptr<Transport> connect(const std::string& dir, int rank) {
  Config cfg;
  cfg.transport = TransportKind::kGloo;
  cfg.rank = rank;
  cfg.size = 2;
  cfg.localRank = rank;
  cfg.localSize = 2;
  cfg.shm = ShmMode::kOn;
  cfg.timeoutSeconds = 20;
  cfg.startTimeoutSeconds = 20;
  std::shared_ptr<Store> store;
  std::unique_ptr<Transport> t;
  if (makeFileStore(dir, &store).isOk() && createTransport(cfg, store, rank, 2, &t).isOk()) {
    return t;
  }
  return nullptr;
}

void peerFate(Fate fate) {
  char tmpl[] = "/tmp/kolo-shm-test-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto t = connect(dir, 1);
    int32_t one = 1;
    if (t == nullptr || !t->allreduce(&one, 1, DataType::kInt32, ReduceOp::kSum).isOk()) _exit(3);
    if (fate == Fate::kClosed) t.reset();
    for (;;) pause();
  }
  auto t = connect(dir, 0);
  REQUIRE(t != nullptr);
  CHECK(std::string(t->name()) == "shm");
  CHECK(std::string(controlTransport(*t).name()) == "gloo");
  int32_t one = 1;
  REQUIRE(t->allreduce(&one, 1, DataType::kInt32, ReduceOp::kSum).isOk());
  CHECK(one == 2);
  if (fate == Fate::kKilled) kill(child, SIGKILL);
  int in = 0;
  const auto start = Clock::now();
  Status s = t->exchange({recvOp(1, 1, &in, 4)});
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  CHECK(s.code() == ErrorCode::kPeerLost);
  CHECK_THAT(s.message(), Catch::Contains("rank 1 (global 1)"));
  CHECK_THAT(s.message(), Catch::Contains(fate == Fate::kKilled ? "died" : "closed"));
  CHECK(took < 2.0);
  Status c = t->allreduce(&one, 1, DataType::kInt32, ReduceOp::kSum);
  CHECK(c.code() == ErrorCode::kPeerLost);
  if (fate == Fate::kClosed) kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));
  t.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace

TEST_CASE("shm: a peer process that dies is named within a fraction of a second (fork)") {
  if (!transportBuilt(TransportKind::kGloo)) return;
  peerFate(Fate::kKilled);
}

TEST_CASE("shm: a peer process that destroys its transport is reported as closed (fork)") {
  if (!transportBuilt(TransportKind::kGloo)) return;
  peerFate(Fate::kClosed);
}
