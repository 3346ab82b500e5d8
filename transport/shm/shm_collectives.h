// SPDX-License-Identifier: Apache-2.0
// Native collectives over the segment's staging slots (internal to transport/shm).
//
// Allreduce, the one that matters. The buffer is processed in chunks of chunkBytes; chunk k is
// cut into n parts (part q is reduced by rank q). For chunk k, rank r:
//   1. copies every part but its own from its buffer into its own staging slot (publish);
//   2. waits until every rank published chunk k, then reduces part r across the n inputs (its
//      own buffer for its own contribution, the others' slots for theirs) into the part-r
//      position of its own slot -- left free in step 1 -- and into its own buffer;
//   3. copies every other part q's result out of rank q's slot into its buffer.
// Per rank and chunk that is (n-1)/n of the chunk copied in, 1/n reduced, (n-1)/n copied out:
// the user buffer is read once and written once, and staging stays in cache. Step 3 of chunk k
// is deferred until after step 2 of chunk k+1 (whose wait already proves every rank reduced
// chunk k), and the slots rotate over three buffers, so the only wait per chunk is step 2's:
// a rank publishing chunk k+1 while a peer still copies chunk k out is safe by construction.
// Reductions run in rank order (rank 0's input first), so every rank's copy of a part is the
// same bits and the result does not depend on which rank reduced it.
//
// allreduceSpans runs the same algorithm over several tensors as if they were packed into one
// buffer (FlatSpans maps the flat element range to the tensors): the copies into the staging
// slots read the tensors where they are and the results are written straight into them, so a
// fused batch costs no packing or unpacking copy and gives the same bits as the packed call.
//
// Small allreduces (up to 16 KiB) take a shortcut: every rank publishes its whole input and
// folds all n inputs itself, so the call waits once instead of twice.
//
// Broadcast: the root publishes chunks into its slot, the others copy them out. Allgatherv:
// every rank publishes up to chunkBytes of its block per round, everybody copies every block.
// Reducescatter: per round each rank publishes its contribution to every other rank's block,
// then reduces its own block's piece straight into recv.
//
// Every chunk carries a descriptor (collective, dtype, op, count, root, chunk index) next to
// the slot: a rank that sees a peer's differ fails the call with kMismatch naming both, the
// same way on every rank, and the group stays usable.
//
// Blocking: each wait has the transport's timeout (deadline from now); failures as
// Segment::waitUntil. Thread safety: one thread at a time.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

#include "base/status.h"
#include "base/types.h"
#include "transport/shm/shm_segment.h"
#include "transport/transport.h"

namespace kolo::shm {

// The spans of one allreduceSpans call as one flat range of elements (span after span).
class FlatSpans {
 public:
  explicit FlatSpans(const std::vector<ReduceSpan>& spans) : spans_(spans) {
    starts_.reserve(spans.size());
    for (const ReduceSpan& s : spans) {
      starts_.push_back(total_);
      total_ += s.count;
    }
  }
  size_t total() const { return total_; }
  // Calls f(pos, span, within, m) for each maximal piece of the flat range [off, off + len)
  // that lies in one span: elements [within, within + m) of `span`, whose offset from `off` in
  // the flat range is pos. Requires off + len <= total().
  template <class F>
  void pieces(size_t off, size_t len, F&& f) const {
    if (len == 0) return;
    size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), off) -
                                   starts_.begin()) - 1;
    for (size_t pos = 0; pos < len; ++i) {
      const ReduceSpan& s = spans_[i];
      const size_t within = off + pos - starts_[i];
      const size_t m = std::min(s.count - within, len - pos);
      if (m > 0) f(pos, s, within, m);
      pos += m;
    }
  }

 private:
  const std::vector<ReduceSpan>& spans_;
  std::vector<size_t> starts_;
  size_t total_ = 0;
};

class Collectives {
 public:
  explicit Collectives(Segment* segment) : seg_(segment) {}

  Status allreduce(void* data, size_t count, DataType dtype, ReduceOp op,
                   std::chrono::milliseconds timeout);
  // Spans must not overlap, except a span's in == out (in place).
  Status allreduceSpans(const std::vector<ReduceSpan>& spans, DataType dtype, ReduceOp op,
                        std::chrono::milliseconds timeout);
  Status broadcast(void* data, size_t bytes, int root, std::chrono::milliseconds timeout);
  Status allgatherv(const void* send, size_t sendBytes, void* recv,
                    const std::vector<size_t>& recvBytes, std::chrono::milliseconds timeout);
  Status reducescatter(const void* send, void* recv, const std::vector<size_t>& recvCounts,
                       DataType dtype, ReduceOp op, std::chrono::milliseconds timeout);

 private:
  // Up to this size an allreduce is one chunk in which every rank publishes its whole input
  // and reduces all of it: n times the (tiny) arithmetic for one wait instead of two. Measured
  // at 2 ranks: it wins below ~16 KiB on a quiet host; above, the split reduction is faster
  // whenever both ranks have a core (64 KiB: 3.7 us vs 5.4 us).
  static constexpr size_t kOneShotMaxBytes = 16 * 1024;

  Status allreduceOneShot(const FlatSpans& flat, DataType dtype, ReduceOp op,
                          std::chrono::milliseconds timeout);
  enum Counter { kPublished, kReduced, kConsumed };
  std::atomic<uint32_t>& counter(int r, Counter c);
  // Waits until counter c of every rank but this one reached `target` (wrap-safe).
  Status waitAll(Counter c, uint32_t target, const char* what, std::chrono::milliseconds timeout);
  // Starts chunk g: waits until staging buffer g % kStagingBuffers is free (every rank consumed
  // chunk g-3), then records this rank's description of the call in it. *slot: this rank's
  // staging buffer for the chunk, to fill before publish().
  Status claim(uint32_t g, const CallDesc& mine, const char* what,
               std::chrono::milliseconds timeout, uint8_t** slot);
  // Publishes chunk g, waits for every rank's publication and compares the descriptions: on a
  // difference this rank skips the chunk and returns kMismatch naming both calls.
  Status publish(uint32_t g, const CallDesc& mine, const char* what,
                 std::chrono::milliseconds timeout);
  void set(Counter c, uint32_t value);
  // After waiting for every rank's publication of chunk g: kMismatch if a descriptor differs.
  Status checkDescriptors(uint32_t g, const CallDesc& mine) const;
  // Ends chunks [first, g] on this rank after a failure, so the counters stay in step.
  void skipTo(uint32_t g);

  Segment* seg_;
  uint32_t seq_ = 0;  // chunks this group started, the same on every rank
};

}  // namespace kolo::shm
