// Topology from the list of hostnames. Sizes are small (ranks in a job), so plain counting
// passes are clearer than building maps.
#include "bootstrap/topology.h"

#include <algorithm>
#include <cstdint>

#include "base/clock.h"

namespace kolo {

Status computeTopology(const std::vector<std::string>& hostnameOfRank, int rank, Topology* out) {
  KOLO_REQUIRE(out != nullptr, kInvalidArgument, "computeTopology: out must not be null");
  const int size = static_cast<int>(hostnameOfRank.size());
  KOLO_REQUIRE(size > 0, kInvalidArgument, "computeTopology: no ranks");
  KOLO_REQUIRE(rank >= 0 && rank < size, kInvalidArgument,
               "computeTopology: rank " + std::to_string(rank) + " is outside [0, " +
                   std::to_string(size) + ")");
  // localRankOf[r]: how many earlier ranks share r's host.
  std::vector<int> localRankOf(size, 0);
  for (int r = 0; r < size; ++r) {
    KOLO_REQUIRE(!hostnameOfRank[r].empty(), kInvalidArgument,
                 "computeTopology: rank " + std::to_string(r) + " has an empty hostname");
    for (int q = 0; q < r; ++q) {
      if (hostnameOfRank[q] == hostnameOfRank[r]) ++localRankOf[r];
    }
  }
  Topology t;
  t.rank = rank;
  t.size = size;
  t.localRank = localRankOf[rank];
  t.localSize = static_cast<int>(
      std::count(hostnameOfRank.begin(), hostnameOfRank.end(), hostnameOfRank[rank]));
  t.crossRank = 0;
  t.crossSize = 0;
  for (int r = 0; r < size; ++r) {
    if (localRankOf[r] != t.localRank) continue;
    if (r < rank) ++t.crossRank;
    ++t.crossSize;
  }
  *out = t;
  return Status::ok();
}

Status exchangeHostnames(Store& store, int rank, int size, const std::string& myHost,
                         std::chrono::milliseconds timeout, std::vector<std::string>* hosts) {
  KOLO_REQUIRE(hosts != nullptr, kInvalidArgument, "exchangeHostnames: hosts must not be null");
  KOLO_REQUIRE(size > 0 && rank >= 0 && rank < size, kInvalidArgument,
               "exchangeHostnames: rank " + std::to_string(rank) + " of size " +
                   std::to_string(size) + " is invalid");
  KOLO_REQUIRE(!myHost.empty(), kInvalidArgument, "exchangeHostnames: empty hostname");
  // Clamped so that "effectively forever" cannot overflow the clock.
  Deadline deadline = deadlineAfter(timeout);
  KOLO_RETURN_IF_ERROR(store.set("host/" + std::to_string(rank),
                                 std::vector<uint8_t>(myHost.begin(), myHost.end())));
  std::vector<std::string> result(size);
  for (int r = 0; r < size; ++r) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::vector<uint8_t> value;
    Status s = store.get("host/" + std::to_string(r), &value, std::max(left, left.zero()));
    if (!s.isOk()) {
      return Status(s.code(), "exchanging hostnames (rank " + std::to_string(rank) + " of " +
                                  std::to_string(size) + "): " + s.message());
    }
    result[r].assign(value.begin(), value.end());
  }
  *hosts = std::move(result);
  return Status::ok();
}

}  // namespace kolo
