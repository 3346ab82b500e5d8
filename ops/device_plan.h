// SPDX-License-Identifier: Apache-2.0
// Host-side planning shared by the host and device data paths, free of CUDA so that it builds
// and is tested everywhere (the name is historical):
//  - where a process set's members sit (HostLayout, planHosts): the Topology's local and cross
//    numbers (bootstrap/topology.cc), the hierarchical allreduce on host memory
//    (ops/hierarchical.cc) and over NCCL;
//  - the slot helpers of a fused batch (alignedSlots, paddedCount), for ops::planBatch;
//  - two small exchanges over a set's CPU transport or the rendezvous Store: gatherStrings
//    (every member's string, such as host names) and shareFromRoots (root-made ids, such as
//    NCCL's unique ids).
//
// Thread safety: pure functions, except the exchanges, which are collective over `t` (every
// member calls them in the same order: on the coordinator thread, or in bootstrap()) and
// bounded by t's timeout or the given one.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "rendezvous/store.h"
#include "transport/transport.h"

namespace kolo::ops {

// Where the members of a set sit. Members are set indices (0 .. n-1); hosts are numbered in
// order of their first member.
struct HostLayout {
  int hosts = 1;
  int hostIndex = 0;        // this member's host
  std::vector<int> local;   // the members on this host, ascending
  int localIndex = 0;       // this member's position in `local`
  bool homogeneous = true;  // every host has the same number of members
  // The members of every host, in host order, each ascending (members[hostIndex] == local).
  std::vector<std::vector<int>> members;
  // Only when homogeneous: cross[i] lists the i-th member of every host, in host order. The
  // cross allreduce of the hierarchical algorithm runs among cross[localIndex].
  std::vector<std::vector<int>> cross;
};

// hostOf[i] is member i's host name (equal exactly for members on one host). Errors:
// kInvalidArgument for an empty list, an empty name or `me` out of range.
Status planHosts(const std::vector<std::string>& hostOf, int me, HostLayout* out);

// Slot offsets (elements) of a fused batch where every tensor starts at a multiple of
// `alignBytes` (a multiple of elemSize), so each copy can use wide words. Returns the total
// element count (the end of the last slot).
size_t alignedSlots(const std::vector<size_t>& counts, size_t elemSize, size_t alignBytes,
                    std::vector<size_t>* offsets);

// `count` rounded up to a multiple of `parts` (the reduce-scatter shards of the hierarchical
// allreduce must be equal).
size_t paddedCount(size_t count, int parts);

// Every member's string (at most 255 bytes each; longer ones are cut), in member order.
// Collective over t (ring allgather).
Status gatherStrings(Transport& t, const std::string& mine, std::vector<std::string>* all);

// Hands opaque bytes made by "roots" to the members that need them. Every member of t calls
// it; a root passes its bytes in `mine` (exactly `bytes` long), the others an empty vector;
// each member names the member whose bytes it wants in `root` (itself when it is a root) and
// receives them in *out. With a store, a root publishes "<keyPrefix><member index>" and the
// others read their root's key (waiting up to `timeout`); without one (store == nullptr), one
// ring allgather of `bytes` per member over t carries everything. Errors: kInvalidArgument for
// inconsistent arguments, kTimeout or the transport's errors.
Status shareFromRoots(Transport& t, Store* store, const std::string& keyPrefix,
                      const std::vector<uint8_t>& mine, size_t bytes, int root,
                      std::chrono::milliseconds timeout, std::vector<uint8_t>* out);

}  // namespace kolo::ops
