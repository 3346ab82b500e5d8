// SPDX-License-Identifier: Apache-2.0
// Private helpers of the power-of-two allreduces (recursive_doubling.cc, halving_doubling.cc):
// folding a rank count that is not a power of two onto its largest power of two, and the one
// operand order every combine uses. Not a public header.
//
// The fold: with n = p + rem ranks (p the largest power of two <= n), the first 2*rem ranks pair
// up (0,1), (2,3), ...; each odd one sends its whole buffer to the even one below it, which
// combines them, and then sits out. The p remaining ranks -- the even ones below 2*rem and every
// rank from 2*rem on -- run the power-of-two core under "core ranks" 0..p-1, in the order of
// their real ranks. At the end each even rank below 2*rem sends the result to its odd partner.
// The odd ranks send the buffer once and receive it once; their partners carry the extra work.
//
// Thread safety: stateless. Blocking: each exchange waits with t.deadlineFromNow(), and its
// Status (naming the peer) is returned unchanged.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "kernels/reduce_cpu.h"
#include "ops/ring_internal.h"
#include "transport/transport.h"

namespace kolo::ops::internal {

struct Fold {
  int p = 1;          // ranks in the power-of-two core
  int rem = 0;        // n - p: ranks folded out
  int coreRank = -1;  // this rank's index in the core; -1 when folded out
  int realRank(int core) const { return core < rem ? 2 * core : core + rem; }
};

inline Fold makeFold(int n, int rank) {
  Fold f;
  while (f.p * 2 <= n) f.p *= 2;
  f.rem = n - f.p;
  if (rank < 2 * f.rem) {
    f.coreRank = rank % 2 == 0 ? rank / 2 : -1;
  } else {
    f.coreRank = rank - f.rem;
  }
  return f;
}

// mine = op(lower, higher), where `theirs` came from the partner: the lower rank's data is always
// the first operand, so both partners compute bitwise the same result (min/max of -0 and +0,
// NaN payloads and rounding all agree). `mine` and `theirs` must not overlap.
inline void combineOrdered(uint8_t* mine, const uint8_t* theirs, size_t count, DataType dtype,
                           ReduceOp op, bool iAmLower) {
  if (count == 0) return;
  if (iAmLower) {
    kernels::reduceInto(mine, theirs, count, dtype, op);
  } else {
    kernels::reduce3(mine, theirs, mine, count, dtype, op);
  }
}

// Fold-in step: odd ranks below 2*rem send `bytes` of data to rank-1, which receives them into
// scratch and combines (its own data first) with combine(mine, theirs, iAmLower = true).
// Nothing for the other ranks.
template <typename Combine>
Status foldInWith(Transport& t, const Fold& f, uint8_t* data, size_t bytes, uint8_t* scratch,
                  uint32_t tag, const Combine& combine) {
  const int r = t.rank();
  if (r >= 2 * f.rem) return Status::ok();
  if (r % 2 == 1) return t.exchange({sendOp(r - 1, tag, data, bytes)});
  KOLO_RETURN_IF_ERROR(t.exchange({recvOp(r + 1, tag, scratch, bytes)}));
  combine(data, scratch, true);
  return Status::ok();
}

// foldInWith for one buffer of `count` elements of one dtype and op.
inline Status foldIn(Transport& t, const Fold& f, uint8_t* data, size_t count, DataType dtype,
                     ReduceOp op, uint8_t* scratch, uint32_t tag) {
  return foldInWith(t, f, data, count * sizeOf(dtype), scratch, tag,
                    [&](uint8_t* mine, const uint8_t* theirs, bool lower) {
                      combineOrdered(mine, theirs, count, dtype, op, lower);
                    });
}

// Fold-out step: even ranks below 2*rem send the result to rank+1, which receives it in place.
inline Status foldOut(Transport& t, const Fold& f, uint8_t* data, size_t bytes, uint32_t tag) {
  const int r = t.rank();
  if (r >= 2 * f.rem) return Status::ok();
  if (r % 2 == 1) return t.exchange({recvOp(r - 1, tag, data, bytes)});
  return t.exchange({sendOp(r + 1, tag, data, bytes)});
}

}  // namespace kolo::ops::internal
