// SPDX-License-Identifier: Apache-2.0
// ProcessSetMembers: read access to the membership of the process sets, for code that must not
// own a copy of it (the Negotiator). ProcessSetTable is the one owner of the sets and implements
// this; unit tests use a small map.
//
// Thread safety: implementations document theirs; ProcessSetTable's members() is for the
// thread running a coordinator round, the only one that adds or removes sets.
#pragma once

#include <cstdint>
#include <vector>

namespace kolo {

class ProcessSetMembers {
 public:
  virtual ~ProcessSetMembers() = default;
  // The global ranks of set `id`, ascending; null when the set does not exist. The pointer stays
  // valid until the set is removed.
  virtual const std::vector<int32_t>* members(int32_t id) const = 0;
};

}  // namespace kolo
