// Short busy waits: what a thread that expects another thread's step within microseconds does
// instead of sleeping (a sleep costs the other thread a futex wake-up: a system call, and in a
// VM an interrupt to the sleeping CPU).
//
// Ownership: none (free functions). Threading: any thread. Blocking: spinTurn may give up the
// CPU (sched_yield); neither sleeps. Errors: none.
#pragma once

#include <thread>

namespace kolo {

// One spin-loop pause: tells the CPU (and a hyperthread sibling) that this thread is waiting.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Turn `turn` (0, 1, ...) of a wait loop that checks its condition between turns: the first
// 256 turns are a few pauses each (no system call, the CPU stays with this thread: a few
// microseconds in all), later ones yield the CPU to whatever else may run on it.
inline void spinTurn(int turn) {
  if (turn < 256) {
    for (int i = 0; i < 8; ++i) cpuRelax();
  } else {
    std::this_thread::yield();
  }
}

}  // namespace kolo
