// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the transports that complete requests on their own (MPI polls with the
// Backoff below; tcp and Gloo block and use only the rest): the first abort cause, the
// transports split from one (which abort with it), how a peer is named in errors, and the
// backoff between polls. Thread safety: AbortState and SplitChildren may be used from
// any thread; a Backoff belongs to one waiting thread.
#pragma once

#include <sched.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "transport/transport.h"

namespace kolo {

// The first abort cause wins; readable from any thread.
class AbortState {
 public:
  // Returns true if this call set the cause (false: an earlier cause is kept).
  bool set(const Status& cause) {
    std::lock_guard<std::mutex> lock(mu_);
    if (set_.load(std::memory_order_relaxed)) return false;
    cause_ = cause;
    set_.store(true, std::memory_order_release);
    return true;
  }
  bool isSet() const { return set_.load(std::memory_order_acquire); }
  Status cause() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cause_;
  }

 private:
  std::atomic<bool> set_{false};
  mutable std::mutex mu_;
  Status cause_;
};

// The transports split from one transport (process sets), held weakly: an abort of the parent
// reaches every child still alive. `State` is the transports' shared state type.
template <typename State>
class SplitChildren {
 public:
  void add(const std::shared_ptr<State>& child) {
    std::lock_guard<std::mutex> lock(mu_);
    children_.erase(std::remove_if(children_.begin(), children_.end(),
                                   [](const std::weak_ptr<State>& w) { return w.expired(); }),
                    children_.end());
    children_.push_back(child);
  }
  // The children still alive, held strongly so that they outlive the caller's use.
  std::vector<std::shared_ptr<State>> alive() {
    std::vector<std::shared_ptr<State>> out;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& weak : children_) {
      if (auto child = weak.lock()) out.push_back(std::move(child));
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<std::weak_ptr<State>> children_;
};

// A group rank as users know it: "rank 5 (global 5)" in the world group, and "rank 5 (index 2
// in this group)" in a split one (a process set, or a group the runtime made for itself, such as
// a host's ranks in a hierarchical allreduce): the global rank first, so a message never starts
// with the number of a live rank that merely sits at the lost one's index.
inline std::string describeRank(int groupRank, int global) {
  if (global == groupRank) {
    return "rank " + std::to_string(global) + " (global " + std::to_string(global) + ")";
  }
  return "rank " + std::to_string(global) + " (index " + std::to_string(groupRank) +
         " in this group)";
}

// describeRank through the group's table (group rank -> global rank).
inline std::string describeGroupRank(int groupRank, const std::vector<int>& globalRanks) {
  const int global = groupRank >= 0 && groupRank < static_cast<int>(globalRanks.size())
                         ? globalRanks[static_cast<size_t>(groupRank)]
                         : groupRank;
  return describeRank(groupRank, global);
}

// "receive from rank 1 (global 1), send to rank 2 (global 2)": a batch's unfinished operations
// as (peer, is a receive) pairs, each distinct pair once, in order; "nothing" when none is left.
inline std::string describeOutstanding(const std::vector<std::pair<int, bool>>& ops,
                                       const std::vector<int>& globalRanks) {
  std::string text;
  std::vector<std::pair<int, bool>> named;
  for (const auto& op : ops) {
    if (std::find(named.begin(), named.end(), op) != named.end()) continue;
    named.push_back(op);
    if (!text.empty()) text += ", ";
    text += std::string(op.second ? "receive from " : "send to ") +
            describeGroupRank(op.first, globalRanks);
  }
  return text.empty() ? "nothing" : text;
}

// Set-up waits (a peer's address in the store, its connection, Gloo's rendezvous keys) run in
// slices of this, looking between two for a peer lost meanwhile: about the time a failure
// takes to reach the ranks still waiting, and one store request per waiting rank per slice.
constexpr std::chrono::milliseconds kSetupWaitSlice{250};

// Runs attempt(slice) -- a wait given at most `slice` (kSetupWaitSlice, less near the deadline)
// -- until it ends other than with kTimeout, asking lost() after each timed-out attempt, also
// the last one, until `deadline`. Returns lost()'s first failure (*byLost set, when given), or
// the attempt's last status.
template <typename Attempt, typename Lost>
Status waitInSlices(Deadline deadline, Attempt&& attempt, Lost&& lost, bool* byLost = nullptr) {
  if (byLost != nullptr) *byLost = false;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    Status s = attempt(std::max(std::chrono::milliseconds(1), std::min(kSetupWaitSlice, left)));
    if (s.code() != ErrorCode::kTimeout) return s;
    Status gone = lost();
    if (!gone.isOk()) {
      if (byLost != nullptr) *byLost = true;
      return gone;
    }
    if (Clock::now() >= deadline) return s;
  }
}

// Polling backoff: yield for the first ~50 us (a reply is usually that close), then sleep
// 1, 2, 4 ... up to 1000 us, so ranks sharing few cores do not spin against each other.
// A thread confined to one CPU (kolorun binds each rank to its own core) never yields: the
// transport's I/O thread that completes the request shares that CPU, and the scheduler does not
// let a freshly woken thread preempt one that keeps yielding, so every hop would wait a
// scheduler slice (a 4-byte runtime allreduce over Gloo went from ~0.4 to ~3.7 ms). It sleeps
// at once instead, with the thread's timer slack at 1 us so that short sleeps stay short.
class Backoff {
 public:
  void pause() {
    Clock::time_point now = Clock::now();
    if (start_ == Clock::time_point{}) {
      start_ = now;
      if (oneCpu()) preciseSleeps();
    }
    if (!oneCpu() && now - start_ < std::chrono::microseconds(50)) {
      sched_yield();
      return;
    }
    sleepUs_ = std::min<long>(sleepUs_ == 0 ? 1 : sleepUs_ * 2, oneCpu() ? 64 : 1000);
    timespec ts{0, sleepUs_ * 1000};
    nanosleep(&ts, nullptr);
  }

 private:
  // Whether this thread may run on one CPU only (checked once per Backoff).
  bool oneCpu() {
    if (oneCpu_ < 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      oneCpu_ = sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) == 1 ? 1 : 0;
    }
    return oneCpu_ == 1;
  }
  static void preciseSleeps() {
    thread_local bool done = false;
    if (!done) {
      prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // nanoseconds; the default is 50 us
      done = true;
    }
  }

  Clock::time_point start_{};
  long sleepUs_ = 0;
  int oneCpu_ = -1;
};

}  // namespace kolo
