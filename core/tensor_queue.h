// SPDX-License-Identifier: Apache-2.0
// TensorQueue: this rank's ops in flight, keyed by (process set, name) (OpKey).
//
// Callers (any thread) add entries; the thread running a round (the coordinator's, or a caller
// waiting for its op: core/coordinator.h, one at a time) drains the new ones each round, looks
// entries up by key when a response names them, and removes them once executed.
// A second add with a key already in flight fails at once with kDuplicateName; the first op
// is untouched. The same name in two process sets is two ops. Thread safety: all methods lock an internal mutex; entry pointers returned to
// the coordinator stay valid until a round removes the entry.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/entry.h"

namespace kolo {

class TensorQueue {
 public:
  // Takes the entry; kDuplicateName when its name is in flight. Wakes the coordinator.
  Status add(std::unique_ptr<TensorEntry> entry);
  // Adds all or nothing (grouped allreduce).
  Status addGroup(std::vector<std::unique_ptr<TensorEntry>> entries);

  // Coordinator side. Blocks until something was added since the last clearNew(), `shouldWake`
  // returns true, or the deadline passes. Returns true if new entries are waiting.
  bool waitForWork(Deadline deadline, const std::function<bool()>& shouldWake);
  void notify();  // wakes waitForWork (shutdown, abort)

  // A round starts (it looks at every entry): entries added so far no longer count as new.
  void clearNew();
  TensorEntry* find(const OpKey& key);
  std::unique_ptr<TensorEntry> remove(const OpKey& key);
  // Every entry in arrival order, and the queue closes: later add/addGroup calls return `refusal`
  // (the coordinator, when it stops: it fails these entries, and nothing added after can be
  // stranded in a queue that nobody drains any more). `refusal` must not be ok.
  std::vector<std::unique_ptr<TensorEntry>> close(const Status& refusal);
  size_t size() const;
  // Visits entries in arrival order (the round's thread only, under the lock).
  void forEach(const std::function<void(TensorEntry&)>& fn);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Drops the holes removals left in order_ (renumbering the slots): amortised O(1) a removal.
  void compact();

  struct Slot {
    std::unique_ptr<TensorEntry> entry;
    size_t at;  // its place in order_
  };
  std::unordered_map<OpKey, Slot, OpKeyHash> entries_;
  // What entries_ holds, in arrival order, with a hole (null) where an entry was removed: a
  // removal anywhere costs O(1) and a round's scan reads one contiguous array.
  std::vector<TensorEntry*> order_;
  size_t holes_ = 0;
  std::vector<OpKey> fresh_;  // added since clearNew(), still in entries_
  bool woken_ = false;
  Status closed_;  // ok while open
};

}  // namespace kolo
