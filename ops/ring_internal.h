// SPDX-License-Identifier: Apache-2.0
// Private helpers shared by the ring / point-to-point algorithms in ops/ (not a public header:
// only ring_allreduce.cc, ring_allgatherv.cc, broadcast.cc, alltoallv.cc, reducescatter.cc,
// adasum.cc and select.cc include it).
//
// Thread safety: stateless. Blocking: pipelinedStep waits on the transport with
// t.deadlineFromNow() per segment, so a silent peer surfaces as kTimeout naming it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "transport/transport.h"

namespace kolo::ops::internal {

// One fixed tag per algorithm. Ops never run concurrently on one transport, and (src, dst, tag)
// is FIFO, so every message of an algorithm can share its tag: both sides post in the same order.
constexpr uint32_t kTagAllreduce = 1;
constexpr uint32_t kTagAllgather = 2;
constexpr uint32_t kTagBroadcast = 3;
constexpr uint32_t kTagAlltoall = 4;
constexpr uint32_t kTagReducescatter = 5;
constexpr uint32_t kTagAdasum = 6;
constexpr uint32_t kTagGather = 7;
// 8 is transport::kSetupTag (transport/transport.h: set-up exchanges inside transports).

// Broadcasts below this size use the binomial tree (latency bound), larger ones the pipelined
// chain or scatter-allgather (broadcast.cc's essay). select.cc reports the name of the one that
// ran.
constexpr size_t kTreeBroadcastMaxBytes = 64 * 1024;
// p2pBroadcast (the data plane's auto) takes scatter-allgather from this many ranks: below 8 the
// chain's n - 1 hops are no more than its 2 ceil(log2 n) latencies, and the chain measured
// ahead at 4 ranks below 1 MiB (broadcast.cc).
constexpr int kScatterAllgatherMinRanks = 8;
// controlBroadcast takes it from 4: the control round's worst case stays O(log n) latencies; at
// 2 and 3 ranks the chain is as short (n - 1 <= 2 hops) and moves fewer bytes.
constexpr int kControlScatterAllgatherMinRanks = 4;

// Elements per pipeline segment: segmentBytes rounded down to whole elements, at least one.
// segmentBytes == 0 means "do not segment".
inline size_t segmentElements(size_t segmentBytes, size_t elemSize, size_t chunkElems) {
  if (segmentBytes == 0) return chunkElems > 0 ? chunkElems : 1;
  size_t e = segmentBytes / elemSize;
  return e > 0 ? e : 1;
}

inline size_t ceilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

// One step of a ring: sends sendBytes from sendBuf to `next` and receives recvBytes from `prev`,
// both cut into segments of segBytes (the last one shorter). Segment k of the receive lands at
// recvAt(k) (a pointer the caller chooses: a scratch slot or the final place), then
// consume(k, recvAt(k), offsetBytes, bytes) runs -- while segment k+1 is already posted, so the
// wire and the reduction overlap. Each side computes the segment count of its own direction from
// the chunk length alone, so both ends of a link agree without talking. Empty directions skip.
template <class RecvAt, class Consume>
Status pipelinedStep(Transport& t, int next, int prev, uint32_t tag, const uint8_t* sendBuf,
                     size_t sendBytes, size_t recvBytes, size_t segBytes, RecvAt recvAt,
                     Consume consume) {
  const size_t sendSegs = sendBytes == 0 ? 0 : ceilDiv(sendBytes, segBytes);
  const size_t recvSegs = recvBytes == 0 ? 0 : ceilDiv(recvBytes, segBytes);
  const size_t steps = sendSegs > recvSegs ? sendSegs : recvSegs;
  auto postSegment = [&](size_t k, std::unique_ptr<PendingOps>* out) -> Status {
    std::vector<P2POp> ops;
    ops.reserve(2);
    if (k < recvSegs) {
      size_t off = k * segBytes;
      size_t len = recvBytes - off < segBytes ? recvBytes - off : segBytes;
      ops.push_back(recvOp(prev, tag, recvAt(k), len));
    }
    if (k < sendSegs) {
      size_t off = k * segBytes;
      size_t len = sendBytes - off < segBytes ? sendBytes - off : segBytes;
      ops.push_back(sendOp(next, tag, sendBuf + off, len));
    }
    return t.post(ops, out);
  };
  std::unique_ptr<PendingOps> current;
  if (steps > 0) KOLO_RETURN_IF_ERROR(postSegment(0, &current));
  for (size_t k = 0; k < steps; ++k) {
    KOLO_RETURN_IF_ERROR(current->wait(t.deadlineFromNow()));
    std::unique_ptr<PendingOps> following;
    if (k + 1 < steps) KOLO_RETURN_IF_ERROR(postSegment(k + 1, &following));
    if (k < recvSegs) {
      size_t off = k * segBytes;
      size_t len = recvBytes - off < segBytes ? recvBytes - off : segBytes;
      consume(k, recvAt(k), off, len);
    }
    current = std::move(following);
  }
  return Status::ok();
}

}  // namespace kolo::ops::internal
