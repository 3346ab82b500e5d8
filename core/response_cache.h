// SPDX-License-Identifier: Apache-2.0
// ResponseCache: Horovod-style cache of negotiated responses, so that a steady training loop
// skips the coordinator round trip. Each cached response owns a bit (a stable slot index in
// [0, capacity)); a round where every rank's pending names are hits is settled by one bitwise-AND
// allreduce over those bits.
//
// Determinism: the cache holds no hidden randomness (no hash-order iteration, no clocks). Ranks
// that make the same put/touch/erase calls in the same order end with identical bits. A new entry
// takes the lowest free bit; when full, the least recently used entry is evicted and its bit
// reused.
//
// What is cached: OK responses of allreduce, allgather, broadcast, alltoall and reducescatter,
// and only those with no joinedRanks (a response that zero-fills joined ranks must not be replayed
// after the join ends). The local request is stored with it: lookup() reports kChanged when this
// rank's request differs from the stored one in anything negotiated (op, dtype, shape — so dim 0
// for allgather and alltoall, i.e. this rank's entry in rankDim0 — reduce op, scales, root,
// device, process set, splits, group size). Other ranks see their own changes and miss the
// AND, so everyone renegotiates.
//
// Thread safety: none; the Coordinator owns it and uses it inside its rounds (serialized). Never blocks, never fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/message.h"

namespace kolo {

class ResponseCache {
 public:
  // capacity 0 disables the cache (lookup always misses, put does nothing). Capped at 2^32 - 1.
  explicit ResponseCache(size_t capacity);

  enum class Lookup { kMiss, kHit, kChanged };

  // By key (process set, name). kHit and kChanged set *bit (may be null) to the entry's bit; kMiss leaves it alone.
  Lookup lookup(const Request& localRequest, uint32_t* bit) const;
  // Inserts or refreshes (keeping the bit) an entry and marks it most recently used. Responses
  // that are not cacheable (see above) are ignored.
  void put(const Response& r, const Request& localRequest);
  // Precondition: bit is in use. An unused bit yields a default-constructed value.
  const Response& response(uint32_t bit) const;
  const Request& request(uint32_t bit) const;
  bool inUse(uint32_t bit) const { return bit < slots_.size() && slots_[bit].used; }
  // Marks bit most recently used; an unused bit is ignored.
  void touch(uint32_t bit);
  void erase(const OpKey& key);

  size_t capacity() const { return capacity_; }
  size_t size() const { return byKey_.size(); }
  // Changes with every put and erase (not with touch): whoever derives something from the
  // entries (core/piggyback's layout) recomputes it only when this moved.
  uint64_t version() const { return version_; }
  std::vector<uint32_t> bitsInUse() const;  // ascending

  static bool isCacheable(const Response& r);

 private:
  struct Slot {
    bool used = false;
    Response response;
    Request request;
    std::list<uint32_t>::iterator lru;
  };

  size_t capacity_;
  uint64_t version_ = 0;
  std::vector<Slot> slots_;  // grows up to capacity_ as bits are first used
  std::unordered_map<OpKey, uint32_t, OpKeyHash> byKey_;
  std::list<uint32_t> lru_;   // front = most recently used
  std::set<uint32_t> freed_;  // bits below slots_.size() that are free
  Slot empty_;
};

const char* toString(ResponseCache::Lookup lookup);  // "miss", "hit", "changed"

}  // namespace kolo
