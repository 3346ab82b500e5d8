// SPDX-License-Identifier: Apache-2.0
// Negotiator: the coordinator rank's message table. Every rank sends the coordinator rank the
// requests it wants to run; the Negotiator collects them per op key (process set, name: the same
// name in two sets is two ops, as Horovod keeps a table per set) and decides, purely from what
// arrived, which ops are ready everywhere (one OK Response each) and which are broken (one ERROR
// Response naming what differs). It does no I/O and owns no threads. Below, "name" means the key.
//
// Rules:
// - A name is complete when every member of its process set that has not joined has submitted it.
//   Process-set changes (kAddProcessSet, kRemoveProcessSet) are collectives over the world (set
//   0); their rank list or set id (splits, opaque here) is only compared across ranks. Barrier
//   and the process-set ops carry no data.
// - Membership is read from the ProcessSetTable (through ProcessSetMembers), never copied. When
//   the caller removes a set it calls processSetRemoved(id): names pending on it fail.
// - Validation runs once, at completion, comparing every submitting rank with the lowest one,
//   field by field (op type, process set, dtype, shape, reduce op, prescale, postscale, root,
//   device kind, group size, process-set rank list), so the message does not depend on arrival
//   order. The first difference becomes one kMismatch response:
//     allreduce 'grad/fc1': rank 0 sent shape [17, 3], rank 2 sent [17, 4]
//   Per-rank invalid values (bad alltoall splits, broadcast root outside the set, allgather of a
//   scalar, a negative dim) give kInvalidArgument.
// - A rank submitting for a set that does not exist or that it is not a member of: an immediate
//   kInvalidArgument response for that name (every rank that submitted the name gets it; ranks
//   that submit it later start a new entry, which the stall inspector will report).
// - Joins (OpType::kJoin, name kJoinName): a joined rank is excused from every name it has not
//   submitted. Allreduce and barrier complete with Response::joinedRanks = the joined members
//   that did not submit (they contribute zeros / just take part). Allgather, broadcast, alltoall,
//   reducescatter and process-set ops that need a joined rank fail with kJoined. When every world
//   rank has joined: one kJoin OK response (lastJoinedRank = the rank whose join arrived last),
//   and the joined state resets. Joins are never reported as stalled: uneven data legitimately
//   keeps ranks joined for a long time.
// - Grouped ops (groupSize > 0): a rank's requests with the same groupId form a group. No member
//   is released before every group it belongs to (for any submitting rank) has all groupSize
//   members complete; then the whole group is released consecutively and its responses share a
//   fresh Response::group id. Members completed elsewhere must be erase()d so they still count.
//   When a member's ranks sent different group sizes, takeReady fails the group's incomplete
//   members at once (the shorter ranks never submit them; a rank's group arrives in one round).
// - Ready order: the order names became complete; names completed by the same event (a join)
//   in first-arrival order; a group at the position of its earliest-completed member.
// - A second request from a rank for a name it already has pending, requests from ranks outside
//   [0, worldSize) and requests with an invalid op type are ignored.
//
// Thread safety: none; the Coordinator owns the instance and uses it inside its rounds
// (serialized: core/coordinator.h). Never blocks. No errors are
// returned: problems become error responses.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "core/process_set_members.h"
#include "ops/message.h"

namespace kolo {

class Negotiator {
 public:
  using Clock = kolo::Clock;

  // `sets` (not owned) must outlive the Negotiator; it holds at least set 0 (every rank).
  Negotiator(int worldSize, const ProcessSetMembers* sets);

  // Set `id` was removed: names pending on it fail with kInvalidArgument ("process set 3 was
  // removed"). Id 0 is ignored.
  void processSetRemoved(int32_t id);
  // Responses made outside a round's requests (errors of removed sets, ...) wait for the next
  // full round; the coordinator forces one while this is true.
  bool hasImmediate() const { return !immediate_.empty(); }

  void add(const Request& r, Clock::time_point now);
  // Forgets a name completed elsewhere (the response-cache path). Unknown names are ignored.
  void erase(const OpKey& key);
  // Ready responses in deterministic order; they are removed from the table.
  std::vector<Response> takeReady(Clock::time_point now);

  struct Stall {
    std::string name;
    OpType type;
    int32_t processSet;  // with name, the op's key
    double waitedSeconds;
    std::vector<int32_t> readyRanks, missingRanks;  // global ranks, ascending
    // "; rank 1 submitted allgather 'allgather.kk' instead ..." when a missing rank has an op
    // of another type pending under the same user name (front ends name ops "<op>.<name>", as
    // Horovod does), else empty.
    std::string hint;
  };
  // Names whose first request is older than olderThanSeconds and that are still incomplete, or
  // complete but held back by an unfinished group (missingRanks = the ranks that still owe a
  // member), in first-arrival order.
  std::vector<Stall> stalled(Clock::time_point now, double olderThanSeconds) const;
  // The same names (and every name grouped with them) as kStalled error responses, removed from
  // the table. The message lists the missing ranks. A refusal among them (a rank that could not
  // submit the op, outside a group) is remembered: when the ranks that had not submitted it yet
  // do so later (they were busy elsewhere past the stall time), the op fails at once with the
  // refusal's reason instead of stalling a second time (kolo.h's promise for kolo_refuse).
  std::vector<Response> failStalled(Clock::time_point now, double olderThanSeconds);
  // True while any name is in the table (pending or ready) or some rank has joined.
  bool hasPending() const;

  int worldSize() const { return worldSize_; }
  std::vector<int32_t> joinedRanks() const;  // ascending; empty when no join is in progress

 private:
  struct Entry {
    int32_t processSet = 0;
    OpType type = OpType::kAllreduce;
    std::map<int32_t, Request> requests;  // by global rank
    uint64_t arrivalSeq = 0;
    Clock::time_point firstArrival;
    bool complete = false;
    uint64_t completeSeq = 0;
    Response response;  // built at completion
  };
  struct GroupRecord {
    int32_t size = 0;
    int32_t seen = 0;
    std::set<OpKey> pending;
  };
  using GroupKey = std::pair<int32_t, int32_t>;  // (global rank, groupId)
  // failStalled's refusals, by name, and their order (the oldest goes past kMaxStalledRefusals).
  static constexpr size_t kMaxStalledRefusals = 1024;
  std::map<OpKey, Request> stalledRefusals_;
  std::deque<OpKey> stalledRefusalOrder_;

  bool isComplete(const Entry& e) const;
  void markComplete(const OpKey& key, Entry& e);
  // Fails, as immediate errors, the incomplete members grouped with `key` when its ranks sent
  // different group sizes (members the shorter ranks never submit).
  void failUnmatchedGroupMembers(const OpKey& key, const Entry& e);
  // Marks every incomplete entry that has become complete, in first-arrival order.
  void checkCompletions();
  Response buildResponse(const OpKey& key, const Entry& e) const;
  // Validation of one complete entry; an empty message means OK.
  std::pair<ErrorCode, std::string> validate(const Entry& e,
                                             const std::vector<int32_t>& members) const;
  // All names linked to `name` through groups (with requireReady, not through failed entries,
  // and only `name` itself when it failed). Returns false when any of them is incomplete or a
  // group still misses members; members holds the whole closure either way.
  bool groupClosure(const OpKey& name, bool requireReady, std::vector<OpKey>* members) const;
  void removeEntry(const OpKey& name, bool dropGroups);
  std::vector<int32_t> missingRanks(const Entry& e) const;
  // The incomplete entries by (process set, user part of the name): built once per stalled()
  // call, so that finding each stalled op's hint costs a lookup, not a walk of the table.
  using HintIndex = std::map<std::pair<int32_t, std::string>, std::vector<const OpKey*>>;
  HintIndex hintIndex() const;
  std::string otherTypeHint(const OpKey& key, const std::vector<int32_t>& missing,
                            const HintIndex& index) const;
  // For a name held back by its groups: the ranks that still owe a member or a submission.
  std::vector<int32_t> groupBlockers(const OpKey& name) const;
  const std::vector<int32_t>& membersOf(const Entry& e) const;

  int worldSize_;
  const ProcessSetMembers* sets_;
  std::map<OpKey, Entry> table_;
  std::map<uint64_t, OpKey> completeOrder_;  // completeSeq -> key, complete entries only
  // Every entry's firstArrival, oldest first: stalled() answers "none" without walking the
  // table while no entry is old enough (the coordinator asks in every round, on rank 0).
  std::multiset<Clock::time_point> arrivals_;
  std::map<uint64_t, Response> immediate_;         // ready responses without a table entry
  std::map<GroupKey, GroupRecord> groups_;
  std::vector<bool> joined_;
  int joinedCount_ = 0;
  int32_t lastJoined_ = -1;
  uint64_t nextSeq_ = 0;
  int32_t nextGroup_ = 0;
};

}  // namespace kolo
