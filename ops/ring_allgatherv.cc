// SPDX-License-Identifier: Apache-2.0
// Ring allgatherv: every rank contributes a block of its own size (possibly zero bytes) and
// ends with all blocks concatenated in rank order.
//
// Steps: rank r first places its own block at offset sum(recvBytes[0..r)) of recv (skipped when
// the caller already put it there, i.e. send aliases that position). Then n-1 steps around the
// ring: at step s rank r sends block (r - s) mod n to rank r+1 -- the one it received in the
// previous step, or its own at s = 0 -- and receives block (r - s - 1) mod n from rank r-1
// directly into its final position. No staging buffer and no reduction are needed, so each block
// moves as one message. Every rank knows all block sizes, so a zero-byte block is skipped by
// both ends of the link in the same step.
//
// Bytes moved per rank: sends total - recvBytes[r+1] and receives total - recvBytes[r] (each
// block except one crosses each link once), in n-1 latency steps.
#include <cstring>
#include <vector>

#include "ops/collectives.h"
#include "ops/ring_internal.h"

namespace kolo::ops {

Status ringAllgatherv(Transport& t, const void* send, size_t sendBytes, void* recv,
                      const std::vector<size_t>& recvBytes) {
  const int n = t.size();
  const int r = t.rank();
  KOLO_REQUIRE(recvBytes.size() == static_cast<size_t>(n), kInvalidArgument,
               "ring allgatherv: " + std::to_string(recvBytes.size()) +
                   " block sizes for a group of " + std::to_string(n));
  KOLO_REQUIRE(recvBytes[static_cast<size_t>(r)] == sendBytes, kInvalidArgument,
               "ring allgatherv: rank " + std::to_string(r) + " sends " +
                   std::to_string(sendBytes) + " bytes but its block is " +
                   std::to_string(recvBytes[static_cast<size_t>(r)]));
  std::vector<size_t> offset(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) offset[i + 1] = offset[i] + recvBytes[static_cast<size_t>(i)];
  KOLO_REQUIRE(recv != nullptr || offset[n] == 0, kInvalidArgument,
               "ring allgatherv: null receive buffer");
  KOLO_REQUIRE(send != nullptr || sendBytes == 0, kInvalidArgument,
               "ring allgatherv: null send buffer");

  if (offset[n] == 0) return Status::ok();  // every block empty
  uint8_t* out = static_cast<uint8_t*>(recv);
  if (sendBytes > 0 && send != out + offset[r]) std::memcpy(out + offset[r], send, sendBytes);
  if (n == 1) return Status::ok();

  const int next = (r + 1) % n;
  const int prev = (r + n - 1) % n;
  for (int s = 0; s < n - 1; ++s) {
    const int sendBlock = ((r - s) % n + n) % n;
    const int recvBlock = ((r - s - 1) % n + n) % n;
    std::vector<P2POp> ops;
    if (recvBytes[recvBlock] > 0) {
      ops.push_back(
          recvOp(prev, internal::kTagAllgather, out + offset[recvBlock], recvBytes[recvBlock]));
    }
    if (recvBytes[sendBlock] > 0) {
      ops.push_back(
          sendOp(next, internal::kTagAllgather, out + offset[sendBlock], recvBytes[sendBlock]));
    }
    KOLO_RETURN_IF_ERROR(t.exchange(ops));
  }
  return Status::ok();
}

}  // namespace kolo::ops
