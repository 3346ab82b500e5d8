// SPDX-License-Identifier: Apache-2.0
#include "core/negotiator.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <random>

using namespace kolo;
using Clock = Negotiator::Clock;

namespace {

const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);

// The process sets a test's Negotiator reads (the runtime's ProcessSetTable in production).
struct Sets : ProcessSetMembers {
  explicit Sets(int world) {
    for (int r = 0; r < world; ++r) sets[0].push_back(r);
  }
  const std::vector<int32_t>* members(int32_t id) const override {
    auto it = sets.find(id);
    return it == sets.end() ? nullptr : &it->second;
  }
  std::map<int32_t, std::vector<int32_t>> sets;
};

// A Negotiator over `world` ranks that reads its own Sets.
struct Neg : Sets, Negotiator {
  explicit Neg(int world) : Sets(world), Negotiator(world, this) {}
};

Clock::time_point at(double seconds) {
  return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

Request req(int32_t rank, const std::string& name, OpType type = OpType::kAllreduce,
            std::vector<int64_t> shape = {17, 3}) {
  Request r;
  r.rank = rank;
  r.type = type;
  r.name = name;
  r.shape = std::move(shape);
  return r;
}

std::vector<std::string> names(const std::vector<Response>& rs) {
  std::vector<std::string> out;
  for (const auto& r : rs) out.push_back(r.name);
  return out;
}

// Submits `mutated` from rank 2 and the default from ranks 0 and 1, returns the one response.
Response withRank2(Request mutated, OpType type = OpType::kAllreduce) {
  Neg n(3);
  Request base = req(0, mutated.name, type, {17, 3});
  if (type == OpType::kAlltoall) base.splits = {6, 6, 5};
  for (int r = 0; r < 2; ++r) {
    base.rank = r;
    n.add(base, t0);
  }
  mutated.rank = 2;
  n.add(mutated, t0);
  auto out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  REQUIRE_FALSE(n.hasPending());
  return out[0];
}

}  // namespace

TEST_CASE("a name is ready only when every member submitted it") {
  Neg n(3);
  CHECK_FALSE(n.hasPending());
  Request r = req(0, "grad/fc1");
  r.dtype = DataType::kBFloat16;
  r.reduceOp = ReduceOp::kAverage;
  r.prescale = 0.5;
  r.postscale = 2.0;
  r.device = 1;
  n.add(r, t0);
  CHECK(n.takeReady(t0).empty());
  CHECK(n.hasPending());
  r.rank = 2;
  r.device = 0;  // another ordinal is fine, only the kind is agreed on
  n.add(r, t0);
  n.add(r, t0);  // a duplicate from rank 2 is ignored
  CHECK(n.takeReady(t0).empty());
  r.rank = 1;
  n.add(r, t0);
  auto out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  const Response& resp = out[0];
  CHECK(resp.kind == Response::Kind::kOk);
  CHECK(resp.errorCode == ErrorCode::kOk);
  CHECK(resp.type == OpType::kAllreduce);
  CHECK(resp.name == "grad/fc1");
  CHECK(resp.dtype == DataType::kBFloat16);
  CHECK(resp.shape == std::vector<int64_t>{17, 3});
  CHECK(resp.reduceOp == ReduceOp::kAverage);
  CHECK(resp.prescale == 0.5);
  CHECK(resp.postscale == 2.0);
  CHECK(resp.device == 1);  // the lowest rank's
  CHECK(resp.joinedRanks.empty());
  CHECK(resp.group == -1);
  CHECK_FALSE(n.hasPending());
  CHECK(n.takeReady(t0).empty());
}

TEST_CASE("mismatch messages name the op, the tensor and both values") {
  Request m = req(2, "grad/fc1", OpType::kAllreduce, {17, 4});
  Response r = withRank2(m);
  CHECK(r.kind == Response::Kind::kError);
  CHECK(r.errorCode == ErrorCode::kMismatch);
  CHECK(r.error == "allreduce 'grad/fc1': rank 0 sent shape [17, 3], rank 2 sent [17, 4]");

  m = req(2, "x");
  m.dtype = DataType::kInt32;
  CHECK(withRank2(m).error == "allreduce 'x': rank 0 sent dtype float32, rank 2 sent int32");

  m = req(2, "x", OpType::kAllgather);
  CHECK(withRank2(m).error == "allreduce 'x': rank 0 sent op allreduce, rank 2 sent allgather");

  m = req(2, "x", OpType::kBroadcast);
  m.root = 1;
  CHECK(withRank2(m, OpType::kBroadcast).error ==
        "broadcast 'x': rank 0 sent root 0, rank 2 sent root 1");

  m = req(2, "x");
  m.prescale = 0.25;
  CHECK(withRank2(m).error == "allreduce 'x': rank 0 sent prescale 1, rank 2 sent prescale 0.25");
  m = req(2, "x");
  m.postscale = 0.1;
  CHECK(withRank2(m).error == "allreduce 'x': rank 0 sent postscale 1, rank 2 sent postscale 0.1");
  m = req(2, "x");
  m.reduceOp = ReduceOp::kMax;
  CHECK(withRank2(m).error == "allreduce 'x': rank 0 sent reduce op sum, rank 2 sent max");
  m = req(2, "x");
  m.device = 3;
  CHECK(withRank2(m).error == "allreduce 'x': rank 0 sent device cpu, rank 2 sent cuda:3");
  m = req(2, "x");
  m.groupId = 0;
  m.groupSize = 2;
  CHECK(withRank2(m).error == "allreduce 'x': rank 0 sent group size 0, rank 2 sent group size 2");

  // Fields outer, ranks inner: rank 1's dtype beats rank 2's shape, whatever the arrival order.
  Neg n(3);
  Request a = req(2, "y", OpType::kAllreduce, {9});
  n.add(a, t0);
  a = req(1, "y");
  a.dtype = DataType::kFloat64;
  n.add(a, t0);
  n.add(req(0, "y"), t0);
  auto out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].error == "allreduce 'y': rank 0 sent dtype float32, rank 1 sent float64");
}

TEST_CASE("fields that do not matter for an op are not compared") {
  Request m = req(2, "x", OpType::kBroadcast);
  m.reduceOp = ReduceOp::kMin;  // broadcast does not reduce
  m.prescale = 3;
  CHECK(withRank2(m, OpType::kBroadcast).kind == Response::Kind::kOk);
  m = req(2, "x");
  m.root = 2;  // allreduce has no root
  CHECK(withRank2(m).kind == Response::Kind::kOk);
}

TEST_CASE("allgather collects dim 0 and compares only the other dims") {
  Neg n(3);
  n.add(req(1, "g", OpType::kAllgather, {5, 3}), t0);
  n.add(req(0, "g", OpType::kAllgather, {2, 3}), t0);
  n.add(req(2, "g", OpType::kAllgather, {0, 3}), t0);
  auto out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].kind == Response::Kind::kOk);
  CHECK(out[0].shape == std::vector<int64_t>{2, 3});
  CHECK(out[0].rankDim0 == std::vector<int64_t>{2, 5, 0});

  Response r = withRank2(req(2, "g", OpType::kAllgather, {17, 4}), OpType::kAllgather);
  CHECK(r.error ==
        "allgather 'g': rank 0 sent shape [17, 3], rank 2 sent [17, 4] "
        "(only the first dimension may differ)");
  r = withRank2(req(2, "g", OpType::kAllgather, {}), OpType::kAllgather);
  CHECK(r.error ==
        "allgather 'g': rank 0 sent shape [17, 3], rank 2 sent [] "
        "(only the first dimension may differ)");
}

TEST_CASE("alltoall builds the split matrix and checks every rank's splits") {
  Neg n(2);
  Request a = req(0, "a", OpType::kAlltoall, {3, 2});
  a.splits = {1, 2};
  Request b = req(1, "a", OpType::kAlltoall, {4, 2});
  b.splits = {4, 0};
  n.add(b, t0);
  n.add(a, t0);
  auto out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].kind == Response::Kind::kOk);
  CHECK(out[0].splitMatrix == std::vector<int64_t>{1, 2, 4, 0});

  Request m = req(2, "a", OpType::kAlltoall, {17, 3});
  m.splits = {6, 6};
  Response r = withRank2(m, OpType::kAlltoall);
  CHECK(r.errorCode == ErrorCode::kInvalidArgument);
  CHECK(r.error == "alltoall 'a': rank 2 sent 2 splits for a process set of 3 ranks");
  m.splits = {6, 6, 6};
  r = withRank2(m, OpType::kAlltoall);
  CHECK(r.error ==
        "alltoall 'a': rank 2 sent splits [6, 6, 6] summing to 18, more than its first dimension "
        "17");
  m.splits = {6, 6, 4};  // fewer rows than dimension 0, as Horovod: the last rows are not sent
  CHECK(withRank2(m, OpType::kAlltoall).kind == Response::Kind::kOk);
  m.splits = {20, -3, 0};
  r = withRank2(m, OpType::kAlltoall);
  CHECK(r.errorCode == ErrorCode::kInvalidArgument);
  CHECK(r.error == "alltoall 'a': rank 2 sent splits [20, -3, 0] with a negative entry");
}

TEST_CASE("per-rank invalid values are invalid-argument errors") {
  Request m = req(2, "b", OpType::kBroadcast);
  m.root = 3;
  Neg n(3);
  for (int r = 0; r < 3; ++r) {
    m.rank = r;
    n.add(m, t0);
  }
  auto out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].errorCode == ErrorCode::kInvalidArgument);
  CHECK(out[0].error == "broadcast 'b': root 3 is not a rank of process set 0 (3 ranks)");

  Neg s(1);
  s.add(req(0, "s", OpType::kReducescatter, {}), t0);
  out = s.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].error ==
        "reducescatter 's': rank 0 sent a scalar; reducescatter needs at least "
        "one dimension");
  Request a2a = req(0, "a2a", OpType::kAlltoall, {5});  // no splits: 5 does not divide
  s.add(a2a, t0);
  Neg two(2);
  two.add(a2a, t0);
  a2a.rank = 1;
  a2a.shape = {4};
  a2a.splits = {2, 2};
  two.add(a2a, t0);
  out = two.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].error ==
        "alltoall 'a2a': rank 0 sent no splits, and its dimension 0 (5) is not divisible by the "
        "2 ranks");
  out = s.takeReady(t0);
  REQUIRE(out.size() == 1);
  s.add(req(0, "neg", OpType::kAllreduce, {4, -2}), t0);
  out = s.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].error == "allreduce 'neg': rank 0 sent shape [4, -2] with a negative dimension");
}

TEST_CASE("joined ranks contribute zeros to allreduce and block other collectives") {
  Neg n(3);
  n.add(req(0, "before"), t0);
  Request join = req(1, kJoinName, OpType::kJoin, {});
  n.add(join, t0);
  CHECK(n.joinedRanks() == std::vector<int32_t>{1});
  n.add(req(2, "before"), t0);
  auto out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].kind == Response::Kind::kOk);
  CHECK(out[0].joinedRanks == std::vector<int32_t>{1});

  n.add(req(0, "g", OpType::kAllgather, {2, 3}), t0);
  n.add(req(2, "g", OpType::kAllgather, {2, 3}), t0);
  n.add(req(0, "bar", OpType::kBarrier, {}), t0);
  n.add(req(2, "bar", OpType::kBarrier, {}), t0);
  out = n.takeReady(t0);
  REQUIRE(out.size() == 2);
  CHECK(out[0].errorCode == ErrorCode::kJoined);
  CHECK(out[0].error ==
        "allgather 'g' is not allowed while rank 1 has joined (only allreduce and barrier run "
        "while ranks have joined; sparse gradients: DistributedOptimizer(sparse_as_dense=True))");
  CHECK(out[1].kind == Response::Kind::kOk);
  CHECK(out[1].joinedRanks == std::vector<int32_t>{1});

  join.rank = 2;
  n.add(join, t0);
  n.add(req(0, "bc", OpType::kBroadcast), t0);
  out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].error ==
        "broadcast 'bc' is not allowed while ranks 1, 2 have joined (only "
        "allreduce and barrier run while ranks have joined)");

  join.rank = 1;
  n.add(join, t0);  // already joined: ignored
  CHECK(n.takeReady(t0).empty());
  join.rank = 0;
  n.add(join, t0);
  out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].type == OpType::kJoin);
  CHECK(out[0].name == kJoinName);
  CHECK(out[0].kind == Response::Kind::kOk);
  CHECK(out[0].lastJoinedRank == 0);
  CHECK(n.joinedRanks().empty());
  CHECK_FALSE(n.hasPending());

  // The joined state reset: allreduce waits for everyone again.
  n.add(req(0, "after"), t0);
  n.add(req(1, "after"), t0);
  CHECK(n.takeReady(t0).empty());
  n.add(req(2, "after"), t0);
  out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].joinedRanks.empty());
}

TEST_CASE("a join completes waiting names before the join response, in arrival order") {
  Neg n(2);
  n.add(req(0, "late"), t0);
  n.add(req(0, "early"), at(-1));  // arrival order is call order, not the timestamp
  n.add(req(0, "third"), t0);
  n.add(req(0, kJoinName, OpType::kJoin, {}), t0);
  CHECK(n.takeReady(t0).empty());
  n.add(req(1, kJoinName, OpType::kJoin, {}), t0);
  auto out = n.takeReady(t0);
  CHECK(names(out) == std::vector<std::string>{"late", "early", "third", kJoinName});
  for (size_t i = 0; i < 3; ++i) CHECK(out[i].joinedRanks == std::vector<int32_t>{1});
  CHECK(out[3].lastJoinedRank == 1);
}

TEST_CASE("ready order is completion order") {
  Neg n(2);
  n.add(req(0, "a"), t0);
  n.add(req(0, "b"), t0);
  n.add(req(0, "c"), t0);
  n.add(req(1, "c"), t0);
  n.add(req(1, "a"), t0);
  CHECK(names(n.takeReady(t0)) == std::vector<std::string>{"c", "a"});
  n.add(req(1, "b"), t0);
  CHECK(names(n.takeReady(t0)) == std::vector<std::string>{"b"});
}

TEST_CASE("process sets: membership, readiness and removal") {
  Neg n(4);
  n.sets[1] = {1, 3};
  Request r = req(1, "p");
  r.processSet = 1;
  n.add(r, t0);
  CHECK(n.takeReady(t0).empty());
  r.rank = 3;
  n.add(r, t0);
  auto out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].kind == Response::Kind::kOk);
  CHECK(out[0].processSet == 1);

  // Rank 0 is not a member: the name fails at once, for the rank that already submitted too.
  r.rank = 1;
  n.add(r, t0);
  r.rank = 0;
  n.add(r, t0);
  out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].errorCode == ErrorCode::kInvalidArgument);
  CHECK(out[0].error == "allreduce 'p' in process set 1: rank 0 is not a member of process set 1");
  CHECK_FALSE(n.hasPending());

  r.processSet = 5;
  n.add(r, t0);
  out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].error == "allreduce 'p' in process set 5: rank 0 sent unknown process set 5");

  // Removing a set fails what waits on it.
  r.processSet = 1;
  r.rank = 3;
  n.add(r, t0);
  n.sets.erase(1);
  n.processSetRemoved(1);
  out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].error == "allreduce 'p' in process set 1: process set 1 was removed");
  n.processSetRemoved(0);  // the world is never removed: nothing pending on it fails
  n.add(req(0, "w"), t0);
  n.processSetRemoved(0);
  CHECK(n.takeReady(t0).empty());
}

TEST_CASE("process-set ops are negotiated over the world and compare the rank list") {
  Neg n(3);
  Request r = req(0, "__ps.1", OpType::kAddProcessSet, {});
  r.splits = {0, 2};
  n.add(r, t0);
  r.rank = 1;
  n.add(r, t0);
  CHECK(n.takeReady(t0).empty());
  r.rank = 2;
  n.add(r, t0);
  auto out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].kind == Response::Kind::kOk);
  CHECK(out[0].type == OpType::kAddProcessSet);
  CHECK(out[0].processSet == 0);

  for (int k = 0; k < 3; ++k) {
    r.rank = k;
    r.splits = k == 1 ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0, 2};
    n.add(r, t0);
  }
  out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].error == "add_process_set '__ps.1': rank 0 sent ranks [0, 2], rank 1 sent [0, 1]");

  // The list is opaque to the negotiator (a removal carries the set id); the response keeps the
  // first rank's shape, which the runtime uses to carry the list to every rank.
  for (int k = 0; k < 3; ++k) {
    Request rm = req(k, "__process_set.remove.0", OpType::kRemoveProcessSet, {7});
    rm.splits = {7};
    n.add(rm, t0);
  }
  out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].kind == Response::Kind::kOk);
  CHECK(out[0].shape == std::vector<int64_t>{7});
}

TEST_CASE("stalls list ready and missing ranks; failStalled removes them") {
  Neg n(4);
  n.sets[2] = {0, 1, 2};
  n.add(req(0, "old"), at(0));
  n.add(req(2, "old"), at(1));
  Request s = req(1, "set");
  s.processSet = 2;
  n.add(s, at(5));
  n.add(req(0, kJoinName, OpType::kJoin, {}), at(5));  // joins are not stalls
  n.add(req(3, "young"), at(55));

  auto st = n.stalled(at(61), 10);
  REQUIRE(st.size() == 2);
  CHECK(st[0].name == "old");
  CHECK(st[0].type == OpType::kAllreduce);
  CHECK(st[0].waitedSeconds == Approx(61));
  CHECK(st[0].readyRanks == std::vector<int32_t>{0, 2});
  CHECK(st[0].missingRanks == std::vector<int32_t>{1, 3});
  CHECK(st[1].name == "set");
  CHECK(st[1].processSet == 2);
  CHECK(st[1].readyRanks == std::vector<int32_t>{1});
  CHECK(st[1].missingRanks == std::vector<int32_t>{2});  // rank 0 joined
  CHECK(n.stalled(at(61), 100).empty());

  auto failed = n.failStalled(at(61), 10);
  REQUIRE(failed.size() == 2);
  CHECK(failed[0].errorCode == ErrorCode::kStalled);
  CHECK(failed[0].name == "old");
  CHECK(failed[0].error ==
        "allreduce 'old' stalled for 61.0 s: missing ranks [1, 3], submitted by [0, 2]");
  CHECK(failed[1].name == "set");
  CHECK(failed[1].processSet == 2);
  CHECK(n.stalled(at(61), 10).empty());
  REQUIRE(n.stalled(at(61), 5).size() == 1);
  CHECK(n.hasPending());
  n.erase(OpKey{0, "young"});
  n.add(req(1, kJoinName, OpType::kJoin, {}), at(62));
  n.add(req(2, kJoinName, OpType::kJoin, {}), at(62));
  n.add(req(3, kJoinName, OpType::kJoin, {}), at(62));
  auto out = n.takeReady(at(62));
  REQUIRE(out.size() == 1);
  CHECK(out[0].lastJoinedRank == 3);
  CHECK_FALSE(n.hasPending());
}

TEST_CASE("stalled() finds the oldest entry whatever order the arrival times came in") {
  // stalled() skips its walk while the oldest first arrival is young enough: the oldest must be
  // tracked by time, through removals, not by arrival order.
  Neg n(2);
  n.add(req(0, "late"), at(50));
  n.add(req(0, "early"), at(0));
  auto st = n.stalled(at(20), 10);
  REQUIRE(st.size() == 1);
  CHECK(st[0].name == "early");
  n.erase(OpKey{0, "early"});
  CHECK(n.stalled(at(20), 10).empty());
  st = n.stalled(at(61), 10);
  REQUIRE(st.size() == 1);
  CHECK(st[0].name == "late");
  n.erase(OpKey{0, "late"});
  CHECK(n.stalled(at(1e6), 0).empty());
}

TEST_CASE("erase forgets a name completed elsewhere") {
  Neg n(2);
  n.add(req(0, "cached"), t0);
  n.add(req(1, "cached"), t0);
  n.erase(OpKey{0, "cached"});
  n.erase(OpKey{0, "never-seen"});
  CHECK(n.takeReady(t0).empty());
  CHECK_FALSE(n.hasPending());
  // The name can be negotiated again afterwards.
  n.add(req(0, "cached"), t0);
  n.add(req(1, "cached"), t0);
  CHECK(names(n.takeReady(t0)) == std::vector<std::string>{"cached"});
}

TEST_CASE("grouped allreduce members are released together, consecutively") {
  Neg n(2);
  auto member = [](int32_t rank, const std::string& name, int32_t gid) {
    Request r = req(rank, name);
    r.groupId = gid;
    r.groupSize = 3;
    return r;
  };
  // Rank 1's counter differs from rank 0's: groups are per rank.
  n.add(member(0, "g1", 0), t0);
  n.add(member(0, "g2", 0), t0);
  n.add(member(1, "g2", 7), t0);
  n.add(member(1, "g1", 7), t0);
  n.add(req(0, "solo"), t0);
  n.add(req(1, "solo"), t0);
  CHECK(names(n.takeReady(t0)) == std::vector<std::string>{"solo"});  // g3 not submitted yet
  n.add(member(0, "g3", 0), t0);
  n.add(req(0, "after"), t0);
  n.add(req(1, "after"), t0);
  CHECK(names(n.takeReady(t0)) == std::vector<std::string>{"after"});
  n.add(member(1, "g3", 7), t0);
  auto out = n.takeReady(t0);
  REQUIRE(names(out) == std::vector<std::string>{"g2", "g1", "g3"});
  CHECK(out[0].group >= 0);
  CHECK(out[0].group == out[1].group);
  CHECK(out[1].group == out[2].group);
  CHECK_FALSE(n.hasPending());

  // A second group gets a new id; a member completed elsewhere still counts.
  n.add(member(0, "h1", 1), t0);
  n.add(member(1, "h1", 8), t0);
  n.add(member(0, "h2", 1), t0);
  n.erase(OpKey{0, "h2"});
  n.add(member(0, "h3", 1), t0);
  n.add(member(1, "h3", 8), t0);
  CHECK(n.takeReady(t0).empty());  // rank 1 has submitted only 2 of 3
  n.add(member(1, "h4", 8), t0);   // rank 1's third member (not in rank 0's group)
  CHECK(n.takeReady(t0).empty());  // h4 itself is incomplete
  n.add(member(0, "h4", 2), t0);
  CHECK(n.takeReady(t0).empty());  // rank 0's group 2 misses members
  n.add(member(0, "h5", 2), t0);
  n.add(member(0, "h6", 2), t0);
  n.add(member(1, "h5", 9), t0);
  n.add(member(1, "h6", 9), t0);
  CHECK(n.takeReady(t0).empty());  // rank 1's group 9 has 2 of 3
  n.add(member(1, "h7", 9), t0);
  n.add(member(0, "h7", 3), t0);
  n.add(member(0, "h8", 3), t0);
  n.add(member(0, "h9", 3), t0);
  n.add(member(1, "h8", 10), t0);
  n.add(member(1, "h9", 10), t0);
  n.add(member(1, "extra", 10), t0);  // rank 1's group 10 complete but "extra" is not
  CHECK(n.takeReady(t0).empty());
  n.add(member(0, "extra", 4), t0);
  n.add(req(0, "pad1"), t0);
  n.add(req(0, "pad2"), t0);
  n.add(member(0, "pad1", 4), t0);  // duplicate name: ignored
  CHECK(n.takeReady(t0).empty());
  // Rank 0's group 4 ({extra}) misses two members; stall-failing breaks the chain cleanly.
  auto st = n.stalled(at(100), 10);
  REQUIRE(st.size() == 11);  // h1, h3..h9, extra (held by groups), pad1, pad2 (incomplete)
  CHECK(st[0].name == "h1");
  CHECK(st[0].readyRanks == std::vector<int32_t>{0, 1});
  CHECK(st[0].missingRanks == std::vector<int32_t>{0});  // rank 0's group 4 is short
  auto failed = n.failStalled(at(100), 10);
  REQUIRE(failed.size() == 11);
  CHECK(failed[0].name == "h1");
  CHECK(failed[0].error == "allreduce 'h1' stalled for 100.0 s in a group waiting for ranks [0]");
  CHECK(failed[1].name == "h3");
  CHECK(failed[1].error == "allreduce 'h3' is grouped with stalled allreduce 'h1'");
  CHECK(failed[9].name == "pad1");
  CHECK(failed[9].error ==
        "allreduce 'pad1' stalled for 100.0 s: missing ranks [1], submitted by [0]");
  for (const auto& f : failed) CHECK(f.errorCode == ErrorCode::kStalled);
  CHECK_FALSE(n.hasPending());
}

TEST_CASE("an erroneous group member is released alone; the rest of the group still goes") {
  Neg n(2);
  auto member = [](int32_t rank, const std::string& name) {
    Request r = req(rank, name);
    r.groupId = 0;
    r.groupSize = 2;
    return r;
  };
  n.add(member(0, "a"), t0);
  Request bad = member(1, "a");
  bad.dtype = DataType::kInt8;
  n.add(bad, t0);
  auto out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].errorCode == ErrorCode::kMismatch);
  CHECK(out[0].group == -1);
  n.add(member(0, "b"), t0);
  n.add(member(1, "b"), t0);
  out = n.takeReady(t0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].kind == Response::Kind::kOk);
  CHECK(out[0].group >= 0);
}

TEST_CASE("a rank's refusal fails the op on every rank with its reason, before any comparison") {
  // Rank 2 could not submit its tensor (Request::refusal): its request carries defaults, which
  // must not be compared (they would read as a dtype or shape mismatch).
  Request refused = req(2, "r", OpType::kAllreduce, {});
  refused.dtype = DataType::kUInt8;
  refused.refusal = "torch.sparse_coo tensors are not supported";
  Response out = withRank2(refused);
  CHECK(out.kind == Response::Kind::kError);
  CHECK(out.errorCode == ErrorCode::kInvalidArgument);
  CHECK(out.error ==
        "allreduce 'r': rank 2 could not submit it: torch.sparse_coo tensors are not supported");

  // Every member of a refused group fails, and the group is released as a whole.
  Neg n(2);
  auto member = [](int32_t rank, const std::string& name, const std::string& why) {
    Request r = req(rank, name);
    r.groupId = rank;
    r.groupSize = 2;
    r.refusal = why;
    return r;
  };
  n.add(member(0, "g.0", ""), t0);
  n.add(member(0, "g.1", ""), t0);
  n.add(member(1, "g.0", "its tensor 1: a NULL buffer"), t0);
  n.add(member(1, "g.1", "its tensor 1: a NULL buffer"), t0);
  auto all = n.takeReady(t0);
  REQUIRE(names(all) == std::vector<std::string>{"g.0", "g.1"});
  for (const auto& r : all) {
    CHECK(r.errorCode == ErrorCode::kInvalidArgument);
    CHECK(r.error.find("rank 1 could not submit it: its tensor 1: a NULL buffer") !=
          std::string::npos);
  }
  CHECK_FALSE(n.hasPending());
}

TEST_CASE("a stalled remove_process_set names the set it removes") {
  Neg n(2);
  Request rm = req(0, "__process_set.remove", OpType::kRemoveProcessSet, {4});
  rm.splits = rm.shape;
  n.add(rm, at(0));
  auto failed = n.failStalled(at(20), 10);
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].error ==
        "remove_process_set '__process_set.remove' (of process set 4) stalled for 20.0 s: "
        "missing ranks [1], submitted by [0]");
}

TEST_CASE("a refusal the stall shutdown failed still fails the op when the others come later") {
  // Rank 0 refused "late" while rank 1 was busy elsewhere past the stall time: the stall
  // shutdown fails "late", and rank 1's later submission must fail at once with rank 0's
  // reason, not wait for rank 0 (which will never submit it again) through a second stall.
  Neg n(2);
  Request refused = req(0, "late");
  refused.refusal = "tensor type torch.complex64 is not supported by kolo";
  n.add(refused, at(0));
  auto failed = n.failStalled(at(20), 10);
  REQUIRE(names(failed) == std::vector<std::string>{"late"});
  CHECK(failed[0].errorCode == ErrorCode::kStalled);
  CHECK_FALSE(n.hasPending());

  n.add(req(1, "late"), at(30));
  auto out = n.takeReady(at(30));
  REQUIRE(names(out) == std::vector<std::string>{"late"});
  CHECK(out[0].errorCode == ErrorCode::kInvalidArgument);
  CHECK(out[0].error ==
        "allreduce 'late': rank 0 could not submit it: tensor type "
        "torch.complex64 is not supported by kolo");
  CHECK_FALSE(n.hasPending());

  // Used once: the next "late" is an op like any other.
  n.add(req(1, "late"), at(40));
  CHECK(n.takeReady(at(40)).empty());
  CHECK(n.stalled(at(40), 0).size() == 0);
  n.add(req(0, "late"), at(41));
  auto ok = n.takeReady(at(41));
  REQUIRE(ok.size() == 1);
  CHECK(ok[0].kind == Response::Kind::kOk);

  // The refusing rank's own retry replaces its old refusal.
  n.add(refused, at(50));
  n.failStalled(at(70), 10);
  n.add(req(0, "late"), at(80));
  n.add(req(1, "late"), at(80));
  auto retried = n.takeReady(at(80));
  REQUIRE(retried.size() == 1);
  CHECK(retried[0].kind == Response::Kind::kOk);

  // A set removed takes its remembered refusals along.
  n.sets[3] = {0, 1};
  Request inSet = refused;
  inSet.processSet = 3;
  n.add(inSet, at(90));
  n.failStalled(at(110), 10);
  n.processSetRemoved(3);
  n.sets[3] = {0, 1};
  Request later = req(1, "late");
  later.processSet = 3;
  n.add(later, at(120));
  CHECK(n.takeReady(at(120)).empty());
}

TEST_CASE("ranks that disagree on a group's size: its extra members fail at once, everywhere") {
  Neg n(3);
  auto member = [](int32_t rank, const std::string& name, int32_t size) {
    Request r = req(rank, name);
    r.groupId = 0;
    r.groupSize = size;
    return r;
  };
  // Rank 0 groups two tensors, ranks 1 and 2 three: "g.2" never comes from rank 0.
  n.add(member(0, "g.0", 2), t0);
  n.add(member(0, "g.1", 2), t0);
  for (int32_t r : {1, 2}) {
    for (const char* name : {"g.0", "g.1", "g.2"}) n.add(member(r, name, 3), t0);
  }
  auto out = n.takeReady(t0);
  REQUIRE(names(out) == std::vector<std::string>{"g.0", "g.1", "g.2"});
  for (const auto& r : out) CHECK(r.errorCode == ErrorCode::kMismatch);
  CHECK(out[0].error == "allreduce 'g.0': rank 0 sent group size 2, rank 1 sent group size 3");
  CHECK(out[2].error ==
        "allreduce 'g.2' is in a group whose size the ranks disagree on (allreduce 'g.0': rank 0 "
        "sent group size 2, rank 1 sent group size 3); ranks [0] will never submit it");
  CHECK_FALSE(n.hasPending());
  CHECK(n.stalled(at(1e6), 0).empty());
  // A rank that sent the name as a plain op may send the group's other names as plain ops too:
  // only the name itself fails.
  n.add(member(0, "p.0", 2), t0);
  n.add(member(0, "p.1", 2), t0);
  n.add(req(1, "p.0"), t0);
  n.add(req(2, "p.0"), t0);
  out = n.takeReady(t0);
  REQUIRE(names(out) == std::vector<std::string>{"p.0"});
  n.add(req(1, "p.1"), t0);
  n.add(req(2, "p.1"), t0);
  out = n.takeReady(t0);
  REQUIRE(names(out) == std::vector<std::string>{"p.1"});
  CHECK(out[0].errorCode == ErrorCode::kMismatch);  // its own group-size mismatch
  CHECK_FALSE(n.hasPending());
  // Equal sizes, one member slow: nothing is failed early.
  n.add(member(0, "h.0", 2), t0);
  n.add(member(1, "h.0", 2), t0);
  n.add(member(2, "h.0", 2), t0);
  n.add(member(0, "h.1", 2), t0);
  CHECK(n.takeReady(t0).empty());
}

TEST_CASE("a stall names a missing rank's op of another type under the same user name") {
  Neg n(2);
  n.add(req(0, "allreduce.kk"), t0);
  n.add(req(1, "allgather.kk", OpType::kAllgather), t0);
  n.add(req(0, "allreduce.noname.3"), t0);
  n.add(req(1, "allgather.noname.3", OpType::kAllgather), t0);
  auto st = n.stalled(at(10), 5);
  REQUIRE(st.size() == 4);
  CHECK(st[0].name == "allreduce.kk");
  CHECK(
      st[0].hint ==
      "; rank 1 submitted allgather 'allgather.kk' instead (the same name with another op type?)");
  CHECK(
      st[1].hint ==
      "; rank 0 submitted allreduce 'allreduce.kk' instead (the same name with another op type?)");
  CHECK(st[2].hint.empty());  // automatic names: no hint
  auto failed = n.failStalled(at(10), 5);
  REQUIRE(failed.size() == 4);
  CHECK(failed[0].error ==
        "allreduce 'allreduce.kk' stalled for 10.0 s: missing ranks [1], submitted by [0]; rank 1 "
        "submitted allgather 'allgather.kk' instead (the same name with another op type?)");
}

TEST_CASE("hostile requests are ignored or answered, never crash") {
  Neg n(2);
  Request r = req(5, "x");
  n.add(r, t0);  // rank outside the world
  r.rank = -1;
  n.add(r, t0);
  r.rank = 0;
  r.type = static_cast<OpType>(42);
  n.add(r, t0);
  CHECK_FALSE(n.hasPending());
  Neg empty(0);
  empty.add(req(0, "x"), t0);
  CHECK(empty.takeReady(t0).empty());
}

TEST_CASE("random arrival orders: every name answered exactly once, same answers every time") {
  std::mt19937 rng(11);
  for (int iter = 0; iter < 200; ++iter) {
    const int world = 1 + static_cast<int>(rng() % 4);
    const int count = static_cast<int>(rng() % 12);
    // Per rank: a sequence of requests; names 0..count-1, some grouped in pairs per rank.
    std::vector<std::vector<Request>> perRank(world);
    for (int r = 0; r < world; ++r) {
      int32_t gid = 7 * r;  // per-rank counters differ
      for (int k = 0; k < count; ++k) {
        Request q = req(r, "n" + std::to_string(k));
        if (k % 4 < 2 && k - k % 4 + 1 < count) {  // pairs {0, 1}, {4, 5}, ...
          q.groupId = gid + k / 4;
          q.groupSize = 2;
        }
        if (rng() % 10 == 0) q.dtype = DataType::kInt32;  // an occasional mismatch
        perRank[r].push_back(q);
      }
      std::shuffle(perRank[r].begin(), perRank[r].end(), rng);
    }
    // The schedule: which rank submits next, and when takeReady runs (-1).
    std::vector<int> schedule;
    std::vector<size_t> next(world, 0);
    for (int remaining = world * count; remaining > 0;) {
      int r = static_cast<int>(rng() % world);
      if (next[r] == perRank[r].size()) continue;
      ++next[r];
      --remaining;
      schedule.push_back(r);
      if (rng() % 3 == 0) schedule.push_back(-1);
    }
    schedule.push_back(-1);
    auto run = [&](Negotiator& n) {
      std::vector<Response> out;
      std::vector<size_t> pos(world, 0);
      for (int step : schedule) {
        if (step >= 0) {
          n.add(perRank[step][pos[step]++], t0);
        } else {
          for (auto& resp : n.takeReady(t0)) out.push_back(std::move(resp));
        }
      }
      return out;
    };
    Neg n(world), again(world);
    std::vector<Response> first = run(n), second = run(again);
    std::map<std::string, int> answered;
    for (const auto& resp : first) ++answered[resp.name];
    REQUIRE(static_cast<int>(answered.size()) == count);
    for (const auto& a : answered) CHECK(a.second == 1);
    REQUIRE(first.size() == second.size());
    for (size_t i = 0; i < first.size(); ++i) {
      CHECK(first[i].name == second[i].name);
      CHECK(first[i].error == second[i].error);
      CHECK(first[i].group == second[i].group);
    }
    CHECK_FALSE(n.hasPending());
  }
}

TEST_CASE("random hostile requests never crash") {
  std::mt19937 rng(5);
  Neg n(3);
  n.sets[1] = {0, 2};
  for (int i = 0; i < 20000; ++i) {
    Request q;
    q.rank = static_cast<int32_t>(rng() % 5) - 1;
    q.type = static_cast<OpType>(rng() % 10);
    q.name = "h" + std::to_string(rng() % 6);
    q.dtype = static_cast<DataType>(rng() % kNumDataTypes);
    for (size_t d = rng() % 3; d > 0; --d) q.shape.push_back(static_cast<int64_t>(rng() % 5) - 1);
    for (size_t d = rng() % 4; d > 0; --d) q.splits.push_back(static_cast<int64_t>(rng() % 5) - 1);
    q.root = static_cast<int32_t>(rng() % 4) - 1;
    q.device = static_cast<int32_t>(rng() % 3) - 1;
    q.processSet = static_cast<int32_t>(rng() % 3);
    q.reduceOp = static_cast<ReduceOp>(rng() % 5);
    if (rng() % 2) {
      q.groupId = static_cast<int32_t>(rng() % 3);
      q.groupSize = static_cast<int32_t>(rng() % 4);
    }
    n.add(q, at(i * 0.01));
    if (rng() % 50 == 0) {
      n.erase(OpKey{static_cast<int32_t>(rng() % 3), "h" + std::to_string(rng() % 6)});
    }
    if (rng() % 7 == 0) {
      for (const auto& resp : n.takeReady(at(i * 0.01))) {
        CHECK_FALSE(resp.name.empty());
        if (resp.kind == Response::Kind::kError) CHECK_FALSE(resp.error.empty());
      }
    }
    if (rng() % 500 == 0) n.failStalled(at(i * 0.01), 1.0);
  }
  n.failStalled(at(1e6), 0);
  n.takeReady(at(1e6));
  // Everything left is either a join in progress or nothing.
  CHECK(n.stalled(at(1e6), 0).empty());
}
