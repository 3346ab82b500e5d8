// SPDX-License-Identifier: Apache-2.0
// Topology: Horovod's rank/local/cross numbers from the hostname of every rank, and the hostname
// exchange over a store.
#include "bootstrap/topology.h"

#include <catch2/catch.hpp>
#include <thread>

#include "rendezvous/store.h"

using namespace kolo;
using namespace std::chrono_literals;

namespace {

// Expected numbers for one rank: {localRank, localSize, crossRank, crossSize}.
struct Expect {
  int localRank, localSize, crossRank, crossSize;
};

void checkAll(const std::vector<std::string>& hosts, const std::vector<Expect>& expect) {
  REQUIRE(hosts.size() == expect.size());
  const int size = static_cast<int>(hosts.size());
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r << " on " << hosts[r]);
    Topology t;
    REQUIRE(computeTopology(hosts, r, &t).isOk());
    CHECK(t.rank == r);
    CHECK(t.size == size);
    CHECK(t.localRank == expect[r].localRank);
    CHECK(t.localSize == expect[r].localSize);
    CHECK(t.crossRank == expect[r].crossRank);
    CHECK(t.crossSize == expect[r].crossSize);
  }
}

}  // namespace

TEST_CASE("topology: 2 hosts x 2 slots, contiguous") {
  checkAll({"a", "a", "b", "b"}, {{0, 2, 0, 2}, {1, 2, 0, 2}, {0, 2, 1, 2}, {1, 2, 1, 2}});
}

TEST_CASE("topology: 2 hosts x 2 slots, interleaved") {
  checkAll({"a", "b", "a", "b"}, {{0, 2, 0, 2}, {0, 2, 1, 2}, {1, 2, 0, 2}, {1, 2, 1, 2}});
}

TEST_CASE("topology: uneven hosts a:3 b:1") {
  checkAll({"a", "a", "a", "b"}, {{0, 3, 0, 2}, {1, 3, 0, 1}, {2, 3, 0, 1}, {0, 1, 1, 2}});
}

TEST_CASE("topology: uneven hosts with the small host first") {
  checkAll({"b", "a", "a", "a"}, {{0, 1, 0, 2}, {0, 3, 1, 2}, {1, 3, 0, 1}, {2, 3, 0, 1}});
}

TEST_CASE("topology: single host") {
  checkAll({"h", "h", "h", "h", "h"},
           {{0, 5, 0, 1}, {1, 5, 0, 1}, {2, 5, 0, 1}, {3, 5, 0, 1}, {4, 5, 0, 1}});
}

TEST_CASE("topology: single rank") { checkAll({"solo"}, {{0, 1, 0, 1}}); }

TEST_CASE("topology: one rank per host") {
  checkAll({"n0", "n1", "n2"}, {{0, 1, 0, 3}, {0, 1, 1, 3}, {0, 1, 2, 3}});
}

TEST_CASE("topology: 3 hosts x 2 slots with cross ranks ordered by global rank") {
  // Placement a,b,b,c,a,c: local ranks 0,0,1,0,1,1. Cross group 0 = {0,1,3}, group 1 = {2,4,5}.
  checkAll({"a", "b", "b", "c", "a", "c"},
           {{0, 2, 0, 3}, {0, 2, 1, 3}, {1, 2, 0, 3}, {0, 2, 2, 3}, {1, 2, 1, 3}, {1, 2, 2, 3}});
}

TEST_CASE("topology: hostnames are compared exactly") {
  checkAll({"node1", "node1.cluster", "node1"}, {{0, 2, 0, 2}, {0, 1, 1, 2}, {1, 2, 0, 1}});
}

TEST_CASE("topology: bad input is rejected") {
  Topology t;
  CHECK(computeTopology({}, 0, &t).code() == ErrorCode::kInvalidArgument);
  CHECK(computeTopology({"a", "b"}, 2, &t).code() == ErrorCode::kInvalidArgument);
  CHECK(computeTopology({"a", "b"}, -1, &t).code() == ErrorCode::kInvalidArgument);
  CHECK(computeTopology({"a"}, 0, nullptr).code() == ErrorCode::kInvalidArgument);
  Status s = computeTopology({"a", ""}, 0, &t);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("rank 1"));
}

TEST_CASE("exchangeHostnames: every thread rank learns every hostname") {
  const int size = 4;
  auto base = makeMemoryStore();
  auto store = makePrefixStore(base, "job7/");
  const std::vector<std::string> mine = {"x", "y", "x", "y"};
  std::vector<std::vector<std::string>> got(size);
  std::vector<Status> status(size);
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 * r));
      status[r] = exchangeHostnames(*store, r, size, mine[r], 10s, &got[r]);
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r);
    REQUIRE(status[r].isOk());
    CHECK(got[r] == mine);
    Topology t;
    REQUIRE(computeTopology(got[r], r, &t).isOk());
    CHECK(t.localRank == r / 2);
    CHECK(t.crossRank == r % 2);
  }
  std::vector<uint8_t> v;
  REQUIRE(base->get("job7/host/3", &v, 0ms).isOk());
  CHECK(std::string(v.begin(), v.end()) == "y");
}

TEST_CASE("exchangeHostnames: a missing rank times out naming its key") {
  auto store = makeMemoryStore();
  std::vector<std::string> hosts;
  auto start = std::chrono::steady_clock::now();
  Status s = exchangeHostnames(*store, 0, 2, "only-me", 200ms, &hosts);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(s.code() == ErrorCode::kTimeout);
  CHECK_THAT(s.message(), Catch::Contains("host/1"));
  CHECK(waited >= 0.19);
  CHECK(waited < 3.0);
  CHECK(hosts.empty());
  CHECK(exchangeHostnames(*store, 2, 2, "h", 1s, &hosts).code() == ErrorCode::kInvalidArgument);
  CHECK(exchangeHostnames(*store, 0, 1, "", 1s, &hosts).code() == ErrorCode::kInvalidArgument);
}
