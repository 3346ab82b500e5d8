// Helpers shared by transports that complete requests by polling (MPI, Gloo): the first abort
// cause, and the backoff between polls. Thread safety: AbortState may be set and read from any
// thread; a Backoff belongs to one waiting thread.
#pragma once

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>

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
