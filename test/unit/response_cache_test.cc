// SPDX-License-Identifier: Apache-2.0
#include "core/response_cache.h"

#include <catch2/catch.hpp>
#include <functional>
#include <random>

using namespace kolo;
using Lookup = ResponseCache::Lookup;

namespace {

Request req(const std::string& name, OpType type = OpType::kAllreduce) {
  Request r;
  r.rank = 1;
  r.type = type;
  r.name = name;
  r.shape = {4, 2};
  return r;
}

Response resp(const Request& q) {
  Response r;
  r.type = q.type;
  r.name = q.name;
  r.dtype = q.dtype;
  r.shape = q.shape;
  return r;
}

void put(ResponseCache& c, const Request& q) { c.put(resp(q), q); }

}  // namespace

TEST_CASE("lookup: miss, hit, and changed for every negotiated parameter") {
  ResponseCache c(8);
  Request q = req("w");
  q.groupId = 3;
  q.groupSize = 2;
  uint32_t bit = 99;
  CHECK(c.lookup(q, &bit) == Lookup::kMiss);
  CHECK(bit == 99);
  put(c, q);
  CHECK(c.size() == 1);
  CHECK(c.lookup(q, &bit) == Lookup::kHit);
  CHECK(bit == 0);
  CHECK(c.response(0).name == "w");
  CHECK(c.request(0).groupId == 3);
  CHECK(std::string(toString(Lookup::kChanged)) == "changed");

  Request same = q;
  same.groupId = 17;  // a per-rank counter: not a parameter
  CHECK(c.lookup(same, nullptr) == Lookup::kHit);

  std::vector<std::function<void(Request&)>> changes = {
      [](Request& r) { r.type = OpType::kBroadcast; },
      [](Request& r) { r.dtype = DataType::kInt64; },
      [](Request& r) {
        r.shape = {4, 3};
      },
      [](Request& r) {
        r.shape = {5, 2};
      },
      [](Request& r) { r.reduceOp = ReduceOp::kMax; },
      [](Request& r) { r.prescale = 0.5; },
      [](Request& r) { r.postscale = 0.5; },
      [](Request& r) { r.root = 1; },
      [](Request& r) { r.device = 0; },
      [](Request& r) {
        r.splits = {1, 3};
      },
      [](Request& r) { r.groupSize = 3; },
      // A refusal with the cached values must not run as the cached op (it has no data).
      [](Request& r) { r.refusal = "a NULL buffer"; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    Request changed = q;
    changes[i](changed);
    bit = 99;
    INFO("change " << i);
    CHECK(c.lookup(changed, &bit) == Lookup::kChanged);
    CHECK(bit == 0);
  }

  // The process set is part of the op's key: the same name in another set is another op.
  Request other = q;
  other.processSet = 2;
  bit = 99;
  CHECK(c.lookup(other, &bit) == Lookup::kMiss);
  CHECK(bit == 99);
}

TEST_CASE("allgather and alltoall change when this rank's dim 0 or splits change") {
  ResponseCache c(4);
  Request g = req("g", OpType::kAllgather);
  Response gr = resp(g);
  gr.rankDim0 = {3, 4, 5};
  c.put(gr, g);
  Request a = req("a", OpType::kAlltoall);
  a.splits = {1, 3};
  Response ar = resp(a);
  ar.splitMatrix = {2, 2, 1, 3};
  c.put(ar, a);
  CHECK(c.lookup(g, nullptr) == Lookup::kHit);
  CHECK(c.lookup(a, nullptr) == Lookup::kHit);
  g.shape[0] = 7;
  CHECK(c.lookup(g, nullptr) == Lookup::kChanged);
  a.splits = {2, 2};
  CHECK(c.lookup(a, nullptr) == Lookup::kChanged);
  uint32_t bit = 0;
  REQUIRE(c.lookup(req("g"), &bit) == Lookup::kChanged);  // different op type too
  CHECK(c.response(bit).rankDim0 == std::vector<int64_t>{3, 4, 5});
}

TEST_CASE("only OK data responses without joined ranks are cached") {
  ResponseCache c(8);
  for (OpType t : {OpType::kAllreduce, OpType::kAllgather, OpType::kBroadcast, OpType::kAlltoall,
                   OpType::kReducescatter}) {
    Request q = req(std::string("ok-") + toString(t), t);
    put(c, q);
    CHECK(c.lookup(q, nullptr) == Lookup::kHit);
  }
  CHECK(c.size() == 5);
  for (OpType t : {OpType::kBarrier, OpType::kJoin, OpType::kAddProcessSet, OpType::kRemoveProcessSet}) {
    put(c, req(std::string("no-") + toString(t), t));
  }
  Request e = req("error");
  Response er = resp(e);
  er.kind = Response::Kind::kError;
  er.errorCode = ErrorCode::kMismatch;
  c.put(er, e);
  Request j = req("joined");
  Response jr = resp(j);
  jr.joinedRanks = {2};
  c.put(jr, j);
  CHECK(c.size() == 5);
  CHECK(c.lookup(e, nullptr) == Lookup::kMiss);
  CHECK(c.lookup(j, nullptr) == Lookup::kMiss);
}

TEST_CASE("capacity 0 disables the cache") {
  ResponseCache c(0);
  put(c, req("x"));
  CHECK(c.size() == 0);
  CHECK(c.capacity() == 0);
  CHECK(c.lookup(req("x"), nullptr) == Lookup::kMiss);
  CHECK(c.bitsInUse().empty());
}

TEST_CASE("eviction takes the least recently used entry and reuses its bit") {
  ResponseCache c(3);
  put(c, req("a"));
  put(c, req("b"));
  put(c, req("c"));
  CHECK(c.bitsInUse() == std::vector<uint32_t>{0, 1, 2});
  c.touch(0);        // a is now the most recent; b is the LRU
  put(c, req("d"));  // evicts b, takes bit 1
  uint32_t bit = 9;
  CHECK(c.lookup(req("b"), &bit) == Lookup::kMiss);
  REQUIRE(c.lookup(req("d"), &bit) == Lookup::kHit);
  CHECK(bit == 1);
  CHECK(c.size() == 3);

  // Refreshing keeps the bit and makes the entry most recent: c is now the LRU.
  Request a2 = req("a");
  a2.shape = {8};
  put(c, a2);
  REQUIRE(c.lookup(a2, &bit) == Lookup::kHit);
  CHECK(bit == 0);
  CHECK(c.response(0).shape == std::vector<int64_t>{8});
  put(c, req("e"));
  CHECK(c.lookup(req("c"), nullptr) == Lookup::kMiss);
  REQUIRE(c.lookup(req("e"), &bit) == Lookup::kHit);
  CHECK(bit == 2);

  // Erase frees a bit; the lowest free bit is taken first.
  c.erase(OpKey{0, "a"});
  c.erase(OpKey{0, "e"});
  c.erase(OpKey{0, "missing"});
  CHECK(c.bitsInUse() == std::vector<uint32_t>{1});
  CHECK(c.response(0).name.empty());  // unused bit: default value
  c.touch(0);                         // ignored
  c.touch(12345);                     // ignored
  put(c, req("f"));
  REQUIRE(c.lookup(req("f"), &bit) == Lookup::kHit);
  CHECK(bit == 0);
  put(c, req("g"));
  REQUIRE(c.lookup(req("g"), &bit) == Lookup::kHit);
  CHECK(bit == 2);
  CHECK(c.bitsInUse() == std::vector<uint32_t>{0, 1, 2});
}

TEST_CASE("two caches fed the same calls end with identical bits") {
  std::mt19937 rng(7);
  ResponseCache a(16), b(16);
  for (int step = 0; step < 5000; ++step) {
    std::string name = "t" + std::to_string(rng() % 40);
    int action = static_cast<int>(rng() % 10);
    Request q = req(name);
    q.shape = {static_cast<int64_t>(rng() % 3)};
    if (action < 6) {
      put(a, q);
      put(b, q);
    } else if (action < 9) {
      uint32_t bit = static_cast<uint32_t>(rng() % 20);
      a.touch(bit);
      b.touch(bit);
    } else {
      a.erase(OpKey{0, name});
      b.erase(OpKey{0, name});
    }
    REQUIRE(a.size() <= 16);
  }
  REQUIRE(a.bitsInUse() == b.bitsInUse());
  CHECK(a.size() == 16);
  for (uint32_t bit : a.bitsInUse()) {
    CHECK(a.response(bit).name == b.response(bit).name);
    CHECK(a.request(bit).shape == b.request(bit).shape);
    uint32_t found = 99;
    CHECK(a.lookup(a.request(bit), &found) == Lookup::kHit);
    CHECK(found == bit);
  }
}

TEST_CASE("version moves with put and erase, not with touch or ignored calls") {
  ResponseCache c(2);
  const uint64_t v0 = c.version();
  put(c, req("a"));
  const uint64_t v1 = c.version();
  CHECK(v1 != v0);
  uint32_t bit = 0;
  REQUIRE(c.lookup(req("a"), &bit) == Lookup::kHit);
  c.touch(bit);
  CHECK(c.version() == v1);
  put(c, req("join", OpType::kJoin));  // not cacheable: ignored
  CHECK(c.version() == v1);
  c.erase(OpKey{0, "absent"});
  CHECK(c.version() == v1);
  put(c, req("a"));  // refresh in place
  const uint64_t v2 = c.version();
  CHECK(v2 != v1);
  c.erase(OpKey{0, "a"});
  CHECK(c.version() != v2);
  ResponseCache off(0);
  put(off, req("a"));
  CHECK(off.version() == 0);
}
