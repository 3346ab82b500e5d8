// SPDX-License-Identifier: Apache-2.0
// Recursive-doubling allreduce: the latency-optimal allreduce for small messages.
//
// Steps, for a power-of-two rank count p: in step k (k = 0, 1, ..., log2(p) - 1) rank v and its
// partner v XOR 2^k swap their whole buffers and both combine the two. After step k every rank
// holds the reduction over its aligned group of 2^(k+1) ranks, so after log2(p) steps everyone
// holds the full result. Each step is one exchange in both directions at once.
//
// Determinism: both partners compute op(lower rank's data, higher rank's data) -- the same
// operands in the same order -- so they hold bitwise-identical buffers after every step, and by
// induction all ranks end bitwise identical (this matters for floats: min(-0, +0), NaN payloads,
// and non-commutative rounding corner cases). The combination tree is the balanced binary tree
// over ranks in order, ((x0 . x1) . (x2 . x3)) ..., the same tree halving_doubling.cc builds, so
// the two algorithms agree bitwise.
//
// Non-power-of-two n = p + rem: the fold of fold_internal.h. Ranks 2i+1 < 2 rem send their buffer
// to 2i and sit out; the p remaining ranks run the core above; 2i sends the result back to 2i+1.
// Two extra latency steps, only for the paired ranks.
//
// Bytes moved per rank: log2(p) * count * elemSize each way (plus count * elemSize for the fold)
// -- log2(p)/2 times the ring's traffic at p ranks, but in log2(p) steps instead of 2 (p-1).
// So it wins while latency dominates: small messages, many ranks. Scratch: one buffer's worth.
//
// The regions form runs the same steps over one buffer that holds several independent
// reductions (each region its own dtype and op: the coordinator's round carries its MIN byte
// vector and small SUM payloads in one message). Each region's result is bitwise what the
// one-region call over that region alone gives: the same tree, element by element.
#include <memory>
#include <vector>

#include "ops/collectives.h"
#include "ops/fold_internal.h"

namespace kolo::ops {

namespace {

// The algorithm over `bytes` of buffer; combine(mine, theirs, iAmLower) folds a partner's copy
// into this rank's (see the header: the lower rank's data is always the first operand).
template <typename Combine>
Status recursiveDoubling(Transport& t, uint8_t* base, size_t bytes, const Combine& combine) {
  const internal::Fold f = internal::makeFold(t.size(), t.rank());
  // Not zero-filled: every byte is received before it is read. Folded-out ranks need none.
  std::unique_ptr<uint8_t[]> scratch(f.coreRank >= 0 ? new uint8_t[bytes] : nullptr);
  KOLO_RETURN_IF_ERROR(
      internal::foldInWith(t, f, base, bytes, scratch.get(), internal::kTagAllreduce, combine));
  if (f.coreRank >= 0) {
    const int v = f.coreRank;
    for (int mask = 1; mask < f.p; mask <<= 1) {
      const int partner = f.realRank(v ^ mask);
      KOLO_RETURN_IF_ERROR(
          t.exchange({recvOp(partner, internal::kTagAllreduce, scratch.get(), bytes),
                      sendOp(partner, internal::kTagAllreduce, base, bytes)}));
      combine(base, scratch.get(), (v & mask) == 0);
    }
  }
  return internal::foldOut(t, f, base, bytes, internal::kTagAllreduce);
}

}  // namespace

Status recursiveDoublingAllreduce(Transport& t, void* data, size_t count, DataType dtype,
                                  ReduceOp op) {
  KOLO_REQUIRE(isValid(dtype), kInvalidArgument, "recursive doubling allreduce: invalid dtype");
  KOLO_REQUIRE(data != nullptr || count == 0, kInvalidArgument,
               "recursive doubling allreduce: null buffer");
  if (t.size() <= 1 || count == 0) return Status::ok();
  return recursiveDoubling(t, static_cast<uint8_t*>(data), count * sizeOf(dtype),
                           [&](uint8_t* mine, const uint8_t* theirs, bool lower) {
                             internal::combineOrdered(mine, theirs, count, dtype, op, lower);
                           });
}

Status recursiveDoublingAllreduceRegions(Transport& t, void* data, size_t bytes,
                                         const std::vector<ReduceRegion>& regions) {
  KOLO_REQUIRE(data != nullptr || bytes == 0, kInvalidArgument,
               "recursive doubling allreduce: null buffer");
  for (const ReduceRegion& r : regions) {
    KOLO_REQUIRE(isValid(r.dtype) && r.offset <= bytes &&
                     r.count <= (bytes - r.offset) / sizeOf(r.dtype),
                 kInvalidArgument, "recursive doubling allreduce: a region outside the buffer");
  }
  if (t.size() <= 1 || bytes == 0) return Status::ok();
  return recursiveDoubling(t, static_cast<uint8_t*>(data), bytes,
                           [&](uint8_t* mine, const uint8_t* theirs, bool lower) {
                             for (const ReduceRegion& r : regions) {
                               internal::combineOrdered(mine + r.offset, theirs + r.offset,
                                                        r.count, r.dtype, r.op, lower);
                             }
                           });
}

}  // namespace kolo::ops
