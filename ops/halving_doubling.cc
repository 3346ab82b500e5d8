// SPDX-License-Identifier: Apache-2.0
// Halving-doubling (Rabenseifner) allreduce: for medium messages, where recursive doubling moves
// too many bytes and the ring takes too many steps.
//
// Segment math: on a power-of-two rank count p the buffer is cut into p chunks with chunkRange
// (the first count % p one element longer; with count < p some are empty). Every rank keeps a
// window of chunks [lo, hi), at first all p.
//
// Phase 1, reduce-scatter by recursive halving (log2 p steps). In step k (mask = 2^k, k rising)
// core rank v and its partner v XOR mask hold the same window (they agree on every lower bit),
// cut it in two halves; the rank whose bit k is 0 keeps the lower half, the other the upper
// half. Each sends the half it gives up and receives the partner's copy of the half it keeps,
// which it combines into its own. After log2 p steps rank v holds one chunk, reduced over all p
// ranks (chunk index = v with its bits reversed).
//
// Phase 2, allgather by recursive doubling (log2 p steps): the same steps in reverse order (mask
// falling). Each rank sends its window to the partner and receives the sibling half straight
// into place, so the window doubles back to the whole buffer. No combine, no scratch.
//
// Determinism: each combine is op(lower rank's data, higher rank's data). With k rising, chunk
// by chunk the combination tree is the balanced binary tree over ranks in order -- the one
// recursive doubling builds -- so the two algorithms agree bitwise. Each chunk is reduced on one
// rank only and then copied, so every rank ends bitwise identical.
//
// Non-power-of-two n = p + rem: the fold of fold_internal.h (ranks 2i+1 < 2 rem hand their whole
// buffer to 2i before phase 1 and get the result after phase 2).
//
// Bytes moved per core rank: (p-1)/p * count * elemSize each way in each phase, 2 (p-1)/p in all
// -- the ring's amount -- in 2 log2(p) steps instead of 2 (p-1). The fold adds count * elemSize
// for the paired ranks. Messages are not segmented (the ring stays the choice for large ones).
// Scratch: the largest half received in step 0 (the whole buffer on a rank taking in a fold).
#include <memory>
#include <vector>

#include "ops/collectives.h"
#include "ops/fold_internal.h"

namespace kolo::ops {

Status halvingDoublingAllreduce(Transport& t, void* data, size_t count, DataType dtype,
                                ReduceOp op) {
  KOLO_REQUIRE(isValid(dtype), kInvalidArgument, "halving-doubling allreduce: invalid dtype");
  KOLO_REQUIRE(data != nullptr || count == 0, kInvalidArgument,
               "halving-doubling allreduce: null buffer");
  const int n = t.size();
  if (n <= 1 || count == 0) return Status::ok();
  const size_t esize = sizeOf(dtype);
  const size_t bytes = count * esize;
  uint8_t* base = static_cast<uint8_t*>(data);
  const internal::Fold f = internal::makeFold(n, t.rank());
  const int p = f.p;

  // Byte offset of chunk i's start; chunkStart(p) == bytes.
  auto chunkStart = [&](int i) -> size_t {
    if (i >= p) return bytes;
    size_t b = 0, e = 0;
    chunkRange(count, p, i, &b, &e);
    return b * esize;
  };

  size_t scratchBytes = 0;
  if (f.coreRank >= 0) {
    scratchBytes = chunkStart(p / 2);  // step 0's lower half: never the shorter one
    if (t.rank() < 2 * f.rem) scratchBytes = bytes;
  }
  std::unique_ptr<uint8_t[]> scratch(scratchBytes > 0 ? new uint8_t[scratchBytes] : nullptr);

  KOLO_RETURN_IF_ERROR(
      internal::foldIn(t, f, base, count, dtype, op, scratch.get(), internal::kTagAllreduce));
  if (f.coreRank >= 0) {
    const int v = f.coreRank;
    std::vector<int> windowLo, windowHi;  // the window before each phase-1 step
    int lo = 0, hi = p;
    for (int mask = 1; mask < p; mask <<= 1) {
      const int partner = f.realRank(v ^ mask);
      const int mid = lo + (hi - lo) / 2;
      const bool lower = (v & mask) == 0;
      const int keepLo = lower ? lo : mid, keepHi = lower ? mid : hi;
      const int giveLo = lower ? mid : lo, giveHi = lower ? hi : mid;
      const size_t keepOff = chunkStart(keepLo), keepLen = chunkStart(keepHi) - keepOff;
      const size_t giveOff = chunkStart(giveLo), giveLen = chunkStart(giveHi) - giveOff;
      std::vector<P2POp> ops;
      if (keepLen > 0)
        ops.push_back(recvOp(partner, internal::kTagAllreduce, scratch.get(), keepLen));
      if (giveLen > 0)
        ops.push_back(sendOp(partner, internal::kTagAllreduce, base + giveOff, giveLen));
      KOLO_RETURN_IF_ERROR(t.exchange(ops));
      internal::combineOrdered(base + keepOff, scratch.get(), keepLen / esize, dtype, op, lower);
      windowLo.push_back(lo);
      windowHi.push_back(hi);
      lo = keepLo;
      hi = keepHi;
    }
    for (int mask = p / 2; mask >= 1; mask >>= 1) {
      const int partner = f.realRank(v ^ mask);
      const int outerLo = windowLo.back(), outerHi = windowHi.back();
      windowLo.pop_back();
      windowHi.pop_back();
      // The partner holds the other half of the outer window.
      const int otherLo = lo == outerLo ? hi : outerLo;
      const int otherHi = lo == outerLo ? outerHi : lo;
      const size_t mineOff = chunkStart(lo), mineLen = chunkStart(hi) - mineOff;
      const size_t otherOff = chunkStart(otherLo), otherLen = chunkStart(otherHi) - otherOff;
      std::vector<P2POp> ops;
      if (otherLen > 0) {
        ops.push_back(recvOp(partner, internal::kTagAllreduce, base + otherOff, otherLen));
      }
      if (mineLen > 0)
        ops.push_back(sendOp(partner, internal::kTagAllreduce, base + mineOff, mineLen));
      KOLO_RETURN_IF_ERROR(t.exchange(ops));
      lo = outerLo;
      hi = outerHi;
    }
  }
  return internal::foldOut(t, f, base, bytes, internal::kTagAllreduce);
}

}  // namespace kolo::ops
