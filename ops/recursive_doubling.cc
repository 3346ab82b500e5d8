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
#include <memory>

#include "ops/collectives.h"
#include "ops/fold_internal.h"

namespace kolo::ops {

Status recursiveDoublingAllreduce(Transport& t, void* data, size_t count, DataType dtype,
                                  ReduceOp op) {
  KOLO_REQUIRE(isValid(dtype), kInvalidArgument, "recursive doubling allreduce: invalid dtype");
  KOLO_REQUIRE(data != nullptr || count == 0, kInvalidArgument,
               "recursive doubling allreduce: null buffer");
  const int n = t.size();
  if (n <= 1 || count == 0) return Status::ok();
  const size_t bytes = count * sizeOf(dtype);
  uint8_t* base = static_cast<uint8_t*>(data);
  const internal::Fold f = internal::makeFold(n, t.rank());
  // Not zero-filled: every byte is received before it is read. Folded-out ranks need none.
  std::unique_ptr<uint8_t[]> scratch(f.coreRank >= 0 ? new uint8_t[bytes] : nullptr);

  KOLO_RETURN_IF_ERROR(
      internal::foldIn(t, f, base, count, dtype, op, scratch.get(), internal::kTagAllreduce));
  if (f.coreRank >= 0) {
    const int v = f.coreRank;
    for (int mask = 1; mask < f.p; mask <<= 1) {
      const int partner = f.realRank(v ^ mask);
      KOLO_RETURN_IF_ERROR(
          t.exchange({recvOp(partner, internal::kTagAllreduce, scratch.get(), bytes),
                      sendOp(partner, internal::kTagAllreduce, base, bytes)}));
      internal::combineOrdered(base, scratch.get(), count, dtype, op, (v & mask) == 0);
    }
  }
  return internal::foldOut(t, f, base, bytes, internal::kTagAllreduce);
}

}  // namespace kolo::ops
