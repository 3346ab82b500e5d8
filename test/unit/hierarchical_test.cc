// SPDX-License-Identifier: Apache-2.0
// ops/hierarchical over loopback thread ranks: KOLO_HIERARCHICAL_ALLREDUCE parsing, the rule
// (which layouts fit, auto / on / off, a named KOLO_ALLREDUCE_ALGORITHM), and the allreduce
// itself on host groups built with and without shared memory, for placements whose cross lists
// are not in rank order, counts of 0, 1, fewer than the local size and large; integer sums
// exact, float sums the same bits on every rank.
#include "ops/hierarchical.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "base/config.h"
#include "test/unit/loopback_ranks.h"

using namespace kolo;
using namespace kolo::ops;

namespace {

HostLayout layoutOf(const std::vector<std::string>& hosts, int me) {
  HostLayout l;
  REQUIRE(planHosts(hosts, me, &l).isOk());
  return l;
}

Status configFrom(const char* value, Config* c) {
  std::map<std::string, std::string> env;
  if (value != nullptr) env["KOLO_HIERARCHICAL_ALLREDUCE"] = value;
  return Config::fromEnvironment(c, [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace

TEST_CASE("KOLO_HIERARCHICAL_ALLREDUCE: unset is auto, 1/0 force it (CUDA: only 1)") {
  Config c;
  REQUIRE(configFrom(nullptr, &c).isOk());
  CHECK(c.algorithms.hierarchicalAllreduce == Hierarchical::kAuto);
  CHECK_FALSE(c.hierarchicalAllreduce);
  REQUIRE(configFrom("1", &c).isOk());
  CHECK(c.algorithms.hierarchicalAllreduce == Hierarchical::kOn);
  CHECK(c.hierarchicalAllreduce);
  REQUIRE(configFrom("off", &c).isOk());
  CHECK(c.algorithms.hierarchicalAllreduce == Hierarchical::kOff);
  CHECK_FALSE(c.hierarchicalAllreduce);
  REQUIRE(configFrom("AUTO", &c).isOk());
  CHECK(c.algorithms.hierarchicalAllreduce == Hierarchical::kAuto);
  Status bad = configFrom("sometimes", &c);
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.message().find("KOLO_HIERARCHICAL_ALLREDUCE") != std::string::npos);
  CHECK(c.toString().find("KOLO_HIERARCHICAL_ALLREDUCE=auto") != std::string::npos);
}

TEST_CASE("hierarchical rule: only homogeneous multi-host layouts; auto, on, off") {
  const HostLayout twoByTwo = layoutOf({"a", "a", "b", "b"}, 1);
  const HostLayout oneHost = layoutOf({"a", "a", "a"}, 0);
  const HostLayout onePerHost = layoutOf({"a", "b", "c"}, 0);
  const HostLayout uneven = layoutOf({"a", "a", "a", "b"}, 3);
  CHECK(hierarchicalFits(twoByTwo));
  CHECK_FALSE(hierarchicalFits(oneHost));
  CHECK_FALSE(hierarchicalFits(onePerHost));
  CHECK_FALSE(hierarchicalFits(uneven));
  // The reason the coordinator warns with when KOLO_HIERARCHICAL_ALLREDUCE=1 cannot be honoured.
  CHECK(hierarchyUnfit(twoByTwo).empty());
  CHECK(hierarchyUnfit(oneHost) == "every rank is on one host");
  CHECK(hierarchyUnfit(onePerHost) == "each host holds one rank");
  CHECK(hierarchyUnfit(uneven) == "the hosts hold different numbers of ranks");
  AlgorithmConfig cfg;
  for (size_t bytes : {size_t{4}, size_t{1} << 26}) {
    CHECK(useHierarchical(cfg, twoByTwo, bytes) == (bytes >= kHierarchicalMinBytes));
  }
  CHECK_FALSE(useHierarchical(cfg, uneven, 1 << 20));
  cfg.allreduce = Algorithm::kRing;  // a named algorithm: over the whole set, unless forced
  CHECK_FALSE(useHierarchical(cfg, twoByTwo, 1 << 20));
  cfg.hierarchicalAllreduce = Hierarchical::kOn;
  CHECK(useHierarchical(cfg, twoByTwo, 1 << 20));
  CHECK_FALSE(useHierarchical(cfg, uneven, 1 << 20));  // forced, but it does not fit
  cfg.allreduce = Algorithm::kAuto;
  cfg.hierarchicalAllreduce = Hierarchical::kOff;
  CHECK_FALSE(useHierarchical(cfg, twoByTwo, 1 << 20));
}

TEST_CASE("hierarchical allreduce over loopback: exact integers, same float bits everywhere") {
  struct Placement {
    std::vector<std::string> hosts;
    bool shm;
  };
  // [a b b a]: the cross group of local index 1 is {3, 2}, not in rank order.
  const Placement placements[] = {{{"a", "b", "b", "a"}, true},
                                  {{"a", "a", "b", "b", "c", "c"}, false},
                                  {{"a", "b", "c", "a", "b", "c"}, true}};
  for (const Placement& p : placements) {
    const int n = static_cast<int>(p.hosts.size());
    std::vector<std::vector<float>> floats(static_cast<size_t>(n));
    const size_t counts[] = {0, 1, 2, 3, 1001, 70000};
    testing::requireAllOk(testing::runRanks(n, [&](Transport& t, int r) -> Status {
      HostLayout l;
      KOLO_RETURN_IF_ERROR(planHosts(p.hosts, r, &l));
      std::unique_ptr<HostGroups> g;
      KOLO_RETURN_IF_ERROR(buildHostGroups(t, l, 7, p.shm, &g));
      if ((std::string(g->local->name()) == "shm") != p.shm) {
        return Status(ErrorCode::kInternal, "the local group is not what was asked for");
      }
      AlgorithmConfig cfg;
      for (size_t count : counts) {
        std::vector<int32_t> v(count);
        for (size_t i = 0; i < count; ++i) v[i] = static_cast<int32_t>(i % 7) * (r + 1);
        KOLO_RETURN_IF_ERROR(
            hierarchicalAllreduce(*g, cfg, v.data(), count, DataType::kInt32, ReduceOp::kSum));
        const int32_t ranksSum = n * (n + 1) / 2;
        for (size_t i = 0; i < count; ++i) {
          if (v[i] != static_cast<int32_t>(i % 7) * ranksSum) {
            return Status(ErrorCode::kInternal, "count " + std::to_string(count) + ": element " +
                                                    std::to_string(i) + " is " +
                                                    std::to_string(v[i]));
          }
        }
        std::vector<int32_t> m(count);
        for (size_t i = 0; i < count; ++i) m[i] = static_cast<int32_t>((i + r) % 5);
        KOLO_RETURN_IF_ERROR(
            hierarchicalAllreduce(*g, cfg, m.data(), count, DataType::kInt32, ReduceOp::kMax));
        for (size_t i = 0; i < count; ++i) {
          if (m[i] != 4 && n >= 5) return Status(ErrorCode::kInternal, "max is wrong");
        }
      }
      std::mt19937 gen(99u + static_cast<unsigned>(r));
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::vector<float> f(100003);
      for (float& x : f) x = dist(gen);
      KOLO_RETURN_IF_ERROR(hierarchicalAllreduce(*g, cfg, f.data(), f.size(), DataType::kFloat32,
                                                 ReduceOp::kAverage));
      floats[static_cast<size_t>(r)] = std::move(f);
      return Status::ok();
    }));
    for (int r = 1; r < n; ++r) {
      INFO("rank " << r << " of placement " << p.hosts.size());
      REQUIRE(std::memcmp(floats[0].data(), floats[static_cast<size_t>(r)].data(),
                          floats[0].size() * sizeof(float)) == 0);
    }
  }
}
