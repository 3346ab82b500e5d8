// SPDX-License-Identifier: Apache-2.0
// Ring allreduce.
//
// The n ranks form a ring: each sends only to rank+1 and receives only from rank-1, so every
// link carries the same load and no rank is a hot spot. The buffer of `count` elements is cut
// into n chunks with chunkRange (the first count % n chunks one element longer; with count < n
// some chunks are empty, and both ends of a link skip those transfers because both compute the
// same chunk length).
//
// Phase 1, reduce-scatter (n-1 steps). At step s rank r sends chunk (r - s) mod n and receives
// chunk (r - s - 1) mod n, which it folds into its own copy of that chunk. A chunk thus travels
// once around the ring collecting one contribution per hop; after step n-2 rank r holds the fully
// reduced chunk (r + 1) mod n.
//
// Phase 2, allgather (n-1 steps). At step s rank r sends chunk (r + 1 - s) mod n, starting with
// the one it completed, and receives chunk (r - s) mod n straight into place. After n-1 steps
// every rank has every reduced chunk.
//
// Pipelining: in phase 1 each chunk moves as segments of ~segmentBytes. Segment k of the step is
// received into one of two scratch slots; the exchange of segment k+1 is posted before segment
// k is reduced, so the network (or the peer's memcpy) and our reduction overlap, and the scratch
// stays two segments big and cache-resident whatever the message size. Phase 2 has no compute to
// hide, so it moves each chunk as one message.
//
// Bytes moved per rank: sends 2 (n-1)/n * count * elemSize and receives the same -- the
// bandwidth-optimal amount for an allreduce -- in 2 (n-1) latency steps (plus segments).
// kAverage reduces as a sum; the caller divides.
#include <cstring>
#include <memory>
#include <vector>

#include "ops/collectives.h"
#include "kernels/reduce_cpu.h"
#include "ops/ring_internal.h"

namespace kolo::ops {

Status ringAllreduce(Transport& t, void* data, size_t count, DataType dtype, ReduceOp op,
                     size_t segmentBytes) {
  KOLO_REQUIRE(isValid(dtype), kInvalidArgument, "ring allreduce: invalid dtype");
  KOLO_REQUIRE(data != nullptr || count == 0, kInvalidArgument, "ring allreduce: null buffer");
  const int n = t.size();
  if (n <= 1 || count == 0) return Status::ok();
  const int r = t.rank();
  const int next = (r + 1) % n;
  const int prev = (r + n - 1) % n;
  const size_t esize = sizeOf(dtype);
  uint8_t* base = static_cast<uint8_t*>(data);

  auto chunk = [&](int i, size_t* offBytes, size_t* lenBytes) {
    size_t b = 0, e = 0;
    chunkRange(count, n, ((i % n) + n) % n, &b, &e);
    *offBytes = b * esize;
    *lenBytes = (e - b) * esize;
  };

  size_t maxChunk = 0, dummy = 0;
  chunk(0, &dummy, &maxChunk);  // chunk 0 is never shorter than the others
  const size_t segElems = internal::segmentElements(segmentBytes, esize, maxChunk / esize);
  const size_t segBytes = segElems * esize;
  const size_t slotBytes = segBytes < maxChunk ? segBytes : maxChunk;
  // Not zero-filled: every byte is received before it is read.
  std::unique_ptr<uint8_t[]> scratch(new uint8_t[2 * slotBytes]);

  for (int s = 0; s < n - 1; ++s) {
    size_t sendOff, sendLen, recvOff, recvLen;
    chunk(r - s, &sendOff, &sendLen);
    chunk(r - s - 1, &recvOff, &recvLen);
    uint8_t* dst = base + recvOff;
    KOLO_RETURN_IF_ERROR(internal::pipelinedStep(
        t, next, prev, internal::kTagAllreduce, base + sendOff, sendLen, recvLen, segBytes,
        [&](size_t k) { return scratch.get() + (k % 2) * slotBytes; },
        [&](size_t, uint8_t* got, size_t off, size_t len) {
          kernels::reduceInto(dst + off, got, len / esize, dtype, op);
        }));
  }

  for (int s = 0; s < n - 1; ++s) {
    size_t sendOff, sendLen, recvOff, recvLen;
    chunk(r + 1 - s, &sendOff, &sendLen);
    chunk(r - s, &recvOff, &recvLen);
    std::vector<P2POp> ops;
    if (recvLen > 0) ops.push_back(recvOp(prev, internal::kTagAllreduce, base + recvOff, recvLen));
    if (sendLen > 0) ops.push_back(sendOp(next, internal::kTagAllreduce, base + sendOff, sendLen));
    KOLO_RETURN_IF_ERROR(t.exchange(ops));
  }
  return Status::ok();
}

}  // namespace kolo::ops
