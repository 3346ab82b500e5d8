// SPDX-License-Identifier: Apache-2.0
// Ring reducescatter with uneven blocks: send holds sum(recvCounts) elements on every rank;
// block b (recvCounts[b] elements at offset sum(recvCounts[0..b))) is reduced over all ranks
// and the result lands on rank b only.
//
// Steps (n-1 of them): a partial sum of each block travels once around the ring, collecting one
// rank's contribution per hop, and is timed to finish at its owner. At step s rank r sends the
// partial of block (r - s - 1) mod n to rank r+1 and receives the partial of block
// (r - s - 2) mod n from rank r-1. At s = 0 the "partial" sent is just r's own contribution, read
// straight from `send`. A received partial is combined with r's contribution to that block and
// forwarded in the next step; in the last step (s = n-2) the received block is (r - n) mod n = r,
// so r folds in its contribution directly into `recv` and is done.
//
// Buffers: segments are received straight into their destination (one of two chunk-sized
// partial buffers, alternating between steps because step s sends what step s-1 produced, or
// `recv` in the last step) and then `send`'s contribution is reduced into them -- op is
// commutative for every ReduceOp, so recv-op-own equals own-op-recv. `send` is never written.
//
// Pipelining: each block moves as segments of ~segmentBytes; the exchange of segment k+1 is
// posted before segment k is reduced, so transfer and reduction overlap.
//
// Bytes moved per rank: sends every block but its own (total - recvCounts[r] elements) and
// receives every block but r-1's (total - recvCounts[r-1]) -- about (n-1)/n of the buffer each
// way, in n-1 latency steps (plus segments).
#include <cstring>
#include <memory>
#include <vector>

#include "ops/collectives.h"
#include "kernels/reduce_cpu.h"
#include "ops/ring_internal.h"

namespace kolo::ops {

Status ringReducescatter(Transport& t, const void* send, void* recv,
                         const std::vector<size_t>& recvCounts, DataType dtype, ReduceOp op,
                         size_t segmentBytes) {
  const int n = t.size();
  const int r = t.rank();
  KOLO_REQUIRE(isValid(dtype), kInvalidArgument, "ring reducescatter: invalid dtype");
  KOLO_REQUIRE(recvCounts.size() == static_cast<size_t>(n), kInvalidArgument,
               "ring reducescatter: " + std::to_string(recvCounts.size()) +
                   " block counts for a group of " + std::to_string(n));
  const size_t esize = sizeOf(dtype);
  std::vector<size_t> offset(static_cast<size_t>(n) + 1, 0);
  size_t maxBlock = 0;
  for (int i = 0; i < n; ++i) {
    offset[i + 1] = offset[i] + recvCounts[i] * esize;
    if (recvCounts[i] * esize > maxBlock) maxBlock = recvCounts[i] * esize;
  }
  KOLO_REQUIRE(send != nullptr || offset[n] == 0, kInvalidArgument,
               "ring reducescatter: null send buffer");
  KOLO_REQUIRE(recv != nullptr || recvCounts[r] == 0, kInvalidArgument,
               "ring reducescatter: null receive buffer");
  const uint8_t* in = static_cast<const uint8_t*>(send);
  uint8_t* out = static_cast<uint8_t*>(recv);
  const size_t ownBytes = recvCounts[r] * esize;
  if (n == 1) {
    if (ownBytes > 0 && in != out) std::memcpy(out, in, ownBytes);
    return Status::ok();
  }
  if (offset[n] == 0) return Status::ok();  // every block empty: nothing to move anywhere

  const int next = (r + 1) % n;
  const int prev = (r + n - 1) % n;
  auto block = [&](int i) { return ((i % n) + n) % n; };
  const size_t segElems = internal::segmentElements(segmentBytes, esize, maxBlock / esize);
  const size_t segBytes = segElems * esize;
  // Two partial buffers, needed only when a block passes through (n > 2).
  // Not zero-filled: every byte is received before it is read.
  std::unique_ptr<uint8_t[]> partial[2];
  if (n > 2) {
    partial[0].reset(new uint8_t[maxBlock]);
    partial[1].reset(new uint8_t[maxBlock]);
  }

  const uint8_t* sendFrom = nullptr;
  for (int s = 0; s < n - 1; ++s) {
    const int sb = block(r - s - 1);
    const int rb = block(r - s - 2);
    const size_t sendLen = offset[sb + 1] - offset[sb];
    const size_t recvLen = offset[rb + 1] - offset[rb];
    if (s == 0) sendFrom = in + offset[sb];
    const bool last = s == n - 2;
    uint8_t* into = last ? out : partial[s % 2].get();
    const uint8_t* own = in + offset[rb];
    KOLO_RETURN_IF_ERROR(internal::pipelinedStep(
        t, next, prev, internal::kTagReducescatter, sendFrom, sendLen, recvLen, segBytes,
        [&](size_t k) { return into + k * segBytes; },
        [&](size_t, uint8_t* got, size_t off, size_t len) {
          kernels::reduceInto(got, own + off, len / esize, dtype, op);
        }));
    sendFrom = into;
  }
  return Status::ok();
}

}  // namespace kolo::ops
