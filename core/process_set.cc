// SPDX-License-Identifier: Apache-2.0
#include "core/process_set.h"

#include <algorithm>

namespace kolo {

ProcessSetTable::ProcessSetTable(Transport* global, int worldRank, int worldSize)
    : worldRank_(worldRank), global_(global) {
  ProcessSet all;
  all.id = 0;
  for (int r = 0; r < worldSize; ++r) all.ranks.push_back(r);
  all.myIndex = worldRank;
  all.transport = global;
  sets_[0] = all;
}

Status validateProcessSetRanks(const std::vector<int32_t>& ranks, int worldSize) {
  if (ranks.empty()) {
    return Status(ErrorCode::kInvalidArgument, "a process set needs at least one rank");
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= worldSize) {
      return Status(ErrorCode::kInvalidArgument,
                    "process set rank " + std::to_string(ranks[i]) + " is outside [0, " +
                        std::to_string(worldSize) + ")");
    }
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      return Status(ErrorCode::kInvalidArgument,
                    "process set ranks must be ascending and unique (got " +
                        std::to_string(ranks[i - 1]) + " then " + std::to_string(ranks[i]) + ")");
    }
  }
  return Status::ok();
}

Status ProcessSetTable::add(const std::vector<int32_t>& ranks, int32_t* id) {
  std::vector<int> members(ranks.begin(), ranks.end());
  int32_t newId;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // As Horovod: no two added sets with the same ranks (the global set may be repeated: a set
    // of every rank is how code written for any world size names "all of us").
    for (const auto& [id, set] : sets_) {
      if (id != 0 && set.ranks == ranks) {
        std::string list;
        for (int32_t r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
        return Status(ErrorCode::kInvalidArgument, "a process set with ranks [" + list +
                                                       "] already exists (process set " +
                                                       std::to_string(id) + ")");
      }
    }
    newId = nextId_++;
  }
  std::unique_ptr<Transport> sub;
  KOLO_RETURN_IF_ERROR(global_->split(members, newId, &sub));
  ProcessSet set;
  set.id = newId;
  set.ranks = ranks;
  auto it = std::find(ranks.begin(), ranks.end(), worldRank_);
  set.myIndex = it == ranks.end() ? -1 : static_cast<int32_t>(it - ranks.begin());
  set.transport = sub.get();
  std::lock_guard<std::mutex> lock(mu_);
  sets_[newId] = set;
  if (sub) owned_[newId] = std::move(sub);
  *id = newId;
  return Status::ok();
}

Status ProcessSetTable::remove(int32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id == 0) {
    return Status(ErrorCode::kInvalidArgument, "the global process set (id 0) cannot be removed");
  }
  if (!sets_.erase(id)) {
    return Status(ErrorCode::kInvalidArgument, "unknown process set id " + std::to_string(id));
  }
  owned_.erase(id);
  return Status::ok();
}

bool ProcessSetTable::get(int32_t id, ProcessSet* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return false;
  *out = it->second;
  return true;
}

bool ProcessSetTable::contains(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return sets_.count(id) > 0;
}

const std::vector<int32_t>* ProcessSetTable::members(int32_t id) const {
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : &it->second.ranks;
}

std::vector<ProcessSet> ProcessSetTable::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProcessSet> out;
  for (const auto& [id, s] : sets_) out.push_back(s);
  return out;
}

}  // namespace kolo
