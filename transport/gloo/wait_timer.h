// Internal to the Gloo transport: the watchdog that ends kolo's blocking Gloo waits on time.
//
// A point-to-point batch blocks in Gloo's own UnboundBuffer::waitRecv/waitSend, woken directly
// by Gloo's I/O thread when the operation completes. Gloo's wait timeout cannot bound it (it
// closes every connection of the context), so before each wait the batch arms this timer,
// which at the expiry -- the batch's deadline, or the end of a slice when the batch rotates
// over several open operations -- calls abortWaitRecv/abortWaitSend on that buffer; the wait
// then returns false and the batch decides what comes next.
//
// Ownership: one per transport, shared with the transports split from it; its thread starts
// at the first arm() and is joined by the destructor. Thread safety: every method may be
// called from any thread. The thread wakes at the earliest expiry, and also every kTick (the
// batches' slice) while anything was armed in the last kLinger: a busy job never needs to wake
// it for an arm(), and a quiet one (or one long wait) does not keep it ticking.
#pragma once

#include <gloo/transport/unbound_buffer.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/transport.h"

namespace kolo::gloo_detail {

class WaitTimer {
 public:
  static constexpr std::chrono::milliseconds kTick{1};
  static constexpr std::chrono::milliseconds kLinger{200};

  WaitTimer() = default;
  ~WaitTimer();
  WaitTimer(const WaitTimer&) = delete;
  WaitTimer& operator=(const WaitTimer&) = delete;

  // At `when`, calls buffer->abortWaitRecv() (recv) or abortWaitSend(), once, unless
  // cancel(ticket) came first. `buffer` must stay alive until cancel() returns.
  uint64_t arm(gloo::transport::UnboundBuffer* buffer, bool recv, Clock::time_point when);
  // Afterwards the timer no longer touches the buffer (whether it had fired or not).
  void cancel(uint64_t ticket);

 private:
  struct Armed {
    uint64_t ticket;
    gloo::transport::UnboundBuffer* buffer;
    bool recv;
    Clock::time_point when;
  };
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Armed> armed_;
  uint64_t next_ = 1;
  Clock::time_point wake_ = Clock::time_point::max();  // when the thread looks next
  Clock::time_point lastArm_{};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kolo::gloo_detail
