// SPDX-License-Identifier: Apache-2.0
// Native shm collectives (see shm_collectives.h for the algorithm and its invariants).
//
// Why a failed wait aborts the whole group: after a timeout or a lost peer the ranks are at
// different chunks of different calls, and no later call could tell whose data sits in which
// slot. Aborting through the segment makes every other rank fail at once, naming the cause,
// instead of each of them timing out on its own. A descriptor mismatch, in contrast, is seen by
// every rank at the same chunk, so they all skip it the same way and the group stays usable.
#include "transport/shm/shm_collectives.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "base/tensor.h"
#include "kernels/copy.h"
#include "kernels/reduce_cpu.h"

namespace kolo::shm {
namespace {

enum Kind : uint32_t { kAllreduce = 1, kBroadcast = 2, kAllgatherv = 3, kReducescatter = 4 };

std::string describe(const CallDesc& d) {
  switch (d.kind) {
    case kAllreduce:
      return "allreduce of " + std::to_string(d.count) + " x " +
             toString(static_cast<DataType>(d.dtype)) + " (" +
             toString(static_cast<ReduceOp>(d.op)) + ")";
    case kBroadcast:
      return "broadcast of " + std::to_string(d.count) + " bytes from root " +
             std::to_string(d.root);
    case kAllgatherv:
      return "allgatherv of " + std::to_string(d.count) + " bytes in all";
    case kReducescatter:
      return "reducescatter of " + std::to_string(d.count) + " x " +
             toString(static_cast<DataType>(d.dtype)) + " (" +
             toString(static_cast<ReduceOp>(d.op)) + ")";
    default:
      return "an unknown collective (" + std::to_string(d.kind) + ")";
  }
}

bool sameCall(const CallDesc& a, const CallDesc& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.op == b.op && a.root == b.root &&
         a.count == b.count && a.chunk == b.chunk;
}

size_t ceilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

const uint8_t* inAt(const ReduceSpan& s, size_t within, size_t elem) {
  return static_cast<const uint8_t*>(s.in) + within * elem;
}
uint8_t* outAt(const ReduceSpan& s, size_t within, size_t elem) {
  return static_cast<uint8_t*>(s.out) + within * elem;
}

uint64_t othersMask(int n, int me) {
  const uint64_t all = n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  return all & ~(uint64_t{1} << me);
}

}  // namespace

std::atomic<uint32_t>& Collectives::counter(int r, Counter c) {
  RankBlock& b = seg_->rankBlock(r);
  return c == kPublished ? b.published : c == kReduced ? b.reduced : b.consumed;
}

void Collectives::set(Counter c, uint32_t value) {
  counter(seg_->rank(), c).store(value, std::memory_order_release);
  seg_->notifyOthers();
}

Status Collectives::waitAll(Counter c, uint32_t target, const char* what,
                            std::chrono::milliseconds timeout) {
  const int n = seg_->size();
  const int me = seg_->rank();
  auto reached = [&](int r) {
    return static_cast<int32_t>(counter(r, c).load(std::memory_order_acquire) - target) >= 0;
  };
  auto ready = [&] {
    for (int r = 0; r < n; ++r) {
      if (r != me && !reached(r)) return false;
    }
    return true;
  };
  auto why = [&](double secs) {
    char waited[32];
    std::snprintf(waited, sizeof(waited), "%.3g", secs);
    std::string msg = seg_->label(me) + " waited " + waited + " s in shm " + what + " for ";
    bool first = true;
    for (int r = 0; r < n; ++r) {
      if (r == me || reached(r)) continue;
      msg += (first ? "" : ", ") + seg_->label(r);
      first = false;
    }
    return msg;
  };
  Status s = seg_->waitUntil(ready, Clock::now() + timeout, othersMask(n, me), why);
  if (!s.isOk()) seg_->abort(s);
  return s;
}

namespace {
CallDesc reductionCall(uint32_t kind, DataType dtype, ReduceOp op, uint64_t count,
                       uint64_t chunk) {
  return CallDesc{kind, static_cast<int32_t>(dtype), static_cast<int32_t>(op), 0, count, chunk};
}
}  // namespace

Status Collectives::claim(uint32_t g, const CallDesc& mine, const char* what,
                          std::chrono::milliseconds timeout, uint8_t** slot) {
  KOLO_RETURN_IF_ERROR(waitAll(kConsumed, g - (kStagingBuffers - 1), what, timeout));
  const int b = static_cast<int>(g % kStagingBuffers);
  seg_->rankBlock(seg_->rank()).desc[b] = mine;
  *slot = seg_->staging(seg_->rank(), b);
  return Status::ok();
}

Status Collectives::publish(uint32_t g, const CallDesc& mine, const char* what,
                            std::chrono::milliseconds timeout) {
  set(kPublished, g + 1);
  KOLO_RETURN_IF_ERROR(waitAll(kPublished, g + 1, what, timeout));
  Status agreed = checkDescriptors(g, mine);
  if (!agreed.isOk()) skipTo(g);
  return agreed;
}

Status Collectives::checkDescriptors(uint32_t g, const CallDesc& mine) const {
  const int b = static_cast<int>(g % kStagingBuffers);
  for (int r = 0; r < seg_->size(); ++r) {
    if (r == seg_->rank()) continue;
    const CallDesc& theirs = seg_->rankBlock(r).desc[b];
    if (!sameCall(theirs, mine)) {
      return Status(ErrorCode::kMismatch,
                    "shm: " + seg_->label(seg_->rank()) + " called " + describe(mine) + " but " +
                        seg_->label(r) + " called " + describe(theirs) +
                        (theirs.chunk != mine.chunk ? " (at a different chunk)" : ""));
    }
  }
  return Status::ok();
}

void Collectives::skipTo(uint32_t g) {
  RankBlock& me = seg_->rankBlock(seg_->rank());
  me.published.store(g + 1, std::memory_order_release);
  me.reduced.store(g + 1, std::memory_order_release);
  me.consumed.store(g + 1, std::memory_order_release);
  seg_->notifyOthers();
}

Status Collectives::allreduce(void* data, size_t count, DataType dtype, ReduceOp op,
                              std::chrono::milliseconds timeout) {
  return allreduceSpans({ReduceSpan{data, data, count}}, dtype, op, timeout);
}

Status Collectives::allreduceSpans(const std::vector<ReduceSpan>& spans, DataType dtype,
                                   ReduceOp op, std::chrono::milliseconds timeout) {
  const int n = seg_->size();
  const int me = seg_->rank();
  const FlatSpans flat(spans);
  const size_t count = flat.total();
  if (n == 1) {
    flat.pieces(0, count, [&](size_t, const ReduceSpan& s, size_t within, size_t m) {
      const size_t elem = sizeOf(dtype);
      if (s.out != s.in)
        kernels::copyBytes(outAt(s, within, elem), inAt(s, within, elem), m * elem);
    });
    return Status::ok();
  }
  if (count == 0) return Status::ok();
  const size_t elem = sizeOf(dtype);
  const size_t chunkElems = seg_->chunkBytes() / elem;
  const size_t chunks = ceilDiv(count, chunkElems);
  if (count * elem <= std::min(seg_->chunkBytes(), kOneShotMaxBytes)) {
    return allreduceOneShot(flat, dtype, op, timeout);
  }

  // Copies the other ranks' reduced parts of chunk g (elements [first, first+len)) out.
  auto copyOut = [&](uint32_t g, size_t first, size_t len) {
    const int b = static_cast<int>(g % kStagingBuffers);
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      size_t pb = 0, pe = 0;
      chunkRange(len, n, q, &pb, &pe);
      const uint8_t* part = seg_->staging(q, b) + pb * elem;
      flat.pieces(first + pb, pe - pb,
                  [&](size_t pos, const ReduceSpan& s, size_t within, size_t m) {
                    kernels::copyBytes(outAt(s, within, elem), part + pos * elem, m * elem);
                  });
    }
  };
  bool pending = false;
  uint32_t pendingG = 0;
  size_t pendingFirst = 0, pendingLen = 0;
  for (size_t k = 0; k < chunks; ++k) {
    const uint32_t g = seq_++;
    const int b = static_cast<int>(g % kStagingBuffers);
    const size_t first = k * chunkElems;
    const size_t len = std::min(chunkElems, count - first);
    const CallDesc mine = reductionCall(kAllreduce, dtype, op, count, k);
    uint8_t* slot = nullptr;
    KOLO_RETURN_IF_ERROR(claim(g, mine, "allreduce", timeout, &slot));
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      size_t pb = 0, pe = 0;
      chunkRange(len, n, q, &pb, &pe);
      uint8_t* part = slot + pb * elem;
      flat.pieces(first + pb, pe - pb,
                  [&](size_t pos, const ReduceSpan& s, size_t within, size_t m) {
                    kernels::copyBytes(part + pos * elem, inAt(s, within, elem), m * elem);
                  });
    }
    KOLO_RETURN_IF_ERROR(publish(g, mine, "allreduce", timeout));
    size_t pb = 0, pe = 0;
    chunkRange(len, n, me, &pb, &pe);
    // This rank's part, piece by piece (a piece lies in one span): its own input is read where
    // the tensor is, the result goes to the part's position in its slot and to the tensor.
    flat.pieces(first + pb, pe - pb, [&](size_t pos, const ReduceSpan& s, size_t within, size_t m) {
      const uint8_t* own = inAt(s, within, elem);
      uint8_t* result = slot + (pb + pos) * elem;
      auto input = [&](int q) -> const uint8_t* {
        return q == me ? own : seg_->staging(q, b) + (pb + pos) * elem;
      };
      kernels::reduce3(result, input(0), input(1), m, dtype, op);
      for (int q = 2; q < n; ++q) kernels::reduceInto(result, input(q), m, dtype, op);
      kernels::copyBytes(outAt(s, within, elem), result, m * elem);
    });
    set(kReduced, g + 1);
    if (pending) {
      // Every rank published chunk g after reducing chunk g-1: this wait returns at once.
      KOLO_RETURN_IF_ERROR(waitAll(kReduced, pendingG + 1, "allreduce", timeout));
      copyOut(pendingG, pendingFirst, pendingLen);
      set(kConsumed, pendingG + 1);
    }
    pending = true;
    pendingG = g;
    pendingFirst = first;
    pendingLen = len;
  }
  KOLO_RETURN_IF_ERROR(waitAll(kReduced, pendingG + 1, "allreduce", timeout));
  copyOut(pendingG, pendingFirst, pendingLen);
  set(kConsumed, pendingG + 1);
  return Status::ok();
}

Status Collectives::allreduceOneShot(const FlatSpans& flat, DataType dtype, ReduceOp op,
                                     std::chrono::milliseconds timeout) {
  const int n = seg_->size();
  const int me = seg_->rank();
  const size_t elem = sizeOf(dtype);
  const size_t count = flat.total();
  const uint32_t g = seq_++;
  const int b = static_cast<int>(g % kStagingBuffers);
  const CallDesc mine = reductionCall(kAllreduce, dtype, op, count, 0);
  uint8_t* slot = nullptr;
  KOLO_RETURN_IF_ERROR(claim(g, mine, "allreduce", timeout, &slot));
  flat.pieces(0, count, [&](size_t pos, const ReduceSpan& s, size_t within, size_t m) {
    kernels::copyBytes(slot + pos * elem, inAt(s, within, elem), m * elem);
  });
  KOLO_RETURN_IF_ERROR(publish(g, mine, "allreduce", timeout));
  // Every rank folds every input, in rank order: the same bits everywhere, one wait in all.
  flat.pieces(0, count, [&](size_t pos, const ReduceSpan& s, size_t within, size_t m) {
    uint8_t* out = outAt(s, within, elem);
    auto input = [&](int q) { return seg_->staging(q, b) + pos * elem; };
    kernels::reduce3(out, input(0), input(1), m, dtype, op);
    for (int q = 2; q < n; ++q) kernels::reduceInto(out, input(q), m, dtype, op);
  });
  seg_->rankBlock(me).reduced.store(g + 1, std::memory_order_release);
  set(kConsumed, g + 1);
  return Status::ok();
}

Status Collectives::broadcast(void* data, size_t bytes, int root,
                              std::chrono::milliseconds timeout) {
  const int n = seg_->size();
  const int me = seg_->rank();
  KOLO_REQUIRE(
      root >= 0 && root < n, kInvalidArgument,
      "shm broadcast: root " + std::to_string(root) + " outside group of " + std::to_string(n));
  if (n == 1 || bytes == 0) return Status::ok();
  const size_t chunk = seg_->chunkBytes();
  auto* buf = static_cast<uint8_t*>(data);
  for (size_t k = 0, chunks = ceilDiv(bytes, chunk); k < chunks; ++k) {
    const uint32_t g = seq_++;
    const int b = static_cast<int>(g % kStagingBuffers);
    const size_t first = k * chunk;
    const size_t len = std::min(chunk, bytes - first);
    const CallDesc mine{kBroadcast, 0, 0, root, bytes, k};
    uint8_t* slot = nullptr;
    KOLO_RETURN_IF_ERROR(claim(g, mine, "broadcast", timeout, &slot));
    if (me == root) kernels::copyBytes(slot, buf + first, len);
    KOLO_RETURN_IF_ERROR(publish(g, mine, "broadcast", timeout));
    if (me != root) kernels::copyBytes(buf + first, seg_->staging(root, b), len);
    seg_->rankBlock(me).reduced.store(g + 1, std::memory_order_release);
    set(kConsumed, g + 1);
  }
  return Status::ok();
}

Status Collectives::allgatherv(const void* send, size_t sendBytes, void* recv,
                               const std::vector<size_t>& recvBytes,
                               std::chrono::milliseconds timeout) {
  const int n = seg_->size();
  const int me = seg_->rank();
  KOLO_REQUIRE(recvBytes.size() == static_cast<size_t>(n), kInvalidArgument,
               "shm allgatherv: " + std::to_string(recvBytes.size()) + " block sizes for " +
                   std::to_string(n) + " ranks");
  KOLO_REQUIRE(recvBytes[static_cast<size_t>(me)] == sendBytes, kInvalidArgument,
               "shm allgatherv: sending " + std::to_string(sendBytes) +
                   " bytes but this rank's block is " +
                   std::to_string(recvBytes[static_cast<size_t>(me)]));
  std::vector<size_t> offset(static_cast<size_t>(n), 0);
  size_t total = 0, largest = 0;
  for (int q = 0; q < n; ++q) {
    offset[static_cast<size_t>(q)] = total;
    total += recvBytes[static_cast<size_t>(q)];
    largest = std::max(largest, recvBytes[static_cast<size_t>(q)]);
  }
  auto* out = static_cast<uint8_t*>(recv);
  uint8_t* own = out + offset[static_cast<size_t>(me)];
  if (sendBytes > 0 && send != own) kernels::copyBytes(own, send, sendBytes);
  if (n == 1) return Status::ok();
  const size_t chunk = seg_->chunkBytes();
  for (size_t j = 0, rounds = ceilDiv(largest, chunk); j < rounds; ++j) {
    const uint32_t g = seq_++;
    const int b = static_cast<int>(g % kStagingBuffers);
    const CallDesc mine{kAllgatherv, 0, 0, 0, total, j};
    uint8_t* slot = nullptr;
    KOLO_RETURN_IF_ERROR(claim(g, mine, "allgatherv", timeout, &slot));
    const size_t lo = j * chunk;
    if (lo < sendBytes) kernels::copyBytes(slot, own + lo, std::min(chunk, sendBytes - lo));
    KOLO_RETURN_IF_ERROR(publish(g, mine, "allgatherv", timeout));
    for (int q = 0; q < n; ++q) {
      const size_t block = recvBytes[static_cast<size_t>(q)];
      if (q == me || lo >= block) continue;
      kernels::copyBytes(out + offset[static_cast<size_t>(q)] + lo, seg_->staging(q, b),
                         std::min(chunk, block - lo));
    }
    seg_->rankBlock(me).reduced.store(g + 1, std::memory_order_release);
    set(kConsumed, g + 1);
  }
  return Status::ok();
}

Status Collectives::reducescatter(const void* send, void* recv,
                                  const std::vector<size_t>& recvCounts, DataType dtype,
                                  ReduceOp op, std::chrono::milliseconds timeout) {
  const int n = seg_->size();
  const int me = seg_->rank();
  KOLO_REQUIRE(recvCounts.size() == static_cast<size_t>(n), kInvalidArgument,
               "shm reducescatter: " + std::to_string(recvCounts.size()) + " counts for " +
                   std::to_string(n) + " ranks");
  const size_t elem = sizeOf(dtype);
  std::vector<size_t> first(static_cast<size_t>(n), 0);
  size_t total = 0, largest = 0;
  for (int q = 0; q < n; ++q) {
    first[static_cast<size_t>(q)] = total;
    total += recvCounts[static_cast<size_t>(q)];
    largest = std::max(largest, recvCounts[static_cast<size_t>(q)]);
  }
  const auto* in = static_cast<const uint8_t*>(send);
  auto* out = static_cast<uint8_t*>(recv);
  const size_t mineCount = recvCounts[static_cast<size_t>(me)];
  if (n == 1) {
    if (mineCount > 0) kernels::copyBytes(out, in, mineCount * elem);
    return Status::ok();
  }
  // Each round moves up to `region` elements of every block; rank r's slot holds its
  // contribution to block q at region q.
  const size_t region = std::max<size_t>(1, seg_->chunkBytes() / (static_cast<size_t>(n) * elem));
  for (size_t j = 0, rounds = ceilDiv(largest, region); j < rounds; ++j) {
    const uint32_t g = seq_++;
    const int b = static_cast<int>(g % kStagingBuffers);
    const size_t lo = j * region;
    const CallDesc mine = reductionCall(kReducescatter, dtype, op, total, j);
    uint8_t* slot = nullptr;
    KOLO_RETURN_IF_ERROR(claim(g, mine, "reducescatter", timeout, &slot));
    for (int q = 0; q < n; ++q) {
      const size_t block = recvCounts[static_cast<size_t>(q)];
      if (q == me || lo >= block) continue;
      kernels::copyBytes(slot + q * region * elem, in + (first[static_cast<size_t>(q)] + lo) * elem,
                         std::min(region, block - lo) * elem);
    }
    KOLO_RETURN_IF_ERROR(publish(g, mine, "reducescatter", timeout));
    if (lo < mineCount) {
      const size_t m = std::min(region, mineCount - lo);
      auto input = [&](int q) -> const uint8_t* {
        return q == me ? in + (first[static_cast<size_t>(me)] + lo) * elem
                       : seg_->staging(q, b) + me * region * elem;
      };
      kernels::reduce3(out + lo * elem, input(0), input(1), m, dtype, op);
      for (int q = 2; q < n; ++q) kernels::reduceInto(out + lo * elem, input(q), m, dtype, op);
    }
    seg_->rankBlock(me).reduced.store(g + 1, std::memory_order_release);
    set(kConsumed, g + 1);
  }
  return Status::ok();
}

}  // namespace kolo::shm
