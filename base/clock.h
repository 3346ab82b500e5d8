// The one clock of kolo and the deadline type every blocking call takes.
//
// Ownership: none (type aliases, msUntil). Threading: steady_clock is thread-safe. Blocking: none.
// Errors: none. Every floor above base (rendezvous stores, transports, the negotiator's stall
// check, the timeline's timestamps) uses these names, so a Deadline made in one floor means the
// same instant in another.
#pragma once

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>

namespace kolo {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Milliseconds until the deadline rounded up, for poll(): when poll times out, it has passed.
inline int msUntil(Deadline deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
}

}  // namespace kolo
