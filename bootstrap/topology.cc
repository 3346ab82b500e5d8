// SPDX-License-Identifier: Apache-2.0
// Topology from the list of hostnames: Horovod's local and cross numbering read off the host
// layout (ops::planHosts) that the hierarchical algorithms use too.
#include "bootstrap/topology.h"

#include <algorithm>
#include <cstdint>

#include "base/clock.h"
#include "ops/device_plan.h"

namespace kolo {

Status computeTopology(const std::vector<std::string>& hostnameOfRank, int rank, Topology* out) {
  KOLO_REQUIRE(out != nullptr, kInvalidArgument, "computeTopology: out must not be null");
  const int size = static_cast<int>(hostnameOfRank.size());
  KOLO_REQUIRE(size > 0, kInvalidArgument, "computeTopology: no ranks");
  KOLO_REQUIRE(rank >= 0 && rank < size, kInvalidArgument,
               "computeTopology: rank " + std::to_string(rank) + " is outside [0, " +
                   std::to_string(size) + ")");
  for (int r = 0; r < size; ++r) {
    KOLO_REQUIRE(!hostnameOfRank[r].empty(), kInvalidArgument,
                 "computeTopology: rank " + std::to_string(r) + " has an empty hostname");
  }
  ops::HostLayout layout;
  KOLO_RETURN_IF_ERROR(ops::planHosts(hostnameOfRank, rank, &layout));
  Topology t;
  t.rank = rank;
  t.size = size;
  t.localRank = layout.localIndex;
  t.localSize = static_cast<int>(layout.local.size());
  // The cross ranks: every host's member at this rank's local index, where the host has one.
  t.crossRank = 0;
  t.crossSize = 0;
  for (const std::vector<int>& host : layout.members) {
    if (static_cast<int>(host.size()) <= t.localRank) continue;
    if (host[static_cast<size_t>(t.localRank)] < rank) ++t.crossRank;
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
