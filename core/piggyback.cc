// SPDX-License-Identifier: Apache-2.0
#include "core/piggyback.h"

#include <cstring>

#include "kernels/reduce_cpu.h"
#include "ops/batch_plan.h"

namespace kolo {
namespace {

bool eligible(const Response& r) {
  return r.kind == Response::Kind::kOk && r.type == OpType::kAllreduce && r.processSet == 0 &&
         r.device < 0 && r.joinedRanks.empty() && r.group < 0 &&
         (r.reduceOp == ReduceOp::kSum || r.reduceOp == ReduceOp::kAverage);
}

}  // namespace

void Piggyback::plan(const ResponseCache& cache, size_t budgetBytes, int ranks,
                     const std::function<bool(size_t)>& fits) {
  regionOf_.assign(cache.capacity(), kNone);
  regions_.clear();
  payloadBytes_ = 0;
  ranks_ = ranks;
  if (budgetBytes == 0 || ranks < 2) return;
  for (uint32_t bit : cache.bitsInUse()) {
    const Response& r = cache.response(bit);
    if (!eligible(r)) continue;
    const size_t count = elementsOf(r.shape);
    const size_t bytes = count * sizeOf(r.dtype);
    const size_t at = (payloadBytes_ + 7) / 8 * 8;
    if (bytes == 0 || at + bytes > budgetBytes || !fits(bytes)) continue;
    regionOf_[bit] = regions_.size();
    regions_.push_back(ops::ReduceRegion{at, count, r.dtype, ReduceOp::kSum});
    payloadBytes_ = at + bytes;
  }
}

void Piggyback::fill(uint32_t bit, const TensorEntry& e, const Response& cached,
                     uint8_t* payload) const {
  const ops::ReduceRegion& r = regions_[regionOf_[bit]];
  uint8_t* dst = payload + r.offset;
  std::memcpy(dst, e.input.data, r.count * sizeOf(r.dtype));
  kernels::scaleInPlace(dst, r.count, r.dtype, cached.prescale);
}

void Piggyback::regions(size_t base, std::vector<ops::ReduceRegion>* out) const {
  for (ops::ReduceRegion r : regions_) {
    r.offset += base;
    out->push_back(r);
  }
}

void Piggyback::deliver(uint32_t bit, const uint8_t* payload, const Response& cached,
                        TensorEntry& e) const {
  const ops::ReduceRegion& r = regions_[regionOf_[bit]];
  void* dst = ops::outputOf(e);
  std::memcpy(dst, payload + r.offset, r.count * sizeOf(r.dtype));
  kernels::scaleInPlace(dst, r.count, r.dtype,
                        kernels::averagedPostscale(cached.postscale, cached.reduceOp, ranks_));
}

}  // namespace kolo
