// SPDX-License-Identifier: Apache-2.0
// The broadcast shapes (ops/broadcast.cc) and their choice: scatter-allgather (binomial scatter of
// real-rank-order blocks, then Bruck allgatherv in place) bitwise on every rank, n = 1..9, several
// roots, sizes from 0 through fewer bytes than ranks to ~1 MiB; p2pBroadcast's and
// controlBroadcast's rule at the same sizes; the auto selection's names; a silent or lost peer
// named; and the coordinator's control round over a response list past 64 KiB at 4 ranks.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/runtime.h"
#include "ops/collectives.h"
#include "test/support/runtime_over.h"
#include "test/unit/loopback_ranks.h"
#include "transport/loopback/loopback_transport.h"

using namespace kolo;
using namespace std::chrono_literals;

namespace {

using kolo::testing::requireAllOk;
using kolo::testing::runRanks;

using Bytes = std::vector<uint8_t>;

Bytes message(size_t bytes, uint32_t seed) {
  Bytes b(bytes);
  std::mt19937 rng(seed);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

std::set<int> rootsFor(int n) { return {0, 1 % n, n / 2, n - 1}; }

std::vector<size_t> sizesFor(int n) {
  const size_t k64 = 64 * 1024;
  return {0, 1, static_cast<size_t>(n - 1), k64 - 1, k64, k64 + 3, (size_t{1} << 20) + 7};
}

enum class Shape { kScatterAllgather, kControl, kP2p };
const char* shapeName(Shape s) {
  return s == Shape::kScatterAllgather ? "scatter-allgather"
         : s == Shape::kControl        ? "control"
                                       : "p2p";
}

// One broadcast of `want` from root on n ranks; every rank must end bitwise equal to it.
void checkBroadcast(Shape shape, int n, int root, const Bytes& want) {
  const size_t bytes = want.size();
  std::vector<Bytes> bufs(static_cast<size_t>(n), Bytes(bytes, 0xAB));
  bufs[root] = want;
  requireAllOk(runRanks(n, [&](Transport& t, int r) {
    switch (shape) {
      case Shape::kScatterAllgather:
        return ops::scatterAllgatherBroadcast(t, bufs[r].data(), bytes, root);
      case Shape::kControl:
        return ops::controlBroadcast(t, bufs[r].data(), bytes, root);
      default:
        return ops::p2pBroadcast(t, bufs[r].data(), bytes, root, 256 * 1024);
    }
  }));
  for (int r = 0; r < n; ++r) {
    INFO(shapeName(shape) << " ranks=" << n << " bytes=" << bytes << " root=" << root
                          << " rank=" << r);
    REQUIRE(bufs[r] == want);
  }
}

}  // namespace

TEST_CASE("scatter-allgather broadcast: every rank count, several roots and sizes, bitwise") {
  for (int n = 1; n <= 9; ++n) {
    for (size_t bytes : sizesFor(n)) {
      for (int root : rootsFor(n)) {
        checkBroadcast(Shape::kScatterAllgather, n, root,
                       message(bytes, static_cast<uint32_t>(n * 1000 + root)));
      }
    }
  }
}

TEST_CASE("control and p2p broadcast: every rank count, several roots and sizes, bitwise") {
  for (int n = 1; n <= 9; ++n) {
    for (size_t bytes : sizesFor(n)) {
      const int root = n / 2;
      const Bytes want = message(bytes, static_cast<uint32_t>(n * 7 + 1));
      checkBroadcast(Shape::kControl, n, root, want);
      checkBroadcast(Shape::kP2p, n, root, want);
    }
  }
}

TEST_CASE("broadcast shape rule: tree < 64 KiB, scatter-allgather from 8 ranks below n segments") {
  using ops::BroadcastShape;
  const size_t seg = 256 * 1024;
  for (int n : {1, 2, 3, 4, 8, 1024}) {
    CHECK(ops::p2pBroadcastShape(n, 0, seg) == BroadcastShape::kTree);
    CHECK(ops::p2pBroadcastShape(n, 64 * 1024 - 1, seg) == BroadcastShape::kTree);
  }
  // Up to 7 ranks: the chain from 64 KiB, whatever the size or segment.
  for (int n : {2, 3, 4, 7}) {
    CHECK(ops::p2pBroadcastShape(n, 64 * 1024, seg) == BroadcastShape::kChain);
    CHECK(ops::p2pBroadcastShape(n, 64 * 1024, 0) == BroadcastShape::kChain);
  }
  // From 8 ranks: scatter-allgather while a rank's block is below a segment (bytes < n * seg).
  CHECK(ops::p2pBroadcastShape(8, 64 * 1024, seg) == BroadcastShape::kScatterAllgather);
  CHECK(ops::p2pBroadcastShape(8, 8 * seg - 1, seg) == BroadcastShape::kScatterAllgather);
  CHECK(ops::p2pBroadcastShape(8, 8 * seg, seg) == BroadcastShape::kChain);
  CHECK(ops::p2pBroadcastShape(8, size_t{64} << 20, seg) == BroadcastShape::kChain);
  CHECK(ops::p2pBroadcastShape(1024, size_t{255} << 20, seg) == BroadcastShape::kScatterAllgather);
  // An unsegmented chain (segment 0) is n - 1 whole-message hops: scatter-allgather at any size.
  CHECK(ops::p2pBroadcastShape(9, size_t{1} << 30, 0) == BroadcastShape::kScatterAllgather);
}

TEST_CASE("broadcast selection: auto names scatter-allgather, a named ring stays the chain") {
  std::vector<std::unique_ptr<Transport>> ts;
  REQUIRE(createLoopbackGroup(8, &ts).isOk());
  Transport& t8 = *ts[0];
  ops::AlgorithmConfig cfg;  // auto, 256 KiB segments
  auto planned = [&](size_t bytes) { return ops::plannedStep(t8, cfg, OpType::kBroadcast, bytes); };
  CHECK(planned(4) == "TREE_BROADCAST");
  CHECK(planned(64 * 1024) == "SCATTER_ALLGATHER_BROADCAST");
  CHECK(planned((2 << 20) - 1) == "SCATTER_ALLGATHER_BROADCAST");
  CHECK(planned(2 << 20) == "PIPELINED_BROADCAST");
  CHECK(ops::selectAlgorithm(t8, cfg, OpType::kBroadcast, 1 << 20) == ops::Algorithm::kRing);
  cfg.broadcast = ops::Algorithm::kNative;  // loopback has none: ours by size, as auto
  CHECK(planned(1 << 20) == "SCATTER_ALLGATHER_BROADCAST");
  cfg.broadcast = ops::Algorithm::kRing;
  CHECK(planned(64 * 1024) == "PIPELINED_BROADCAST");
  CHECK(planned(1 << 20) == "PIPELINED_BROADCAST");
  cfg.broadcast = ops::Algorithm::kTree;
  CHECK(planned(1 << 20) == "TREE_BROADCAST");

  // Up to 7 ranks auto keeps the chain.
  std::vector<std::unique_ptr<Transport>> ts7;
  REQUIRE(createLoopbackGroup(7, &ts7).isOk());
  CHECK(ops::plannedStep(*ts7[0], ops::AlgorithmConfig(), OpType::kBroadcast, 1 << 20) ==
        "PIPELINED_BROADCAST");

  // The entry point runs what it names, for each setting, at 9 ranks (a non-power of two).
  const int n = 9;
  const size_t bytes = 300001;  // < 9 * 256 KiB
  const Bytes want = message(bytes, 77);
  for (ops::Algorithm a : {ops::Algorithm::kAuto, ops::Algorithm::kRing, ops::Algorithm::kTree}) {
    ops::AlgorithmConfig c;
    c.broadcast = a;
    std::vector<Bytes> bufs(static_cast<size_t>(n), Bytes(bytes, 0));
    std::vector<std::string> names(static_cast<size_t>(n));
    bufs[6] = want;
    requireAllOk(runRanks(n, [&](Transport& t, int r) {
      return ops::broadcast(t, c, bufs[r].data(), bytes, 6, &names[r]);
    }));
    const char* expect = a == ops::Algorithm::kAuto   ? "SCATTER_ALLGATHER_BROADCAST"
                         : a == ops::Algorithm::kRing ? "PIPELINED_BROADCAST"
                                                      : "TREE_BROADCAST";
    for (int r = 0; r < n; ++r) {
      INFO("algorithm " << ops::toString(a) << " rank " << r);
      CHECK(names[r] == expect);
      CHECK(bufs[r] == want);
    }
  }
}

TEST_CASE("scatter-allgather broadcast: a silent or lost peer is named, nobody hangs") {
  // Two ranks, rank 1 silent: rank 0 waits for it in the scatter (root 1) or in the allgather
  // (root 0), and names it either way.
  {
    std::vector<std::unique_ptr<Transport>> ts;
    REQUIRE(createLoopbackGroup(2, &ts).isOk());
    ts[0]->setTimeout(100ms);
    Bytes buf(64, 1);
    for (int root : {0, 1}) {
      auto start = Clock::now();
      Status s = ops::scatterAllgatherBroadcast(*ts[0], buf.data(), buf.size(), root);
      INFO("root " << root << ": " << s.toString());
      CHECK(Clock::now() - start < 3s);
      CHECK(s.code() == ErrorCode::kTimeout);
      CHECK(s.message().find("rank 1") != std::string::npos);
    }
    CHECK(ops::scatterAllgatherBroadcast(*ts[0], buf.data(), 4, 2).code() ==
          ErrorCode::kInvalidArgument);
    CHECK(ops::scatterAllgatherBroadcast(*ts[0], nullptr, 4, 0).code() ==
          ErrorCode::kInvalidArgument);
  }
  // Four ranks, root 0, rank 3 gone mid-broadcast (it never takes part), through the control
  // round's entry with a response-list-sized message: its scatter parent (rank 2) and its
  // partner in Bruck's first step (rank 0) name it; rank 1, which waits on rank 2, fails too.
  const int n = 4;
  const size_t bytes = 100 * 1024;
  std::vector<Bytes> bufs(static_cast<size_t>(n), Bytes(bytes, 5));
  auto start = Clock::now();
  std::vector<Status> results = runRanks(
      n,
      [&](Transport& t, int r) {
        if (r == 3) return Status::ok();
        return ops::controlBroadcast(t, bufs[r].data(), bytes, 0);
      },
      300ms);
  CHECK(Clock::now() - start < 5s);
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << results[r].toString());
    CHECK(results[r].code() == ErrorCode::kTimeout);
    if (r != 1) CHECK(results[r].message().find("rank 3") != std::string::npos);
  }
}

namespace {

// A Transport that forwards to a loopback rank and remembers, per rank, the bytes it received
// in all and its largest single receive (the control round's traffic: the test below runs no
// data-plane op that is large).
struct RecvStats {
  std::mutex mu;
  size_t total = 0;
  size_t largest = 0;
};

class Recording final : public Transport {
 public:
  Recording(std::unique_ptr<Transport> inner, RecvStats* stats)
      : inner_(std::move(inner)), stats_(stats) {}
  const char* name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int globalRank(int groupRank) const override { return inner_->globalRank(groupRank); }
  Capabilities capabilities() const override { return inner_->capabilities(); }
  Status post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) override {
    {
      std::lock_guard<std::mutex> lock(stats_->mu);
      for (const P2POp& op : ops) {
        if (op.kind != P2POp::Kind::kRecv) continue;
        stats_->total += op.bytes;
        stats_->largest = std::max(stats_->largest, op.bytes);
      }
    }
    return inner_->post(ops, out);
  }
  Status split(const std::vector<int>& ranks, int32_t setId,
               std::unique_ptr<Transport>* out) override {
    return inner_->split(ranks, setId, out);
  }
  void abort(const Status& cause) override { inner_->abort(cause); }

 private:
  std::unique_ptr<Transport> inner_;
  RecvStats* stats_;
};

}  // namespace

TEST_CASE("control round: a first round's response list past 64 KiB broadcasts at 4 ranks") {
  // One grouped allreduce of 600 members named "<150 characters>.<i>": every rank queues the
  // group at once, so its 600 responses (~100 KiB with their names) leave rank 0 in one list.
  const int n = 4;
  const int members = 600;
  const std::string groupName = "control-round-broadcast/" + std::string(150, 'x');
  Config cfg;
  cfg.heartbeatSeconds = 0.05;
  cfg.timeoutSeconds = 20;
  cfg.cycleTimeMs = 0.5;
  cfg.stallCheck = false;
  std::vector<std::unique_ptr<Transport>> group;
  REQUIRE(createLoopbackGroup(n, &group).isOk());
  std::vector<RecvStats> stats(static_cast<size_t>(n));
  std::vector<std::unique_ptr<Runtime>> rts(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto wrapped = std::make_unique<Recording>(std::move(group[r]), &stats[r]);
    REQUIRE(createRuntimeOver(cfg, std::move(wrapped), {}, &rts[r]).isOk());
  }
  std::vector<std::vector<float>> values(static_cast<size_t>(n), std::vector<float>(members));
  std::vector<Status> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<TensorView> inputs(static_cast<size_t>(members));
      for (int i = 0; i < members; ++i) {
        values[r][i] = static_cast<float>(r + i);
        inputs[i].data = &values[r][i];
        inputs[i].dtype = DataType::kFloat32;
        inputs[i].shape = {1};
      }
      HandlePtr h;
      Status s =
          rts[r]->groupedAllreduce(groupName, inputs, nullptr, ReduceOp::kSum, 1.0, 1.0, 0, &h);
      if (s.isOk()) s = h->wait(Clock::now() + 30s);
      results[r] = s;
    });
  }
  for (auto& th : threads) th.join();
  for (auto& rt : rts) REQUIRE(rt->shutdown().isOk());
  requireAllOk(results);
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < members; ++i) {
      INFO("rank " << r << " member " << i);
      REQUIRE(values[r][i] == static_cast<float>(6 + 4 * i));  // (0+1+2+3) + 4 i
    }
  }
  // Rank 1 (a leaf of the request gather: it receives nothing there) took in the response list,
  // > 64 KiB, in pieces of at most about a quarter of it: scatter-allgather, not the chain's
  // whole-list segment.
  INFO("rank 1 received " << stats[1].total << " bytes, at most " << stats[1].largest
                          << " in one message");
  CHECK(stats[1].total > 64 * 1024);
  CHECK(stats[1].largest < 64 * 1024);
}
