// SPDX-License-Identifier: Apache-2.0
// The one clock of kolo and the deadline type every blocking call takes.
//
// Ownership: none (type aliases, msUntil, clampTimeout, deadlineAfter). Threading: steady_clock
// is thread-safe. Blocking: none. Errors: none. Every floor above base (rendezvous stores,
// transports, the negotiator's stall check, the timeline's timestamps) uses these names, so a
// Deadline made in one floor means the same instant in another.
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

// A timeout clamped to [0, UINT32_MAX ms] (about 49.7 days): a negative or zero timeout means
// "check once", and "effectively forever" cannot overflow the clock. The upper bound is also what
// the store's wire protocol can say (its timeouts are u32 milliseconds, rendezvous/store_wire.h).
inline std::chrono::milliseconds clampTimeout(std::chrono::milliseconds t) {
  return std::clamp(t, std::chrono::milliseconds(0), std::chrono::milliseconds(UINT32_MAX));
}

// The deadline a blocking call with this timeout ends at (the timeout clamped as above).
inline Deadline deadlineAfter(std::chrono::milliseconds timeout) {
  return Clock::now() + clampTimeout(timeout);
}

}  // namespace kolo
