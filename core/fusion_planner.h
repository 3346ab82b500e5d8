// SPDX-License-Identifier: Apache-2.0
// FusionPlanner: packs the responses of one round into batches that ops::execute runs as one
// collective over a fusion buffer. Pure function of its inputs, so every rank (which holds the
// same ordered response list) computes the same plan.
//
// Rules:
// - Only OK allreduce responses fuse with each other (same dtype, reduce op, prescale, postscale,
//   device, process set and joinedRanks), and OK allgather responses with each other (same dtype,
//   device and process set).
// - Greedy in order: the first unassigned response starts a batch, then every later compatible
//   response that still fits is added (look-ahead: responses that do not match or do not fit are
//   skipped and start or join a later batch). A batch never exceeds thresholdBytes, except a
//   single response that is larger on its own (it is alone). thresholdBytes <= 0: no fusion.
// - Grouped responses (same Response::group) are added as a whole when the whole group fits;
//   a group larger than the threshold is packed member by member.
// - A response of at least directBytes (> 0) is never fused: it is big enough for the collective
//   to run on the tensor itself, and skipping the fusion buffer saves two copies of it.
// - Everything else (errors, broadcast, alltoall, reducescatter, barrier, join, process set) is a
//   batch of its own.
// - Batches are ordered by their first index; indices inside a batch ascend.
//
// Thread safety: pure functions. No errors: malformed sizes (negative dims, overflow) simply make
// a response unfusible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/message.h"

namespace kolo {

struct FusionBatch {
  std::vector<size_t> indices;  // into the response vector, ascending
  size_t bytes = 0;             // sum of payloadBytes of the members
};

std::vector<FusionBatch> planFusion(const std::vector<Response>& responses, int64_t thresholdBytes,
                                    int worldSize, int64_t directBytes = 0);

// Bytes a response moves through the fusion buffer: allreduce, broadcast and reducescatter the
// tensor's size; allgather the gathered output (sum of rankDim0 x row elements x dtype size);
// anything else (and errors, and sizes that are negative or overflow) 0.
size_t payloadBytes(const Response& r);

// Whether two responses may share a batch (both fusible and compatible as above).
bool canFuse(const Response& a, const Response& b);

}  // namespace kolo
