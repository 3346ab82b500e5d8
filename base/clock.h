// The one clock of kolo and the deadline type every blocking call takes.
//
// Ownership: none (type aliases). Threading: steady_clock is thread-safe. Blocking: none.
// Errors: none. Every floor above base (rendezvous stores, transports, the negotiator's stall
// check, the timeline's timestamps) uses these names, so a Deadline made in one floor means the
// same instant in another.
#pragma once

#include <chrono>

namespace kolo {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

}  // namespace kolo
