// SPDX-License-Identifier: Apache-2.0
// ProcessSet: a process set as an executor runs an op on it: its id, its global ranks, this
// rank's position and the set's transport. A plain value copied out of the engine's
// ProcessSetTable (core/process_set.h), which owns the transports; the copy is valid while the
// set exists (sets are removed only on the coordinator thread, between batches).
#pragma once

#include <cstdint>
#include <vector>

#include "transport/transport.h"

namespace kolo {

struct ProcessSet {
  int32_t id = 0;
  std::vector<int32_t> ranks;  // global ranks, ascending
  int32_t myIndex = -1;        // this rank's position in `ranks`, -1 if not a member
  Transport* transport = nullptr;  // the set's transport on members (owned by the table)
};

}  // namespace kolo
