// SPDX-License-Identifier: Apache-2.0
// Piggyback: small cached allreduces ride in the coordinator's control round.
//
// Why: over TCP a cached op costs two allreduces in a row -- the round's MIN of the cache view,
// then the op's own data -- each log2(N) message latencies. For a small op the data is a few
// bytes more in a message that is sent anyway, so the round carries it: the control buffer is
// [view bytes][payload], the payload holding one fixed-place region per eligible cache slot, and
// one recursive-doubling pass reduces the view with MIN and each region with SUM
// (ops::recursiveDoublingAllreduceRegions). A slot whose view byte comes back 1 was pending on
// every rank, so its region is the finished sum: the op completes from it, with no data step.
// A slot pending on only some ranks reduced garbage; its region is ignored and the op runs in a
// later round, its inputs untouched.
//
// Every rank must lay the payload out the same way without talking: the layout is a function of
// the response cache alone (identical on every rank: its slots are filled in lockstep) and of
// configuration every rank shares. A slot is eligible when its cached response is an allreduce
// in the global set, host memory, SUM or AVERAGE, no joined ranks, and the coordinator says the
// size fits (Coordinator::piggybackRule: not over shared memory, whose round costs microseconds,
// and not where the hierarchical allreduce would run). Eligible slots are taken in slot order
// until KOLO_CONTROL_PIGGYBACK_BYTES (default 4096, 0 = off) of payload are used; each region is
// 8-byte aligned. Results are the same bits on every rank; the summation tree is recursive
// doubling's, so a float sum may differ in the last place from what the transport's native
// allreduce would have given (as fusion or the algorithm choice may change it).
// Prescale is applied to the copy of the input, postscale and AVERAGE's 1/N to the output, as
// ops::execute does.
//
// Ownership: a Coordinator member, used only inside its rounds (serialized). Errors: none of its own
// (the exchange's errors are the round's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/response_cache.h"
#include "core/tensor_queue.h"
#include "ops/collectives.h"

namespace kolo {

class Piggyback {
 public:
  // Lays out the payload (the coordinator plans again whenever the cache's version moves).
  // `fits(bytes)`: whether a global allreduce of `bytes` may ride (the coordinator's rule; null
  // only with budgetBytes 0). `ranks` = global size.
  void plan(const ResponseCache& cache, size_t budgetBytes, int ranks,
            const std::function<bool(size_t)>& fits);
  size_t payloadBytes() const { return payloadBytes_; }
  bool carries(uint32_t bit) const { return bit < regionOf_.size() && regionOf_[bit] != kNone; }
  // Copies entry e (a cache hit on `bit`, carried) into the payload, prescaled.
  void fill(uint32_t bit, const TensorEntry& e, const Response& cached, uint8_t* payload) const;
  // The payload's regions for the combined reduction, at byte `base` of the control buffer.
  void regions(size_t base, std::vector<ops::ReduceRegion>* out) const;
  // Writes the reduced region of `bit` into e's output, postscaled and averaged.
  void deliver(uint32_t bit, const uint8_t* payload, const Response& cached, TensorEntry& e) const;

 private:
  static constexpr size_t kNone = ~size_t{0};
  std::vector<size_t> regionOf_;  // per cache bit: index into regions_, or kNone
  std::vector<ops::ReduceRegion> regions_;  // payload offset, element count and dtype per slot
  size_t payloadBytes_ = 0;
  int ranks_ = 1;
};

}  // namespace kolo
