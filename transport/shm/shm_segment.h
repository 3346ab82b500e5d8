// SPDX-License-Identifier: Apache-2.0
// The shared-memory segment of one shm transport group, as this process sees it (internal to
// transport/shm): the layout, the creation handshake, and the one way anybody waits in it.
//
// Layout (every area 64-byte aligned, the big ones 4 KiB aligned):
//   Header                     magic, nonce, sizes; the group-wide abort word and its text
//   RankBlock[n]               per rank: pid, closed flag, doorbell + sleeping flag (the futex
//                              pair), the three collective counters, staging descriptors
//   RingCtl[n*(n-1)]           per ordered pair (src, dst): head (written by src), tail (by dst)
//   ring data[n*(n-1)]         ringBytes each
//   staging[n][kStagingBuffers] chunkBytes each: rank r writes only its own slots
//
// Waiting: a rank that must wait spins for a few microseconds -- unless a rank it waits for last
// ran on the same CPU (then spinning only delays it) -- then announces itself asleep
// (sleeping = 1) and futex-waits on its own doorbell word. Whoever changes something another
// rank may wait for bumps that rank's doorbell and issues FUTEX_WAKE only when it is asleep, so
// the common, balanced case costs no system call. The futex is cross-process (no
// FUTEX_PRIVATE_FLAG). Sleeps are sliced (50 ms) so a deadline, an abort from another thread, a
// group-wide abort and a dead or closed peer are all noticed promptly.
//
// Thread safety: one thread uses a Segment at a time (the transport's), except abort(),
// aborted() and close(), which any thread may call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "transport/transport.h"

namespace kolo::shm {

constexpr int kMaxRanks = 64;
constexpr int kStagingBuffers = 3;

// What a rank is doing with a staging buffer, so peers can detect disagreeing calls.
struct CallDesc {
  uint32_t kind = 0;  // 1 allreduce, 2 broadcast, 3 allgatherv, 4 reducescatter
  int32_t dtype = 0;
  int32_t op = 0;
  int32_t root = 0;
  uint64_t count = 0;  // elements or bytes, per collective
  uint64_t chunk = 0;  // chunk index within the call
};

struct alignas(64) RankBlock {
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> closed;
  std::atomic<uint64_t> pidNamespace;  // inode of /proc/self/ns/pid: pids compare only within one
  alignas(64) std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> sleeping;
  std::atomic<int32_t> cpu;  // where this rank last started waiting (sched_getcpu)
  // Collective progress, in chunks since the segment was created (wrapping): after chunk g a
  // rank sets published = g+1 when its inputs are in its slot, reduced = g+1 when its share of
  // the result is, consumed = g+1 when it read everything it needed from other ranks' slots.
  alignas(64) std::atomic<uint32_t> published;
  alignas(64) std::atomic<uint32_t> reduced;
  alignas(64) std::atomic<uint32_t> consumed;
  alignas(64) CallDesc desc[kStagingBuffers];
};

struct alignas(64) RingCtl {
  std::atomic<uint64_t> head;              // bytes ever written by the producer
  alignas(64) std::atomic<uint64_t> tail;  // bytes ever consumed by the consumer
};

static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be lock-free");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "ring counters must be lock-free");

struct Header;  // shm_segment.cc

struct SegmentOptions {
  size_t chunkBytes = 0;  // staging slot size (0: default)
  size_t ringBytes = 0;   // p2p ring size per ordered pair, a power of two (0: by rank count)
  std::chrono::microseconds spin{0};  // spin before sleeping (0: default)
};

class Segment {
 public:
  // Collective over every rank of `base`: rank 0 creates and sizes the segment, the others map
  // it, all confirm over `base`, then it is unlinked. Either every rank gets a segment or every
  // rank gets an error (kUnsupported / kIo naming the first rank that failed).
  static Status create(Transport& base, const SegmentOptions& options,
                       std::shared_ptr<Segment>* out);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t chunkBytes() const { return chunkBytes_; }
  size_t ringBytes() const { return ringBytes_; }
  // "rank 1 (global 3)": ranks of this group as messages name them.
  std::string label(int r) const;

  RankBlock& rankBlock(int r) { return ranks_[r]; }
  RingCtl& ringCtl(int src, int dst) { return rings_[ringIndex(src, dst)]; }
  uint8_t* ringData(int src, int dst) { return ringData_ + ringIndex(src, dst) * ringBytes_; }
  uint8_t* staging(int r, int buffer) {
    return staging_ + (static_cast<size_t>(r) * kStagingBuffers + buffer) * chunkBytes_;
  }

  // Bumps rank r's doorbell; wakes it when it sleeps. Call after publishing a change r may be
  // waiting for.
  void notify(int r);
  void notifyOthers();

  // Waits until ready() is true (it is called repeatedly, and may make progress itself). Fails
  // with the abort cause, kPeerLost for a dead or closed peer, or kTimeout (describe() says what
  // was outstanding) -- unless ready() turns true at the last check.
  // A rank of the group whose process vanished without closing its transport is always fatal;
  // one that closed counts only when it is in `watch` (bit r = rank r).
  template <class Ready, class Describe>
  Status waitUntil(Ready&& ready, Deadline deadline, uint64_t watch, Describe&& describe);

  // Local abort (this rank's waits fail with `cause`), published to the group so the other
  // ranks fail promptly too ("rank 1 (global 1) aborted: ..."). Idempotent; any thread.
  void abort(const Status& cause);
  // Ok, or why this segment is unusable (local abort, a group-wide abort).
  Status aborted() const;
  // Marks this rank as gone (the transport is being destroyed) and wakes everybody.
  void close();

 private:
  Segment() = default;
  size_t ringIndex(int src, int dst) const {
    return static_cast<size_t>(src) * (size_ - 1) + (dst < src ? dst : dst - 1);
  }
  // Records this rank's CPU; false when a rank in `watch` last waited on the same CPU: spinning
  // would only keep it off the core it needs, so sleep at once.
  bool spinWorthwhile(uint64_t watch);
  // The slow checks between sleeps: abort, group abort, dead or closed peers (rate-limited).
  Status health(Clock::time_point now, uint64_t watch);
  // "rank 1 (global 1) is stopped (process 42 in state T)" for every peer stopped by a signal
  // or a debugger; empty if none. At a timeout the rank waited for may itself be waiting for
  // a stopped one: the stopped one is named first.
  std::string stoppedPeers() const;
  void futexWait(uint32_t expected, Clock::duration limit);
  static void cpuRelax();

  void* base_ = nullptr;
  size_t mappedBytes_ = 0;
  int rank_ = 0;
  int size_ = 0;
  std::vector<int> globals_;
  size_t chunkBytes_ = 0;
  size_t ringBytes_ = 0;
  std::chrono::microseconds spin_{0};
  Header* header_ = nullptr;
  RankBlock* ranks_ = nullptr;
  RingCtl* rings_ = nullptr;
  uint8_t* ringData_ = nullptr;
  uint8_t* staging_ = nullptr;
  std::vector<bool> pidVisible_;  // false: the peer lives in another pid namespace
  Clock::time_point nextLivenessCheck_{};

  std::atomic<bool> localAborted_{false};
  mutable std::mutex abortMu_;
  Status abortCause_;
};

template <class Ready, class Describe>
Status Segment::waitUntil(Ready&& ready, Deadline deadline, uint64_t watch, Describe&& describe) {
  if (ready()) return Status::ok();
  const Clock::time_point start = Clock::now();
  if (spinWorthwhile(watch)) {
    for (;;) {
      for (int i = 0; i < 16; ++i) cpuRelax();
      if (ready()) return Status::ok();
      if (localAborted_.load(std::memory_order_relaxed)) break;
      if (Clock::now() - start >= spin_) break;
    }
  }
  RankBlock& me = ranks_[rank_];
  for (;;) {
    const uint32_t bell = me.doorbell.load(std::memory_order_acquire);
    me.sleeping.store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ready()) {
      me.sleeping.store(0, std::memory_order_relaxed);
      return Status::ok();
    }
    const Clock::time_point now = Clock::now();
    Status bad = health(now, watch);
    if (bad.isOk() && now >= deadline) {
      std::string stopped = stoppedPeers();
      bad = Status(ErrorCode::kTimeout,
                   (stopped.empty() ? "" : stopped + "; ") +
                       describe(std::chrono::duration<double>(now - start).count()));
    }
    if (!bad.isOk()) {
      me.sleeping.store(0, std::memory_order_relaxed);
      // A peer may have finished its part and then closed or died: what it left counts.
      if (bad.code() != ErrorCode::kAborted && ready()) return Status::ok();
      return bad;
    }
    const Clock::duration left = deadline - now;
    const Clock::duration slice = std::chrono::milliseconds(50);
    futexWait(bell, left < slice ? left : slice);
    me.sleeping.store(0, std::memory_order_relaxed);
  }
}

}  // namespace kolo::shm
