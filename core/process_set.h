// SPDX-License-Identifier: Apache-2.0
// ProcessSetTable: the process sets this rank knows, and their one owner (the Negotiator reads
// membership through ProcessSetMembers; nothing keeps a copy). Set 0 is every rank. Ids are
// assigned in creation order (1, 2, ...) and never reused, so they agree on every rank:
// additions and removals happen in a coordinator round in the order of the agreed response
// list (kAddProcessSet / kRemoveProcessSet ops).
// Thread safety: every method but members() locks; members() and the transports are for the
// thread running a round only (rounds are serialized, core/coordinator.h: the one writer at a
// time, so it reads without the lock).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/process_set_members.h"
#include "base/status.h"
#include "ops/process_set.h"
#include "transport/transport.h"

namespace kolo {

class ProcessSetTable : public ProcessSetMembers {
 public:
  // The global set over `global` (not owned; the Runtime owns it).
  ProcessSetTable(Transport* global, int worldRank, int worldSize);

  // Creates the next set (collective over every rank of the global transport).
  Status add(const std::vector<int32_t>& ranks, int32_t* id);
  Status remove(int32_t id);
  // Copies the set's description; false if unknown.
  bool get(int32_t id, ProcessSet* out) const;
  bool contains(int32_t id) const;
  std::vector<ProcessSet> all() const;
  const std::vector<int32_t>* members(int32_t id) const override;

 private:
  mutable std::mutex mu_;
  int worldRank_;
  int32_t nextId_ = 1;
  std::map<int32_t, ProcessSet> sets_;
  std::map<int32_t, std::unique_ptr<Transport>> owned_;
  Transport* global_;
};

// Validates a rank list for a new set: non-empty, ascending, unique, each in [0, worldSize).
Status validateProcessSetRanks(const std::vector<int32_t>& ranks, int worldSize);

}  // namespace kolo
