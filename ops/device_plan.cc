// SPDX-License-Identifier: Apache-2.0
// Host-side planning for the device path (contract in device_plan.h). The exchanges force the
// ring algorithm: they run over whatever CPU transport the set has, and must not depend on a
// native collective's quirks for a few hundred bytes.
#include "ops/device_plan.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "ops/collectives.h"

namespace kolo::ops {

Status planHosts(const std::vector<std::string>& hostOf, int me, HostLayout* out) {
  KOLO_REQUIRE(!hostOf.empty(), kInvalidArgument, "planHosts: no members");
  KOLO_REQUIRE(me >= 0 && me < static_cast<int>(hostOf.size()), kInvalidArgument,
               "planHosts: member " + std::to_string(me) + " out of range");
  std::map<std::string, int> hostId;
  std::vector<std::vector<int>> members;  // per host, ascending
  for (size_t i = 0; i < hostOf.size(); ++i) {
    KOLO_REQUIRE(!hostOf[i].empty(), kInvalidArgument,
                 "planHosts: member " + std::to_string(i) + " has an empty host name");
    auto it = hostId.find(hostOf[i]);
    if (it == hostId.end()) {
      it = hostId.emplace(hostOf[i], static_cast<int>(members.size())).first;
      members.emplace_back();
    }
    members[it->second].push_back(static_cast<int>(i));
  }
  HostLayout layout;
  layout.hosts = static_cast<int>(members.size());
  layout.hostIndex = hostId[hostOf[me]];
  layout.local = members[layout.hostIndex];
  layout.localIndex = static_cast<int>(std::find(layout.local.begin(), layout.local.end(), me) -
                                       layout.local.begin());
  for (const auto& m : members) layout.homogeneous &= m.size() == layout.local.size();
  if (layout.homogeneous) {
    layout.cross.assign(layout.local.size(), {});
    for (const auto& m : members) {
      for (size_t i = 0; i < m.size(); ++i) layout.cross[i].push_back(m[i]);
    }
  }
  layout.members = std::move(members);
  *out = std::move(layout);
  return Status::ok();
}

size_t alignedSlots(const std::vector<size_t>& counts, size_t elemSize, size_t alignBytes,
                    std::vector<size_t>* offsets) {
  const size_t align = std::max<size_t>(1, alignBytes / std::max<size_t>(1, elemSize));
  offsets->assign(counts.size(), 0);
  size_t end = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const size_t start = (end + align - 1) / align * align;
    (*offsets)[i] = start;
    end = start + counts[i];
  }
  return end;
}

size_t paddedCount(size_t count, int parts) {
  const size_t p = parts > 0 ? static_cast<size_t>(parts) : 1;
  return (count + p - 1) / p * p;
}

Status gatherStrings(Transport& t, const std::string& mine, std::vector<std::string>* all) {
  constexpr size_t kSlot = 256;
  const int n = t.size();
  std::vector<char> send(kSlot, 0), recv(kSlot * static_cast<size_t>(n), 0);
  std::memcpy(send.data(), mine.data(), std::min(mine.size(), kSlot - 1));
  AlgorithmConfig ring;
  ring.allgather = Algorithm::kRing;
  KOLO_RETURN_IF_ERROR(allgatherv(t, ring, send.data(), kSlot, recv.data(),
                                  std::vector<size_t>(static_cast<size_t>(n), kSlot)));
  all->clear();
  for (int r = 0; r < n; ++r) {
    const char* slot = recv.data() + static_cast<size_t>(r) * kSlot;
    all->emplace_back(slot, strnlen(slot, kSlot));
  }
  return Status::ok();
}

Status shareFromRoots(Transport& t, Store* store, const std::string& keyPrefix,
                      const std::vector<uint8_t>& mine, size_t bytes, int root,
                      std::chrono::milliseconds timeout, std::vector<uint8_t>* out) {
  const int me = t.rank();
  const int n = t.size();
  const bool isRoot = !mine.empty();
  KOLO_REQUIRE(
      root >= 0 && root < n, kInvalidArgument,
      "shareFromRoots: root " + std::to_string(root) + " outside [0, " + std::to_string(n) + ")");
  KOLO_REQUIRE(!isRoot || mine.size() == bytes, kInvalidArgument,
               "shareFromRoots: a root must pass exactly " + std::to_string(bytes) + " bytes");
  KOLO_REQUIRE(isRoot == (root == me), kInvalidArgument,
               "shareFromRoots: a member is a root exactly when it names itself");
  if (store != nullptr) {
    if (isRoot) {
      KOLO_RETURN_IF_ERROR(store->set(keyPrefix + std::to_string(me), mine));
      *out = mine;
      return Status::ok();
    }
    KOLO_RETURN_IF_ERROR(store->get(keyPrefix + std::to_string(root), out, timeout));
    KOLO_REQUIRE(out->size() == bytes, kInvalidArgument,
                 "shareFromRoots: key '" + keyPrefix + std::to_string(root) + "' holds " +
                     std::to_string(out->size()) + " bytes, expected " + std::to_string(bytes));
    return Status::ok();
  }
  std::vector<uint8_t> send(bytes, 0), recv(bytes * static_cast<size_t>(n), 0);
  if (isRoot) std::memcpy(send.data(), mine.data(), bytes);
  AlgorithmConfig ring;
  ring.allgather = Algorithm::kRing;
  KOLO_RETURN_IF_ERROR(allgatherv(t, ring, send.data(), bytes, recv.data(),
                                  std::vector<size_t>(static_cast<size_t>(n), bytes)));
  const uint8_t* slot = recv.data() + static_cast<size_t>(root) * bytes;
  out->assign(slot, slot + bytes);
  return Status::ok();
}

}  // namespace kolo::ops
