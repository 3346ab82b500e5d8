// SPDX-License-Identifier: Apache-2.0
// TensorEntry: one op this rank submitted, as the executors (ops/execute.h, the device executor)
// see it: the request, the tensors, the output allocator and the handle the op completes.
//
// Ownership: the engine's TensorQueue owns entries; executors get pointers that stay valid for
// the batch. Threading: an entry is filled by the submitting thread and then touched only by the
// coordinator thread. Blocking: none. Errors: an allocator returning nullptr fails this rank's
// op (localError), after the collective ran on a scratch output so that the other ranks are not
// left waiting for this one.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "base/tensor.h"
#include "ops/handle.h"
#include "ops/message.h"

namespace kolo {

// Allocates an op's output once its shape is known (allgather, alltoall, reducescatter).
// Returns nullptr to fail the op. Called on the coordinator thread.
using OutputAllocator = std::function<void*(size_t bytes, const std::vector<int64_t>& shape)>;

struct TensorEntry {
  Request request;  // what this rank asks for (name, type, dtype, shape, op, ...)
  TensorView input;
  TensorView output;  // allreduce out of place; data == input.data (or null) means in place
  OutputAllocator allocate;  // empty = the handle owns the output
  std::shared_ptr<HandleState> handle;
  // Device tensors: a cudaEvent_t recorded on the producer's stream at submission; the runtime
  // waits on it before touching the tensor (ops/device_executor.h).
  std::shared_ptr<void> readyEvent;
  Clock::time_point enqueued;
  bool announced = false;  // sent to the coordinator rank in a full round
  // This rank's own failure in a batch that still ran everywhere (see allocateOutputs): the
  // handle completes with it when the batch succeeded.
  Status localError;
  bool timelineOpen = false;  // the timeline holds its NEGOTIATE_<OP> begin, not yet its end
  // Refused on this rank at submission (core/runtime.h Runtime::refuse): no data, nobody waits;
  // it is in the queue only to fail the op on the other ranks too.
  bool refused = false;
  // The coordinator's response-cache lookup of this entry (core/coordinator.cc), kept while the
  // cache is unchanged: cacheSeen is the cache's version + 1 at the lookup (0: never looked up).
  // An entry that waits many rounds for a late rank is looked up once, not every round.
  uint64_t cacheSeen = 0;
  uint8_t cacheLookup = 0;  // a ResponseCache::Lookup
  uint32_t cacheBit = 0;
};

}  // namespace kolo
