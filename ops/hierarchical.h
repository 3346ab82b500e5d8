// SPDX-License-Identifier: Apache-2.0
// The hierarchical allreduce of host tensors: shared memory inside a host, the network only
// between hosts, and each rank carrying 1/local_size of the cross-host bytes.
//
// A process set whose hosts each hold the same number L > 1 of its members, on H > 1 hosts, is
// cut into two kinds of sub-groups (HostGroups): the L members of this host ("local": the
// shared-memory transport over a split of the set's transport, or that split itself when the
// segment cannot be mapped), and the H members that sit at this rank's position on every host
// ("cross": a split of the set's transport, TCP or MPI). hierarchicalAllreduce (hierarchical.cc
// explains the steps and the bytes) then runs a local reduce-scatter, a cross allreduce of this
// rank's shard, and a local allgather.
//
// Topologies it does not fit -- one host, one member per host, or hosts with different member
// counts -- run the flat allreduce (select.cc), whatever KOLO_HIERARCHICAL_ALLREDUCE says.
//
// Ownership and threading: the HierarchyCache is owned by the coordinator and used on its thread
// only, except abort(), which any thread may call. The groups of a set are built the first time
// that set's allreduce takes the hierarchical path: a collective over the set's members, which
// run the same batches in the same order (the rule below depends only on values every member
// has: the config, the layout and the batch's size). Building waits at most the set transport's
// timeout per split; errors are the transports' (kTimeout / kPeerLost naming the rank).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ops/process_set.h"
#include "base/status.h"
#include "ops/collectives.h"
#include "ops/device_plan.h"
#include "transport/transport.h"

namespace kolo::ops {

// Allreduces of at least this many bytes take the hierarchical path under
// KOLO_HIERARCHICAL_ALLREDUCE=auto. Zero: at 2 hosts x 2 ranks (Gloo TCP between hosts) it was
// 1.3-6x faster than the flat choice at every size from 4 B to 64 MiB (bench/RESULTS.md): the cross-host hops are the expensive ones, so it pays even for tiny ops.
constexpr size_t kHierarchicalMinBytes = 0;

// Whether the layout allows the reduce-scatter form: homogeneous, more than one host, more than
// one member per host.
bool hierarchicalFits(const HostLayout& layout);

// Whether an allreduce of `bytes` of payload runs hierarchically on a set with this layout:
// never where it does not fit; kOn: always; kOff: never; kAuto: when KOLO_ALLREDUCE_ALGORITHM
// is auto (a named algorithm means "this algorithm over the whole set") and
// bytes >= kHierarchicalMinBytes.
bool useHierarchical(const AlgorithmConfig& cfg, const HostLayout& layout, size_t bytes);

struct HostGroups {
  HostLayout layout;
  std::unique_ptr<Transport> local;  // this host's members, in set order
  std::unique_ptr<Transport> cross;  // member layout.localIndex of every host, in set order
  std::vector<unsigned char> shard;  // scratch for this rank's shard (grow-only)
};

// Why `layout` cannot run the hierarchical allreduce ("" when it can): one host, one member on
// this host, or hosts of different sizes. For the warning when KOLO_HIERARCHICAL_ALLREDUCE=1
// asks for it anyway (the allreduce then runs flat, as Horovod's falls back).
std::string hierarchyUnfit(const HostLayout& layout);

// Builds the groups of `set` (a transport over the set's members) for `layout` (planHosts over
// the members' host names). Collective over every member of `set`; `setId` keeps rendezvous
// keys apart. With `sharedMemory` (KOLO_SHM is not off) the local group tries shared memory
// first (every member of a host gets the same answer); the cross group is a plain split.
Status buildHostGroups(Transport& set, const HostLayout& layout, int32_t setId, bool sharedMemory,
                       std::unique_ptr<HostGroups>* out);

// In-place allreduce of `count` elements over the groups (kAverage sums: the caller scales).
// Every member of the set calls it with the same count, dtype and op. Every rank ends with the
// same bits. On failure both groups are aborted with the error (so the host's other members
// fail promptly with it instead of waiting for this rank), and it is returned.
Status hierarchicalAllreduce(HostGroups& g, const AlgorithmConfig& cfg, void* data, size_t count,
                             DataType dtype, ReduceOp op);

// The groups of every process set, built on first use.
class HierarchyCache {
 public:
  // hostOfRank[r]: global rank r's host name (empty: every rank on one host; never hierarchical).
  // sharedMemory: as buildHostGroups.
  HierarchyCache(std::vector<std::string> hostOfRank, bool sharedMemory);

  // The layout of `set`'s members (computed once per set). Null when the host names are unknown.
  const HostLayout* layout(const ProcessSet& set);
  // The groups of `set` (a member), built on the first call. Collective over the set's members.
  Status groups(const ProcessSet& set, HostGroups** out);
  // Drops a removed set's groups.
  void erase(int32_t setId);
  // Aborts every built group's transports (any thread).
  void abort(const Status& cause);

 private:
  std::vector<std::string> hostOfRank_;
  bool sharedMemory_;
  std::map<int32_t, HostLayout> layouts_;  // coordinator thread only
  mutable std::mutex mu_;                  // guards groups_ (abort may come from any thread)
  std::map<int32_t, std::unique_ptr<HostGroups>> groups_;
};

}  // namespace kolo::ops
