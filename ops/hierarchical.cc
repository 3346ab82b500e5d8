// SPDX-License-Identifier: Apache-2.0
// The hierarchical allreduce (reduce-scatter form), over H hosts with L members each (N = H L),
// of S bytes:
//
//   1. local reduce-scatter: the L members of a host reduce the buffer, member i keeping shard i
//      (chunkRange(count, L, i): the first count % L shards one element longer). Over shared
//      memory that is the shm transport's native reducescatter: (L-1)/L S copied in memory per
//      rank, no network.
//   2. cross allreduce of shard i among the H members with local index i (one per host), by
//      ops::allreduce's choice for S/L bytes at H ranks (recursive doubling, halving-doubling or
//      the ring; KOLO_ALLREDUCE_ALGORITHM when set). Every rank sends about 2 (H-1)/H S/L over
//      the network: the host as a whole sends 2 (H-1)/H S, over L connections at once, and a
//      latency-bound op pays ceil(log2 H) network hops instead of ceil(log2 N).
//   3. local allgather: each member publishes its reduced shard, everyone copies all L shards
//      back into the buffer ((L-1)/L S copied in memory).
//
// The flat job, by contrast, moves every byte through TCP (or MPI), also between two ranks of
// one host, and its latency-bound steps count log2 N hops.
//
// Bits: shard i is reduced once in step 1 (the shm reducescatter folds in rank order), then
// combined in step 2 by an algorithm that gives its members identical bits, then only copied:
// every rank of the set holds the same bits. (They can differ from the flat path's in the last
// place for floating point: the summation order differs.) kAverage sums, as every algorithm here;
// the caller scales. Empty shards (count < L) are legal all the way through.
//
// Building the groups: every member calls split once per host (in host order) and once per local
// index, so the transports' split counters agree everywhere; a rank is a member of exactly one
// split of each kind. The cross lists are sorted: a split takes ascending ranks, and the order
// inside the cross group does not matter to an allreduce.
#include "ops/hierarchical.h"

#include <algorithm>
#include <cstring>

#include "transport/shm/shm_transport.h"

namespace kolo::ops {

bool hierarchicalFits(const HostLayout& layout) {
  return layout.homogeneous && layout.hosts > 1 && layout.local.size() > 1;
}

std::string hierarchyUnfit(const HostLayout& layout) {
  if (layout.hosts <= 1) return "every rank is on one host";
  if (!layout.homogeneous) return "the hosts hold different numbers of ranks";
  if (layout.local.size() <= 1) return "each host holds one rank";
  return "";
}

bool useHierarchical(const AlgorithmConfig& cfg, const HostLayout& layout, size_t bytes) {
  if (!hierarchicalFits(layout)) return false;
  switch (cfg.hierarchicalAllreduce) {
    case Hierarchical::kOn:
      return true;
    case Hierarchical::kOff:
      return false;
    case Hierarchical::kAuto:
      break;
  }
  return cfg.allreduce == Algorithm::kAuto && bytes >= kHierarchicalMinBytes;
}

Status buildHostGroups(Transport& set, const HostLayout& layout, int32_t setId, bool sharedMemory,
                       std::unique_ptr<HostGroups>* out) {
  KOLO_REQUIRE(out != nullptr, kInvalidArgument, "buildHostGroups: null output");
  KOLO_REQUIRE(hierarchicalFits(layout), kInvalidArgument,
               "buildHostGroups: the set's layout has no hierarchy (" +
                   std::to_string(layout.hosts) + " hosts, " + std::to_string(layout.local.size()) +
                   " members on this one)");
  out->reset();
  auto g = std::make_unique<HostGroups>();
  g->layout = layout;
  // Every host's member list, in host order, rebuilt from the cross lists (homogeneous).
  const size_t L = layout.local.size();
  for (int h = 0; h < layout.hosts; ++h) {
    std::vector<int> members(L);
    for (size_t i = 0; i < L; ++i) members[i] = layout.cross[i][static_cast<size_t>(h)];
    std::sort(members.begin(), members.end());
    std::unique_ptr<Transport> sub;
    KOLO_RETURN_IF_ERROR(set.split(members, setId, &sub));
    if (sub != nullptr) g->local = std::move(sub);
  }
  for (size_t i = 0; i < L; ++i) {
    std::vector<int> members = layout.cross[i];
    std::sort(members.begin(), members.end());
    std::unique_ptr<Transport> sub;
    KOLO_RETURN_IF_ERROR(set.split(members, setId, &sub));
    if (sub != nullptr) g->cross = std::move(sub);
  }
  KOLO_REQUIRE(g->local != nullptr && g->cross != nullptr, kInternal,
               "buildHostGroups: this rank is in no local or no cross group");
  g->local->setTimeout(set.timeout());
  g->cross->setTimeout(set.timeout());
  if (sharedMemory && std::strcmp(g->local->name(), "shm") != 0) {
    std::unique_ptr<Transport> shm;
    Status s = createShmTransport(&g->local, ShmOptions(), &shm);
    if (s.isOk()) {
      g->local = std::move(shm);
    } else if (s.code() != ErrorCode::kUnsupported && s.code() != ErrorCode::kIo) {
      return s;  // the split itself failed; kUnsupported / kIo: keep it (every member does)
    }
  }
  *out = std::move(g);
  return Status::ok();
}

Status hierarchicalAllreduce(HostGroups& g, const AlgorithmConfig& cfg, void* data, size_t count,
                             DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kAverage) op = ReduceOp::kSum;  // the caller divides
  const int L = g.local->size();
  const int me = g.local->rank();
  const size_t elem = sizeOf(dtype);
  std::vector<size_t> counts(static_cast<size_t>(L)), bytes(static_cast<size_t>(L));
  for (int i = 0; i < L; ++i) {
    size_t begin = 0, end = 0;
    chunkRange(count, L, i, &begin, &end);
    counts[static_cast<size_t>(i)] = end - begin;
    bytes[static_cast<size_t>(i)] = (end - begin) * elem;
  }
  const size_t mine = counts[static_cast<size_t>(me)];
  if (g.shard.size() < mine * elem) g.shard.resize(mine * elem);
  void* shard = g.shard.data();
  Status s = reducescatter(*g.local, cfg, data, shard, counts, dtype, op);
  if (s.isOk()) s = allreduce(*g.cross, cfg, shard, mine, dtype, op);
  if (s.isOk()) s = allgatherv(*g.local, cfg, shard, mine * elem, data, bytes);
  if (!s.isOk()) {
    g.local->abort(s);
    g.cross->abort(s);
  }
  return s;
}

HierarchyCache::HierarchyCache(std::vector<std::string> hostOfRank, bool sharedMemory)
    : hostOfRank_(std::move(hostOfRank)), sharedMemory_(sharedMemory) {}

const HostLayout* HierarchyCache::layout(const ProcessSet& set) {
  if (set.myIndex < 0 || hostOfRank_.empty()) return nullptr;
  auto it = layouts_.find(set.id);
  if (it != layouts_.end()) return &it->second;
  std::vector<std::string> hosts;
  for (int32_t r : set.ranks) {
    if (r < 0 || static_cast<size_t>(r) >= hostOfRank_.size()) return nullptr;
    hosts.push_back(hostOfRank_[static_cast<size_t>(r)]);
  }
  HostLayout l;
  if (!planHosts(hosts, set.myIndex, &l).isOk()) return nullptr;
  return &layouts_.emplace(set.id, std::move(l)).first->second;
}

Status HierarchyCache::groups(const ProcessSet& set, HostGroups** out) {
  *out = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = groups_.find(set.id);
    if (it != groups_.end()) {
      *out = it->second.get();
      return Status::ok();
    }
  }
  const HostLayout* l = layout(set);
  KOLO_REQUIRE(l != nullptr && set.transport != nullptr, kInternal,
               "hierarchical allreduce: process set " + std::to_string(set.id) +
                   " has no host layout on this rank");
  std::unique_ptr<HostGroups> g;
  KOLO_RETURN_IF_ERROR(buildHostGroups(*set.transport, *l, set.id, sharedMemory_, &g));
  std::lock_guard<std::mutex> lock(mu_);
  *out = g.get();
  groups_[set.id] = std::move(g);
  return Status::ok();
}

void HierarchyCache::erase(int32_t setId) {
  layouts_.erase(setId);
  std::lock_guard<std::mutex> lock(mu_);
  groups_.erase(setId);
}

void HierarchyCache::abort(const Status& cause) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, g] : groups_) {
    g->local->abort(cause);
    g->cross->abort(cause);
  }
}

}  // namespace kolo::ops
