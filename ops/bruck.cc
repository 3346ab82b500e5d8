// SPDX-License-Identifier: Apache-2.0
// Bruck allgatherv: the latency-optimal allgather, for any rank count and per-rank block sizes.
//
// Steps: rank r first places its own block at offset sum(recvBytes[0..r)) of recv (skipped when
// send already aliases that position). Before step k (distance d = 2^k) rank r holds the d
// consecutive blocks r, r+1, ..., r+d-1 (mod n). In step k it sends its first
// c = min(d, n - d) of them to rank r - d and receives the c blocks r+d, ..., r+d+c-1 from rank
// r + d, which held them as its own first c. Now it holds min(2d, n) consecutive blocks; after
// ceil(log2 n) steps, all n. Non-powers of two need nothing special: the last step is short.
//
// Variable block sizes, no staging buffer: blocks are kept at their final offsets in recv. A run
// of consecutive blocks (mod n) is one contiguous byte range of recv, or two when it wraps past
// block n-1. Sender and receiver cut the same run at the same wrap point and skip the same empty
// pieces (every rank knows every block size), so their messages pair up in FIFO order. The
// textbook's final rotation disappears too: blocks already sit in rank order.
//
// Bytes moved per rank: receives total - recvBytes[r] and sends about as much, in
// ceil(log2 n) steps (the ring needs n-1). Both move the minimum bytes, so Bruck wins by
// latency for small blocks; for large ones the ring keeps each link to one neighbour, which
// pipelines better on a switched network.
#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/collectives.h"
#include "ops/ring_internal.h"

namespace kolo::ops {

Status bruckAllgatherv(Transport& t, const void* send, size_t sendBytes, void* recv,
                       const std::vector<size_t>& recvBytes) {
  const int n = t.size();
  const int r = t.rank();
  KOLO_REQUIRE(recvBytes.size() == static_cast<size_t>(n), kInvalidArgument,
               "bruck allgatherv: " + std::to_string(recvBytes.size()) +
                   " block sizes for a group of " + std::to_string(n));
  KOLO_REQUIRE(recvBytes[static_cast<size_t>(r)] == sendBytes, kInvalidArgument,
               "bruck allgatherv: rank " + std::to_string(r) + " sends " +
                   std::to_string(sendBytes) + " bytes but its block is " +
                   std::to_string(recvBytes[static_cast<size_t>(r)]));
  std::vector<size_t> offset(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) offset[i + 1] = offset[i] + recvBytes[static_cast<size_t>(i)];
  KOLO_REQUIRE(recv != nullptr || offset[n] == 0, kInvalidArgument,
               "bruck allgatherv: null receive buffer");
  KOLO_REQUIRE(send != nullptr || sendBytes == 0, kInvalidArgument,
               "bruck allgatherv: null send buffer");

  if (offset[n] == 0) return Status::ok();  // every block empty
  uint8_t* out = static_cast<uint8_t*>(recv);
  if (sendBytes > 0 && send != out + offset[r]) std::memcpy(out + offset[r], send, sendBytes);

  // The run of `c` blocks from block `first` as at most two (offset, length) byte ranges.
  auto pieces = [&](int first, int c, std::vector<P2POp>* ops, bool isSend, int peer) {
    auto add = [&](size_t off, size_t len) {
      if (len == 0) return;
      ops->push_back(isSend ? sendOp(peer, internal::kTagAllgather, out + off, len)
                            : recvOp(peer, internal::kTagAllgather, out + off, len));
    };
    const int end = first + c;
    if (end <= n) {
      add(offset[first], offset[end] - offset[first]);
    } else {
      add(offset[first], offset[n] - offset[first]);
      add(0, offset[end - n]);
    }
  };

  for (int d = 1; d < n; d <<= 1) {
    const int c = std::min(d, n - d);
    const int to = (r - d + n) % n;
    const int from = (r + d) % n;
    std::vector<P2POp> ops;
    pieces(from, c, &ops, false, from);
    pieces(r, c, &ops, true, to);
    KOLO_RETURN_IF_ERROR(t.exchange(ops));
  }
  return Status::ok();
}

}  // namespace kolo::ops
