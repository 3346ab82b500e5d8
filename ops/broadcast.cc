// SPDX-License-Identifier: Apache-2.0
// Broadcast from any root, in place: three shapes for three regimes.
//
// Ranks are renumbered relative to the root, v = (r - root) mod n, so the root is always 0.
// Costs in the alpha-beta model: a message of b bytes costs alpha + b * beta; m is the message,
// L = ceil(log2 n), s the chain's segment and k = ceil(m / s) its segment count.
//
// Binomial tree, for small messages (< 64 KiB). Rank v receives once, from v minus its lowest
// set bit, then sends to v + 2^j for every 2^j below that bit (largest first, all in one batch)
// as long as the target exists. Round j doubles the number of ranks holding the data, so all n
// have it after L rounds; each non-root receives the message once and the root sends it L times.
// Time ~ L (alpha + m beta): latency bound, which is what matters when the message is small.
//
// Pipelined chain: root -> v=1 -> v=2 -> ... -> v=n-1 in segments of s = segmentBytes. A middle
// rank, in iteration k, receives segment k from its predecessor while forwarding segment k-1 to
// its successor (one batch), so all links are busy at once. Every rank receives the message once
// and sends it at most once -- the fewest bytes per rank possible -- and the time is
//   (n - 2 + k) (alpha + s beta) = (n - 2 + k) alpha + m beta + (n - 2) s beta,
// so the last rank gets its first byte only after n - 1 hops: at 1,024 ranks, ~1,000 sequential
// latencies, however short the message.
//
// Scatter + allgather (van de Geijn). The message is cut into n blocks in REAL rank order, block
// r = chunkRange(m, n, r) (base/tensor.h: the first m mod n blocks one byte longer, blocks empty
// when m < n), so that every block already sits at its final offset, as bruckAllgatherv wants:
//  1. Binomial scatter. Rank v receives, from v - 2^j (2^j its lowest set bit), the blocks of its
//     whole subtree: relative ranks [v, min(v + 2^j, n)). It then sends, for every 2^i below
//     that bit, largest first, in one batch, the blocks of relative ranks
//     [v + 2^i, min(v + 2^(i+1), n)) to v + 2^i. The root's subtree is everyone. A run of
//     relative ranks is a run of real ranks mod n: one contiguous byte range of the buffer, or
//     two when it wraps past block n-1. Sender and receiver cut a run at the same place (tail
//     piece first) and skip the same empty pieces -- both know every block size -- so their
//     messages pair up in FIFO order. L steps; the root sends (n-1)/n m in all (half the message
//     to v = 2^(L-1), a quarter to the next, ...), and the critical path carries the same.
//  2. bruckAllgatherv in place (each rank's send is its own block inside the buffer): L steps
//     in which every rank receives the (n-1)/n m it lacks and sends about as much. The root
//     receives too: it rewrites blocks it already had with the same bytes (they all come from
//     it), the price of reusing Bruck unchanged. A rank in the middle of the scatter tree also
//     gets back the blocks it forwarded: Bruck's n - 1 blocks, whatever the scatter left.
// Time ~ 2 L alpha + 2 (n-1)/n m beta, and at most 2 (n-1)/n m bytes in and out per rank.
//
// Which one. The chain's time minus scatter-allgather's is
//   (n - 2 + k - 2L) alpha + (n - 2) (s - m/n) beta.
// The beta term is positive exactly while m/n < s -- a rank's block is smaller than a chain
// segment -- i.e. while the chain's pipeline fill, (n-2) segments (n - 1 whole-message hops when
// m <= s), costs more than the second pass over (n-2)/n m that scatter-allgather adds. Past
// m = n s it turns against scatter-allgather and grows with m, while the chain's k alpha grows
// ~10x slower (alpha / (s beta) ~ 0.1 for alpha ~20-25 us, beta ~0.8-1 ns/B -- a 10 GbE link,
// or the loopback fit of bench/RESULTS.md -- and 256 KiB segments), so the crossover sits a little
// above m = n s (~9 s at 8 ranks). The alpha term counts latencies: the chain's n - 1 hops
// (plus k - 1 segments) against 2 L. Up to 7 ranks n - 1 <= 2 L (3 against 4 at 4 ranks, 6 and
// 6 at 7); from 8 on 2 L < n - 1 (but 8 and 8 at 9), and the gap grows: 7 against 6 at 8 ranks,
// 1,023 against 20 at 1,024.
// Hence p2pBroadcastShape (the data plane's auto, ops/select.cc), for m >= 64 KiB:
//  - n >= 8 (internal::kScatterAllgatherMinRanks) and m / n < s (or s = 0, an unsegmented
//    chain: (n-1) (alpha + m beta)): scatter-allgather. With 256 KiB segments: below 2 MiB at 8
//    ranks, 256 MiB at 1,024.
//  - otherwise the chain. For huge messages (m >= n s) it moves m per rank against ~2 m (64 MiB
//    at 8 ranks: ~1.02 m beta against ~1.75 m beta). Below 8 ranks scatter-allgather has no
//    fewer latencies and gains only the beta term, and measured over TCP on this 2-core machine
//    (kolo-bench, np 4, KOLO_SHM=off: a one-way 64 KiB hop cost ~5 us, a Bruck exchange step
//    ~25-30 us) the chain was ahead below 1 MiB: 12-22 against 114-156 us at 64 KiB, 165-243
//    against 265-447 us at 512 KiB. Where beta is larger than loopback's the beta term can win
//    at 4-7 ranks too (10 GbE: 256 KiB at 4 ranks ~690 us chain, ~400 us scatter-allgather), so
//    a cluster that measures so lowers kScatterAllgatherMinRanks. At 8 ranks (4 per core here:
//    bench/RESULTS.md's caveat for such sweeps) the chain was ahead up to 256 KiB (40-300 against 280-560
//    us) and scatter-allgather from 512 KiB (650-890 against 1,450-1,520 us; 1 MiB: 1,140-1,450
//    against 4,680-5,350 us); the rule follows the model there.
//  - n <= 3 in particular: n - 1 <= 2 hops, as many as the tree's rounds and fewer than
//    scatter-allgather's 2 L = 2 or 4 latencies, and the chain moves m per rank against
//    2 (n-1)/n m = m (n = 2: two half messages for one whole) or 4/3 m (n = 3).
// Below 64 KiB the tree (measured: bench/RESULTS.md), whatever n.
// The coordinator's control round (controlBroadcast in select.cc) takes the tree below 64 KiB
// and scatter-allgather from 64 KiB at n >= 4 (internal::kControlScatterAllgatherMinRanks)
// whatever the size: a round's worst case must stay O(log n) latencies -- a first round with
// thousands of new tensors at 1,024 ranks would wait ~1,000 hops on the chain -- and a response
// list is rarely past a few MiB, where the chain could win back at most
// (n-2)/n m beta - (n - 2 + k - 2L) alpha at small n. At 4-7 ranks that costs at most 2
// latencies more than the chain (5 ranks: 6 against 4). On this machine's loopback TCP, where a
// one-way hop is far cheaper than an exchange step, a 64 KiB list took ~100 us more at 4 ranks
// and ~250 us more at 8, once per round whose list reaches 64 KiB.
//
// p2pBroadcast picks by that rule; binomialBroadcast, chainBroadcast and
// scatterAllgatherBroadcast run one shape whatever the size (ops/select.cc's "tree" and "ring"
// for broadcast name the first two; auto may take the third).
#include <algorithm>
#include <vector>

#include "ops/collectives.h"
#include "ops/ring_internal.h"

namespace kolo::ops {
namespace {

Status checkArgs(const Transport& t, const void* data, size_t bytes, int root) {
  const int n = t.size();
  KOLO_REQUIRE(
      root >= 0 && root < n, kInvalidArgument,
      "broadcast: root " + std::to_string(root) + " outside group of " + std::to_string(n));
  KOLO_REQUIRE(data != nullptr || bytes == 0, kInvalidArgument, "broadcast: null buffer");
  return Status::ok();
}

Status treeBroadcast(Transport& t, uint8_t* data, size_t bytes, int root) {
  const int n = t.size();
  const int v = (t.rank() - root + n) % n;
  auto real = [&](int rel) { return (rel + root) % n; };
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      KOLO_RETURN_IF_ERROR(
          t.exchange({recvOp(real(v - mask), internal::kTagBroadcast, data, bytes)}));
      break;
    }
    mask <<= 1;
  }
  std::vector<P2POp> sends;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < n) sends.push_back(sendOp(real(v + mask), internal::kTagBroadcast, data, bytes));
  }
  return t.exchange(sends);
}

Status chainBroadcastImpl(Transport& t, uint8_t* data, size_t bytes, int root,
                          size_t segmentBytes) {
  const int n = t.size();
  const int v = (t.rank() - root + n) % n;
  const int prev = (t.rank() - 1 + n) % n;
  const int next = (t.rank() + 1) % n;
  const bool hasNext = v + 1 < n;
  const size_t seg = segmentBytes == 0 ? bytes : segmentBytes;
  const size_t segs = internal::ceilDiv(bytes, seg);
  auto segLen = [&](size_t k) { return bytes - k * seg < seg ? bytes - k * seg : seg; };
  if (v == 0) {
    // The root has everything: offer every segment at once; they drain in order (FIFO per tag).
    std::vector<P2POp> ops;
    ops.reserve(segs);
    for (size_t k = 0; k < segs; ++k) {
      ops.push_back(sendOp(next, internal::kTagBroadcast, data + k * seg, segLen(k)));
    }
    return t.exchange(ops);
  }
  for (size_t k = 0; k <= segs; ++k) {
    std::vector<P2POp> ops;
    if (k < segs) ops.push_back(recvOp(prev, internal::kTagBroadcast, data + k * seg, segLen(k)));
    if (k >= 1 && hasNext) {
      ops.push_back(sendOp(next, internal::kTagBroadcast, data + (k - 1) * seg, segLen(k - 1)));
    }
    KOLO_RETURN_IF_ERROR(t.exchange(ops));
  }
  return Status::ok();
}

Status scatterAllgatherImpl(Transport& t, uint8_t* data, size_t bytes, int root) {
  const int n = t.size();
  const int r = t.rank();
  const int v = (r - root + n) % n;
  auto real = [&](int rel) { return (rel + root) % n; };
  // Block b (real rank order) is [offset[b], offset[b + 1]) of data.
  std::vector<size_t> offset(static_cast<size_t>(n) + 1, bytes);
  std::vector<size_t> blockBytes(static_cast<size_t>(n));
  for (int b = 0; b < n; ++b) {
    size_t end = 0;
    chunkRange(bytes, n, b, &offset[b], &end);
    blockBytes[b] = end - offset[b];
  }
  // The blocks of relative ranks [from, to) as at most two byte ranges (tail piece first when
  // the run wraps past block n-1); empty pieces post nothing, on both sides alike.
  auto addRun = [&](std::vector<P2POp>* ops, bool isSend, int peer, int from, int to) {
    auto piece = [&](size_t off, size_t len) {
      if (len == 0) return;
      ops->push_back(isSend ? sendOp(peer, internal::kTagBroadcast, data + off, len)
                            : recvOp(peer, internal::kTagBroadcast, data + off, len));
    };
    const int first = real(from);
    const int end = first + (to - from);
    if (end <= n) {
      piece(offset[first], offset[end] - offset[first]);
    } else {
      piece(offset[first], bytes - offset[first]);
      piece(0, offset[end - n]);
    }
  };
  // Scatter: the subtree's blocks from the parent, then each child's subtree's blocks.
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      std::vector<P2POp> recv;
      addRun(&recv, false, real(v - mask), v, std::min(v + mask, n));
      KOLO_RETURN_IF_ERROR(t.exchange(recv));
      break;
    }
    mask <<= 1;
  }
  std::vector<P2POp> sends;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < n) addRun(&sends, true, real(v + mask), v + mask, std::min(v + 2 * mask, n));
  }
  KOLO_RETURN_IF_ERROR(t.exchange(sends));
  // Allgather: every rank's block is in place; Bruck fills in the others.
  return bruckAllgatherv(t, data + offset[r], blockBytes[r], data, blockBytes);
}

}  // namespace

BroadcastShape p2pBroadcastShape(int ranks, size_t bytes, size_t segmentBytes) {
  if (bytes < internal::kTreeBroadcastMaxBytes) return BroadcastShape::kTree;
  if (ranks >= internal::kScatterAllgatherMinRanks &&
      (segmentBytes == 0 || bytes / static_cast<size_t>(ranks) < segmentBytes)) {
    return BroadcastShape::kScatterAllgather;
  }
  return BroadcastShape::kChain;
}

Status p2pBroadcast(Transport& t, void* data, size_t bytes, int root, size_t segmentBytes) {
  switch (p2pBroadcastShape(t.size(), bytes, segmentBytes)) {
    case BroadcastShape::kTree:
      return binomialBroadcast(t, data, bytes, root);
    case BroadcastShape::kScatterAllgather:
      return scatterAllgatherBroadcast(t, data, bytes, root);
    default:
      return chainBroadcast(t, data, bytes, root, segmentBytes);
  }
}

Status binomialBroadcast(Transport& t, void* data, size_t bytes, int root) {
  KOLO_RETURN_IF_ERROR(checkArgs(t, data, bytes, root));
  if (t.size() == 1 || bytes == 0) return Status::ok();
  return treeBroadcast(t, static_cast<uint8_t*>(data), bytes, root);
}

Status chainBroadcast(Transport& t, void* data, size_t bytes, int root, size_t segmentBytes) {
  KOLO_RETURN_IF_ERROR(checkArgs(t, data, bytes, root));
  if (t.size() == 1 || bytes == 0) return Status::ok();
  return chainBroadcastImpl(t, static_cast<uint8_t*>(data), bytes, root, segmentBytes);
}

Status scatterAllgatherBroadcast(Transport& t, void* data, size_t bytes, int root) {
  KOLO_RETURN_IF_ERROR(checkArgs(t, data, bytes, root));
  if (t.size() == 1 || bytes == 0) return Status::ok();
  return scatterAllgatherImpl(t, static_cast<uint8_t*>(data), bytes, root);
}

}  // namespace kolo::ops
