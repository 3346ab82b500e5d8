// Helpers shared by transports that complete requests by polling (MPI, Gloo): the first abort
// cause, the transports split from one (which abort with it), how a peer is named in errors,
// and the backoff between polls. Thread safety: AbortState and SplitChildren may be used from
// any thread; a Backoff belongs to one waiting thread.
#pragma once

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
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

// "rank 2 (global 5)": a group rank and, through the group's table, its global rank.
inline std::string describeGroupRank(int groupRank, const std::vector<int>& globalRanks) {
  const int global = groupRank >= 0 && groupRank < static_cast<int>(globalRanks.size())
                         ? globalRanks[static_cast<size_t>(groupRank)]
                         : groupRank;
  return "rank " + std::to_string(groupRank) + " (global " + std::to_string(global) + ")";
}

// Polling backoff: yield for the first ~50 us (a reply is usually that close), then sleep
// 1, 2, 4 ... up to 1000 us, so ranks sharing few cores do not spin against each other.
class Backoff {
 public:
  void pause() {
    Clock::time_point now = Clock::now();
    if (start_ == Clock::time_point{}) start_ = now;
    if (now - start_ < std::chrono::microseconds(50)) {
      sched_yield();
      return;
    }
    sleepUs_ = std::min<long>(sleepUs_ == 0 ? 1 : sleepUs_ * 2, 1000);
    timespec ts{0, sleepUs_ * 1000};
    nanosleep(&ts, nullptr);
  }

 private:
  Clock::time_point start_{};
  long sleepUs_ = 0;
};

}  // namespace kolo
