// Broadcast from any root, in place: two shapes for two regimes.
//
// Ranks are renumbered relative to the root, v = (r - root) mod n, so the root is always 0.
//
// Small messages (< 64 KiB): binomial tree. Rank v receives once, from v minus its lowest set
// bit, then sends to v + 2^j for every 2^j below that bit (largest first, all in one batch) as
// long as the target exists. Round j doubles the number of ranks holding the data, so all n have
// it after ceil(log2 n) rounds; each non-root receives the message once and the root sends it
// ceil(log2 n) times. Latency ~ log2(n) hops, which is what matters when the message is small.
//
// Large messages: pipelined chain root -> v=1 -> v=2 -> ... -> v=n-1 in segments of
// ~segmentBytes. A middle rank, in iteration k, receives segment k from its predecessor while
// forwarding segment k-1 to its successor (one batch), so all links are busy at once: the time is
// about (bytes + (n-2) * segment) / bandwidth instead of log2(n) * bytes / bandwidth. Every rank
// receives the message once and sends it at most once -- the fewest bytes per rank possible.
//
// p2pBroadcast picks by size; binomialBroadcast and chainBroadcast run one shape whatever the
// size (ops/select.cc's "tree" and "ring" for broadcast).
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

}  // namespace

Status p2pBroadcast(Transport& t, void* data, size_t bytes, int root, size_t segmentBytes) {
  if (bytes < internal::kTreeBroadcastMaxBytes) return binomialBroadcast(t, data, bytes, root);
  return chainBroadcast(t, data, bytes, root, segmentBytes);
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

}  // namespace kolo::ops
