// HandleState: the shared completion state behind every op's handle.
//
// Completed exactly once (later complete() calls are ignored and return false). Thread safety:
// every method may be called from any thread. wait() blocks until completion or the deadline;
// callbacks run on the completing thread after the state is published, outside the lock.
// A grouped op shares one HandleState among its parts: expectParts(n) before submission, and
// the state completes when every part completed (with the first error seen, if any).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "base/clock.h"

namespace kolo {

class HandleState {
 public:
  using Callback = std::function<void(const Status&)>;

  void expectParts(int n) { remainingParts_ = n; }
  // Completes one part; the state completes when the last part does. Returns true if this call
  // completed the whole handle.
  bool complete(const Status& status);

  bool done() const;
  // kTimeout if not done by `deadline`; otherwise the op's status.
  Status wait(Deadline deadline) const;
  Status wait() const;  // without a deadline (the runtime's own timeouts bound it)
  Status status() const;  // the final status; kInternal "still running" before completion

  // Runs cb at once (on this thread) if already done.
  void setCallback(Callback cb);

  // ---- results, written by the coordinator before complete(), read after done() ----------
  std::vector<uint8_t> ownedOutput;   // allgather/alltoall/reducescatter without allocator
  void* outputData = nullptr;         // where the output went (owned or allocated)
  std::vector<int64_t> outputShape;
  std::vector<int32_t> receivedSplits;  // alltoall
  int32_t lastJoinedRank = -1;          // join
  int32_t processSetId = -1;            // add_process_set
  // Device ops: a cudaEvent_t recorded after the op's device work on the runtime's stream (a
  // consumer stream may wait on it); shared by the ops of one batch, null for host ops.
  std::shared_ptr<void> completionEvent;
  int completionDevice = -1;  // the CUDA device of completionEvent
  std::shared_ptr<void> ownedDeviceOutput;  // device ops without allocator: cudaMalloc'ed output

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  int remainingParts_ = 1;
  Status status_;
  Callback callback_;
};

}  // namespace kolo
