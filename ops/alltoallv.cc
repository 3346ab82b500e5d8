// SPDX-License-Identifier: Apache-2.0
// Pairwise-exchange alltoallv.
//
// Rank r's send buffer holds n consecutive blocks, block d (sendBytes[d] bytes) destined for
// rank d; its receive buffer gets n consecutive blocks, block s (recvBytes[s] bytes) from rank s.
//
// Steps: the block for itself is a plain memcpy. Then n-1 steps: at step k (1..n-1) rank r
// sends its block for rank (r + k) mod n and receives the block of rank (r - k) mod n, both in
// one batch. In every step each rank has exactly one outgoing and one incoming partner, so no
// rank is flooded by n-1 simultaneous senders and each step is a permutation of the links.
// Zero-byte blocks are still exchanged as empty messages: the pairs stay in lock-step and a
// disagreement between sendBytes and the peer's recvBytes surfaces as an error (kMismatch on
// loopback) instead of a silent hang.
//
// Bytes moved per rank: sends sum(sendBytes) - sendBytes[r], receives sum(recvBytes) -
// recvBytes[r], in n-1 latency steps.
#include <cstring>
#include <vector>

#include "ops/collectives.h"
#include "ops/ring_internal.h"

namespace kolo::ops {

Status p2pAlltoallv(Transport& t, const void* send, const std::vector<size_t>& sendBytes,
                    void* recv, const std::vector<size_t>& recvBytes) {
  const int n = t.size();
  const int r = t.rank();
  KOLO_REQUIRE(
      sendBytes.size() == static_cast<size_t>(n) && recvBytes.size() == static_cast<size_t>(n),
      kInvalidArgument,
      "alltoallv: need " + std::to_string(n) + " send and receive sizes, got " +
          std::to_string(sendBytes.size()) + " and " + std::to_string(recvBytes.size()));
  KOLO_REQUIRE(sendBytes[r] == recvBytes[r], kInvalidArgument,
               "alltoallv: rank " + std::to_string(r) + " sends itself " +
                   std::to_string(sendBytes[r]) + " bytes but expects " +
                   std::to_string(recvBytes[r]));
  std::vector<size_t> sendOff(static_cast<size_t>(n) + 1, 0);
  std::vector<size_t> recvOff(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) {
    sendOff[i + 1] = sendOff[i] + sendBytes[i];
    recvOff[i + 1] = recvOff[i] + recvBytes[i];
  }
  KOLO_REQUIRE(send != nullptr || sendOff[n] == 0, kInvalidArgument, "alltoallv: null send");
  KOLO_REQUIRE(recv != nullptr || recvOff[n] == 0, kInvalidArgument, "alltoallv: null recv");
  // Empty messages still travel, so a null buffer (allowed when its total is zero) is replaced
  // by a valid address that is never read or written.
  uint8_t placeholder = 0;
  const uint8_t* in = send != nullptr ? static_cast<const uint8_t*>(send) : &placeholder;
  uint8_t* out = recv != nullptr ? static_cast<uint8_t*>(recv) : &placeholder;

  if (sendBytes[r] > 0) std::memcpy(out + recvOff[r], in + sendOff[r], sendBytes[r]);
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n;
    const int from = (r - k + n) % n;
    KOLO_RETURN_IF_ERROR(
        t.exchange({recvOp(from, internal::kTagAlltoall, out + recvOff[from], recvBytes[from]),
                    sendOp(to, internal::kTagAlltoall, in + sendOff[to], sendBytes[to])}));
  }
  return Status::ok();
}

}  // namespace kolo::ops
