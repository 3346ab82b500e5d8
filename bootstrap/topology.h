// SPDX-License-Identifier: Apache-2.0
// Topology: where a rank sits among the processes of a job, with Horovod's definitions.
//
// - local ranks: the ranks whose hostname equals this rank's, ordered by global rank;
//   localRank is this rank's index among them, localSize their count.
// - cross ranks: the ranks (on any host) whose localRank equals this rank's, ordered by global
//   rank (MPI_Comm_split(world, localRank, rank), as Horovod's MPI controller builds its cross
//   communicator); crossRank is this rank's index among them, crossSize their count. With the
//   usual contiguous or round-robin placement this is also "hosts in order of first appearance".
//
// Thread safety: pure functions of their arguments, except exchangeHostnames, which uses the
// store (itself thread-safe).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"
#include "rendezvous/store.h"

namespace kolo {

struct Topology {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  int localSize = 1;
  int crossRank = 0;
  int crossSize = 1;
};

// hostnameOfRank[r] is rank r's hostname (any non-empty string that is equal exactly for ranks
// on the same host). Errors: kInvalidArgument for an empty list, rank out of range, a null out or
// an empty hostname (naming the rank). Does not block.
Status computeTopology(const std::vector<std::string>& hostnameOfRank, int rank, Topology* out);

// Publishes myHost under "host/<rank>" and reads "host/<r>" for every r in [0, size), waiting
// until all ranks have published or the timeout passes (kTimeout naming the missing key). Give it
// a prefixed store when several jobs or process sets share one. Blocks; hosts is filled on success.
Status exchangeHostnames(Store& store, int rank, int size, const std::string& myHost,
                         std::chrono::milliseconds timeout, std::vector<std::string>* hosts);

}  // namespace kolo
