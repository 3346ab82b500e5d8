// SPDX-License-Identifier: Apache-2.0
#include "core/fusion_planner.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <limits>
#include <random>

using namespace kolo;

namespace {

// An OK float32 allreduce of `bytes` bytes (bytes must be a multiple of 4).
Response ar(int64_t bytes, int32_t group = -1) {
  Response r;
  r.type = OpType::kAllreduce;
  r.name = "t";
  r.dtype = DataType::kFloat32;
  r.shape = {bytes / 4};
  r.group = group;
  return r;
}

Response ag(std::vector<int64_t> rankDim0, int64_t rowElements) {
  Response r;
  r.type = OpType::kAllgather;
  r.name = "g";
  r.dtype = DataType::kFloat64;
  r.shape = {rankDim0.at(0), rowElements};
  r.rankDim0 = std::move(rankDim0);
  return r;
}

using Plan = std::vector<std::vector<size_t>>;

Plan plan(const std::vector<Response>& rs, int64_t threshold) {
  Plan out;
  for (const auto& b : planFusion(rs, threshold, 4)) out.push_back(b.indices);
  return out;
}

}  // namespace

TEST_CASE("greedy packing under the threshold") {
  std::vector<Response> rs = {ar(100), ar(100), ar(100)};
  auto batches = planFusion(rs, 250, 2);
  REQUIRE(batches.size() == 2);
  CHECK(batches[0].indices == std::vector<size_t>{0, 1});
  CHECK(batches[0].bytes == 200);
  CHECK(batches[1].indices == std::vector<size_t>{2});
  CHECK(batches[1].bytes == 100);
  CHECK(plan(rs, 300) == Plan{{0, 1, 2}});  // exactly the threshold fits
  CHECK(plan(rs, 299) == Plan{{0, 1}, {2}});
}

TEST_CASE("threshold 0 means no fusion") {
  std::vector<Response> rs = {ar(4), ar(4), ar(4)};
  CHECK(plan(rs, 0) == Plan{{0}, {1}, {2}});
  CHECK(plan(rs, -5) == Plan{{0}, {1}, {2}});
  CHECK(planFusion({}, 100, 1).empty());
}

TEST_CASE("look-ahead skips what does not match or does not fit") {
  std::vector<Response> rs = {ar(40), ar(80), ar(40), ar(20)};
  rs[1].dtype = DataType::kInt32;
  CHECK(plan(rs, 1000) == Plan{{0, 2, 3}, {1}});
  rs[1].dtype = DataType::kFloat32;
  // 40 + 80 > 100: the 80 waits for its own batch, the later 40 and 20 still join the first.
  CHECK(plan(rs, 100) == Plan{{0, 2, 3}, {1}});
}

TEST_CASE("a tensor larger than the threshold is alone") {
  std::vector<Response> rs = {ar(40), ar(400), ar(40)};
  auto batches = planFusion(rs, 100, 2);
  REQUIRE(batches.size() == 2);
  CHECK(batches[0].indices == std::vector<size_t>{0, 2});
  CHECK(batches[1].indices == std::vector<size_t>{1});
  CHECK(batches[1].bytes == 400);
}

TEST_CASE("every allreduce parameter splits batches") {
  std::vector<std::function<void(Response&)>> changes = {
      [](Response& r) { r.dtype = DataType::kInt32; },
      [](Response& r) { r.reduceOp = ReduceOp::kMax; },
      [](Response& r) { r.prescale = 0.5; },
      [](Response& r) { r.postscale = 0.5; },
      [](Response& r) { r.device = 0; },
      [](Response& r) { r.processSet = 1; },
      [](Response& r) { r.joinedRanks = {3}; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    std::vector<Response> rs = {ar(8), ar(8), ar(8)};
    changes[i](rs[1]);
    INFO("change " << i);
    CHECK(plan(rs, 1 << 20) == Plan{{0, 2}, {1}});
    CHECK_FALSE(canFuse(rs[0], rs[1]));
    CHECK(canFuse(rs[0], rs[2]));
  }
  std::vector<Response> same = {ar(8), ar(8)};
  same[0].joinedRanks = {1, 2};
  same[1].joinedRanks = {1, 2};
  CHECK(plan(same, 1 << 20) == Plan{{0, 1}});
}

TEST_CASE("allgathers fuse with allgathers; sizes count every rank's rows") {
  std::vector<Response> rs = {ag({2, 3, 0}, 5), ar(8), ag({1, 1, 1}, 5)};
  CHECK(payloadBytes(rs[0]) == (2 + 3 + 0) * 5 * 8);
  CHECK(payloadBytes(rs[2]) == 3 * 5 * 8);
  auto batches = planFusion(rs, 1 << 20, 3);
  REQUIRE(batches.size() == 2);
  CHECK(batches[0].indices == std::vector<size_t>{0, 2});
  CHECK(batches[0].bytes == 320);
  CHECK(batches[1].indices == std::vector<size_t>{1});
  CHECK(plan(rs, 300) == Plan{{0}, {1}, {2}});  // 200 + 120 > 300
  rs[2].reduceOp = ReduceOp::kMax;              // meaningless for allgather: ignored
  rs[2].prescale = 7;
  CHECK(plan(rs, 1 << 20) == Plan{{0, 2}, {1}});
  rs[2].device = 2;
  CHECK(plan(rs, 1 << 20) == Plan{{0}, {1}, {2}});
}

TEST_CASE("everything else is a batch of its own") {
  std::vector<Response> rs;
  for (OpType t : {OpType::kBroadcast, OpType::kAlltoall, OpType::kReducescatter, OpType::kBarrier,
                   OpType::kJoin, OpType::kAddProcessSet, OpType::kRemoveProcessSet}) {
    Response r = ar(8);
    r.type = t;
    rs.push_back(r);
    rs.push_back(r);
  }
  Response err = ar(8);
  err.kind = Response::Kind::kError;
  err.errorCode = ErrorCode::kMismatch;
  rs.push_back(err);
  rs.push_back(err);
  auto batches = planFusion(rs, 1 << 20, 2);
  REQUIRE(batches.size() == rs.size());
  for (size_t i = 0; i < rs.size(); ++i) CHECK(batches[i].indices == std::vector<size_t>{i});
  CHECK(batches[0].bytes == 8);   // broadcast moves its tensor
  CHECK(batches[2].bytes == 0);   // alltoall: rank-specific, not counted
  CHECK(batches[4].bytes == 8);   // reducescatter
  CHECK(batches[6].bytes == 0);   // barrier
  CHECK(batches[12].bytes == 0);  // error
}

TEST_CASE("grouped responses stay together when they fit") {
  // Without groups this would be {0, 1}, {2, 3}: the group of three does not fit after x.
  std::vector<Response> rs = {ar(60), ar(30, 5), ar(30, 5), ar(30, 5)};
  CHECK(plan(rs, 100) == Plan{{0}, {1, 2, 3}});
  // A group at the head pulls its later members in before anything else.
  rs = {ar(30, 2), ar(50), ar(30, 2), ar(30, 2)};
  CHECK(plan(rs, 100) == Plan{{0, 2, 3}, {1}});
  // A group that fits is taken whole from the middle of a batch.
  rs = {ar(10), ar(20, 1), ar(20, 1), ar(10)};
  CHECK(plan(rs, 100) == Plan{{0, 1, 2, 3}});
  // A group larger than the threshold is packed member by member.
  rs = {ar(60, 4), ar(60, 4), ar(60, 4)};
  CHECK(plan(rs, 130) == Plan{{0, 1}, {2}});
}

TEST_CASE("absurd sizes never overflow and never fuse") {
  Response huge = ar(8);
  huge.shape = {std::numeric_limits<int64_t>::max(), 4};
  Response negative = ar(8);
  negative.shape = {-4};
  Response bigGather = ag({std::numeric_limits<int64_t>::max(), 2}, 1);
  std::vector<Response> rs = {ar(8), huge, negative, bigGather, ar(8)};
  auto batches = planFusion(rs, std::numeric_limits<int64_t>::max(), 2);
  REQUIRE(batches.size() == 4);
  CHECK(batches[0].indices == std::vector<size_t>{0, 4});
  CHECK(batches[1].bytes == 0);
  CHECK(payloadBytes(huge) == 0);
  CHECK(payloadBytes(negative) == 0);
}

TEST_CASE("random plans cover every index once, respect the threshold and are deterministic") {
  std::mt19937 rng(3);
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<Response> rs;
    size_t n = rng() % 30;
    for (size_t i = 0; i < n; ++i) {
      Response r = (rng() % 4) ? ar(4 * (1 + rng() % 40), (rng() % 3) ? -1 : int32_t(rng() % 3))
                               : ag({int64_t(rng() % 4), int64_t(rng() % 4)}, 3);
      if (rng() % 5 == 0) r.dtype = DataType::kInt32;
      if (rng() % 7 == 0) r.type = OpType::kBroadcast;
      rs.push_back(r);
    }
    int64_t threshold = rng() % 200;
    auto a = planFusion(rs, threshold, 2);
    auto b = planFusion(rs, threshold, 2);
    std::vector<int> seen(n, 0);
    size_t lastFirst = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      REQUIRE(a[k].indices == b[k].indices);
      REQUIRE_FALSE(a[k].indices.empty());
      if (k) CHECK(a[k].indices.front() > lastFirst);
      lastFirst = a[k].indices.front();
      size_t sum = 0;
      for (size_t idx : a[k].indices) {
        ++seen.at(idx);
        sum += payloadBytes(rs[idx]);
        CHECK((idx == a[k].indices.front() || canFuse(rs[a[k].indices.front()], rs[idx])));
      }
      CHECK(sum == a[k].bytes);
      if (a[k].indices.size() > 1) CHECK(static_cast<int64_t>(sum) <= threshold);
      CHECK(std::is_sorted(a[k].indices.begin(), a[k].indices.end()));
    }
    for (size_t i = 0; i < n; ++i) CHECK(seen[i] == 1);
  }
}

TEST_CASE("tensors at or above directBytes run alone, the small ones still fuse") {
  std::vector<Response> rs;
  for (int64_t elems : {10, 1 << 20, 20, 300000, 30}) {
    Response r;
    r.type = OpType::kAllreduce;
    r.name = "t" + std::to_string(rs.size());
    r.dtype = DataType::kFloat32;
    r.shape = {elems};
    rs.push_back(r);
  }
  auto batches = planFusion(rs, 64 << 20, 2, 1 << 20);  // direct from 1 MiB (262144 floats)
  REQUIRE(batches.size() == 3);
  CHECK(batches[0].indices == std::vector<size_t>{0, 2, 4});
  CHECK(batches[1].indices == std::vector<size_t>{1});
  CHECK(batches[2].indices == std::vector<size_t>{3});
  auto fused = planFusion(rs, 64 << 20, 2, 0);  // 0: everything that fits is fused
  REQUIRE(fused.size() == 1);
}
