// The watchdog of the Gloo transport's blocking waits (see wait_timer.h).
//
// The abort is made under mu_: cancel() takes mu_ too, so once it returns the buffer may go.
// Gloo's abortWait* only takes the buffer's own mutex, which a waiter releases while it
// sleeps, so firing never waits for a waiter.
#include "transport/gloo/wait_timer.h"

#include <algorithm>

namespace kolo::gloo_detail {

constexpr std::chrono::milliseconds WaitTimer::kTick;
constexpr std::chrono::milliseconds WaitTimer::kLinger;

WaitTimer::~WaitTimer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t WaitTimer::arm(gloo::transport::UnboundBuffer* buffer, bool recv, Clock::time_point when) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t ticket = next_++;
  armed_.push_back(Armed{ticket, buffer, recv, when});
  lastArm_ = Clock::now();
  if (!thread_.joinable()) {
    thread_ = std::thread([this] { run(); });
  } else if (when < wake_) {
    cv_.notify_one();  // it sleeps past this expiry (or untimed)
  }
  return ticket;
}

void WaitTimer::cancel(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(armed_.begin(), armed_.end(),
                         [ticket](const Armed& a) { return a.ticket == ticket; });
  if (it != armed_.end()) {
    *it = armed_.back();
    armed_.pop_back();
  }
}

void WaitTimer::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    const Clock::time_point now = Clock::now();
    Clock::time_point earliest = Clock::time_point::max();
    for (size_t i = 0; i < armed_.size();) {
      if (armed_[i].when <= now) {
        if (armed_[i].recv) {
          armed_[i].buffer->abortWaitRecv();
        } else {
          armed_[i].buffer->abortWaitSend();
        }
        armed_[i] = armed_.back();
        armed_.pop_back();
      } else {
        earliest = std::min(earliest, armed_[i].when);
        ++i;
      }
    }
    // Ticking only right after arms: one long wait (a single op until its deadline) or none
    // at all lets the thread sleep until the expiry, or until the next arm() wakes it.
    wake_ = now - lastArm_ < kLinger ? std::min(earliest, now + kTick) : earliest;
    if (wake_ == Clock::time_point::max()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, wake_);
    }
  }
}

}  // namespace kolo::gloo_detail
