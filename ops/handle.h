// SPDX-License-Identifier: Apache-2.0
// HandleState: the shared completion state behind every op's handle.
//
// Completed exactly once (later complete() calls are ignored and return false). Thread safety:
// every method may be called from any thread. Two steps: the result is published (ready(): the
// status and outputs may be read, by the callback too), then the callback runs, outside the
// lock, and the handle is settled (done()): wait() and done() report completion only then, so a
// caller that waits and then frees what the callback uses never races it. A callback completed
// in one of the runtime's rounds, on its thread or a waiting user's, runs on the runtime's own
// thread after that round (Progress::deferCallback), as kolo.h promises; others (a handle
// completed outside a round) run on the completing thread.
// A waiter may do the runtime's work itself while it waits (Progress, below): the runtime sets
// one on each handle it makes, and wait() calls it before blocking, so a synchronous op needs
// no hand-off to and from a background thread.
// A grouped op shares one HandleState among its parts: expectParts(n) before submission, and
// the state completes when every part completed (with the first error seen, if any).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/status.h"

namespace kolo {

// What a waiting thread may run to complete handles itself (core's Coordinator: one control
// round on the waiting thread). Thread safe; implemented above ops, owned by the runtime.
class Progress {
 public:
  virtual ~Progress() = default;
  // Runs one unit of that work on the calling thread and returns true, or returns false at once
  // when it cannot (another thread is running one, the runtime stopped, or `deadline` leaves no
  // room for it): the caller then blocks until another thread completes its handle. A unit may
  // block until the peers take part in it, bounded by the runtime's own timeout.
  virtual bool advance(Deadline deadline) = 0;
  // A completion callback whose op a round completed (the runtime's or a waiting caller's
  // advance()): true when the runtime takes fn to run on its own thread once no round is
  // running (a user thread inside a wait may hold locks the callback takes, and must be able to
  // run the rounds that complete its op meanwhile); false: run it here.
  virtual bool deferCallback(std::function<void()> fn) = 0;
  // A callback attached after its op completed (setCallback on a ready handle, from any
  // thread): true when the runtime takes fn to run on its own thread, as it would have run
  // had it been attached in time; false (no runtime thread left): run it here.
  virtual bool postCallback(std::function<void()> fn) = 0;
  // True on the runtime's own thread (inside a completion callback or an allocator): a wait
  // there for an op that is not done could only block the thread that completes it.
  virtual bool onRuntimeThread() const = 0;
};

class HandleState : public std::enable_shared_from_this<HandleState> {
 public:
  using Callback = std::function<void(const Status&)>;

  void expectParts(int n) { remainingParts_ = n; }
  // Completes one part; the state completes when the last part does. Returns true if this call
  // completed the whole handle.
  bool complete(const Status& status);

  bool done() const;   // settled: the result is published and the callback has returned
  bool ready() const;  // the result is published (status, outputs); the callback may still run
  // kTimeout if not done by `deadline`; otherwise the op's status. On the runtime's own thread
  // (a callback), waiting for an op that is not ready fails at once (kInvalidArgument): only
  // that thread could complete it. A callback may wait on its own handle (it returns at once).
  Status wait(Deadline deadline) const;
  Status wait() const;    // without a deadline (the runtime's own timeouts bound it)
  Status status() const;  // the final status once ready(); kInternal "still running" before

  // Runs cb when the op completes. Already ready: handed to the runtime's thread
  // (Progress::postCallback), and the handle is unsettled until it ran, so a callback runs on
  // the runtime's thread whether or not a round completed the op before it was attached; at
  // once on this thread when no runtime thread is left (after shutdown, or no Progress).
  void setCallback(Callback cb);
  // Before the handle is shared: what wait() runs while the op is not done (none: it blocks).
  void setProgress(std::weak_ptr<Progress> p) { progress_ = std::move(p); }

  // ---- results, written by the coordinator before complete(), read after done() ----------
  std::vector<uint8_t> ownedOutput;  // allgather/alltoall/reducescatter without allocator
  void* outputData = nullptr;        // where the output went (owned or allocated)
  std::vector<int64_t> outputShape;
  std::vector<int32_t> receivedSplits;  // alltoall
  int32_t lastJoinedRank = -1;          // join
  int32_t processSetId = -1;            // add_process_set
  // Device ops: a cudaEvent_t recorded after the op's device work on the runtime's stream (a
  // consumer stream may wait on it); shared by the ops of one batch, null for host ops.
  std::shared_ptr<void> completionEvent;
  int completionDevice = -1;                // the CUDA device of completionEvent
  std::shared_ptr<void> ownedDeviceOutput;  // device ops without allocator: cudaMalloc'ed output

 private:
  // Runs progress_ (if any) until the op is ready or it declines.
  void advanceWhileWaiting(Deadline deadline) const;
  // The refusal of a wait on the runtime's own thread for an op that is not ready; ok otherwise.
  Status waitRefusal() const;
  // Runs the callback with the final status, then settles the handle.
  void runCallback(const Callback& cb, const Status& final);
  // Gives runCallback to the runtime's thread through `handOff` (Progress::deferCallback or
  // postCallback); runs it here when that declines or no runtime is attached.
  void handOffCallback(const Callback& cb, const Status& final,
                       bool (Progress::*handOff)(std::function<void()>));
  bool settledFor(std::thread::id self) const;  // (mu_) done, or this is the callback's thread

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;               // (mu_) the result is published
  bool settled_ = false;            // (mu_) ...and the callback has returned
  std::thread::id callbackThread_;  // (mu_) the thread running the callback, while it runs
  int remainingParts_ = 1;
  Status status_;
  Callback callback_;
  std::weak_ptr<Progress> progress_;  // set before sharing, then read only
};

}  // namespace kolo
