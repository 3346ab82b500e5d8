// SPDX-License-Identifier: Apache-2.0
#include "core/response_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace kolo {
namespace {

// Bitwise comparison: a cached NaN scale stays a hit when the same NaN is sent again.
bool sameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Everything negotiation looks at, from this rank's point of view. groupId is left out on purpose:
// it is a per-rank counter that changes on every grouped call.
bool sameParameters(const Request& a, const Request& b) {
  return a.type == b.type && a.dtype == b.dtype && a.shape == b.shape && a.reduceOp == b.reduceOp &&
         sameBits(a.prescale, b.prescale) && sameBits(a.postscale, b.postscale) &&
         a.root == b.root && a.device == b.device && a.processSet == b.processSet &&
         a.splits == b.splits && a.groupSize == b.groupSize && a.refusal == b.refusal;
}

}  // namespace

const char* toString(ResponseCache::Lookup lookup) {
  switch (lookup) {
    case ResponseCache::Lookup::kMiss:
      return "miss";
    case ResponseCache::Lookup::kHit:
      return "hit";
    case ResponseCache::Lookup::kChanged:
      return "changed";
  }
  return "unknown-lookup";
}

ResponseCache::ResponseCache(size_t capacity)
    : capacity_(std::min<size_t>(capacity, std::numeric_limits<uint32_t>::max())) {}

bool ResponseCache::isCacheable(const Response& r) {
  if (r.kind != Response::Kind::kOk || !r.joinedRanks.empty()) return false;
  switch (r.type) {
    case OpType::kAllreduce:
    case OpType::kAllgather:
    case OpType::kBroadcast:
    case OpType::kAlltoall:
    case OpType::kReducescatter:
      return true;
    default:
      return false;
  }
}

ResponseCache::Lookup ResponseCache::lookup(const Request& localRequest, uint32_t* bit) const {
  auto it = byKey_.find(keyOf(localRequest));
  if (it == byKey_.end()) return Lookup::kMiss;
  if (bit) *bit = it->second;
  return sameParameters(slots_[it->second].request, localRequest) ? Lookup::kHit : Lookup::kChanged;
}

void ResponseCache::put(const Response& r, const Request& localRequest) {
  if (capacity_ == 0 || !isCacheable(r)) return;
  ++version_;
  auto it = byKey_.find(keyOf(r));
  if (it != byKey_.end()) {
    Slot& slot = slots_[it->second];
    slot.response = r;
    slot.request = localRequest;
    touch(it->second);
    return;
  }
  if (byKey_.size() >= capacity_) erase(keyOf(slots_[lru_.back()].response));
  uint32_t bit;
  if (!freed_.empty()) {
    // Lowest free bit first; after an eviction that is the evicted entry's bit, because bits are
    // only freed below slots_.size() and a full cache has no other free bit.
    bit = *freed_.begin();
    freed_.erase(freed_.begin());
  } else {
    bit = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& slot = slots_[bit];
  slot.used = true;
  slot.response = r;
  slot.request = localRequest;
  lru_.push_front(bit);
  slot.lru = lru_.begin();
  byKey_.emplace(keyOf(r), bit);
}

const Response& ResponseCache::response(uint32_t bit) const {
  return inUse(bit) ? slots_[bit].response : empty_.response;
}

const Request& ResponseCache::request(uint32_t bit) const {
  return inUse(bit) ? slots_[bit].request : empty_.request;
}

void ResponseCache::touch(uint32_t bit) {
  if (!inUse(bit)) return;
  lru_.splice(lru_.begin(), lru_, slots_[bit].lru);
}

void ResponseCache::erase(const OpKey& key) {
  auto it = byKey_.find(key);
  if (it == byKey_.end()) return;
  ++version_;
  uint32_t bit = it->second;
  byKey_.erase(it);
  Slot& slot = slots_[bit];
  lru_.erase(slot.lru);
  slot = Slot();  // drop the payload now rather than at reuse
  freed_.insert(bit);
}

std::vector<uint32_t> ResponseCache::bitsInUse() const {
  std::vector<uint32_t> out;
  out.reserve(byKey_.size());
  for (uint32_t b = 0; b < slots_.size(); ++b) {
    if (slots_[b].used) out.push_back(b);
  }
  return out;
}

}  // namespace kolo
