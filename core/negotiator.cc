// SPDX-License-Identifier: Apache-2.0
#include "core/negotiator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "base/config.h"
#include "base/tensor.h"

namespace kolo {
namespace {

std::string deviceName(int32_t device) {
  return device < 0 ? "cpu" : "cuda:" + std::to_string(device);
}

std::string rankList(const std::vector<int32_t>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

bool sameScale(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

bool isDataOp(OpType t) {
  return t == OpType::kAllreduce || t == OpType::kAllgather || t == OpType::kBroadcast ||
         t == OpType::kAlltoall || t == OpType::kReducescatter;
}
bool usesReduction(OpType t) { return t == OpType::kAllreduce || t == OpType::kReducescatter; }
bool splitsFirstDim(OpType t) { return t == OpType::kAllgather || t == OpType::kAlltoall; }

bool sameShape(OpType t, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (!splitsFirstDim(t)) return a == b;
  return a.size() == b.size() &&
         std::equal(a.begin() + (a.empty() ? 0 : 1), a.end(), b.begin() + (b.empty() ? 0 : 1));
}

// The fields compared across ranks, in the order they are checked. `same` returns true when the
// field does not matter for the op. Numeric values repeat their label in the message ("rank 1
// sent root 1"), named values do not ("rank 1 sent int32").
struct Field {
  const char* label;
  bool repeat;
  bool (*same)(OpType t, const Request& a, const Request& b);
  std::string (*show)(const Request& r);
};

const Field kFields[] = {
    {"op", false, [](OpType, const Request& a, const Request& b) { return a.type == b.type; },
     [](const Request& r) -> std::string { return toString(r.type); }},
    {"process set", true,
     [](OpType, const Request& a, const Request& b) { return a.processSet == b.processSet; },
     [](const Request& r) { return std::to_string(r.processSet); }},
    {"dtype", false,
     [](OpType t, const Request& a, const Request& b) {
       return !isDataOp(t) || a.dtype == b.dtype;
     },
     [](const Request& r) -> std::string { return toString(r.dtype); }},
    {"shape", false,
     [](OpType t, const Request& a, const Request& b) {
       return !isDataOp(t) || sameShape(t, a.shape, b.shape);
     },
     [](const Request& r) { return shapeToString(r.shape); }},
    {"reduce op", false,
     [](OpType t, const Request& a, const Request& b) {
       return !usesReduction(t) || a.reduceOp == b.reduceOp;
     },
     [](const Request& r) -> std::string { return toString(r.reduceOp); }},
    {"prescale", true,
     [](OpType t, const Request& a, const Request& b) {
       return !usesReduction(t) || sameScale(a.prescale, b.prescale);
     },
     [](const Request& r) { return formatDouble(r.prescale); }},
    {"postscale", true,
     [](OpType t, const Request& a, const Request& b) {
       return !usesReduction(t) || sameScale(a.postscale, b.postscale);
     },
     [](const Request& r) { return formatDouble(r.postscale); }},
    {"root", true,
     [](OpType t, const Request& a, const Request& b) {
       return t != OpType::kBroadcast || a.root == b.root;
     },
     [](const Request& r) { return std::to_string(r.root); }},
    {"device", false,
     [](OpType t, const Request& a, const Request& b) {
       return !isDataOp(t) || (a.device < 0) == (b.device < 0);
     },
     [](const Request& r) { return deviceName(r.device); }},
    {"group size", true,
     [](OpType, const Request& a, const Request& b) { return a.groupSize == b.groupSize; },
     [](const Request& r) { return std::to_string(r.groupSize); }},
    {"ranks", false,
     [](OpType t, const Request& a, const Request& b) {
       return (t != OpType::kAddProcessSet && t != OpType::kRemoveProcessSet) ||
              a.splits == b.splits;
     },
     [](const Request& r) { return shapeToString(r.splits); }},
};

Response errorResponse(const Request& ref, ErrorCode code, std::string message) {
  Response r;
  r.spec() = ref.spec();
  r.kind = Response::Kind::kError;
  r.errorCode = code;
  r.error = std::move(message);
  return r;
}

}  // namespace

Negotiator::Negotiator(int worldSize, const ProcessSetMembers* sets)
    : worldSize_(std::max(worldSize, 0)), sets_(sets), joined_(worldSize_) {}

void Negotiator::processSetRemoved(int32_t id) {
  if (id == 0) return;
  for (auto it = stalledRefusals_.begin(); it != stalledRefusals_.end();) {
    it = it->first.processSet == id ? stalledRefusals_.erase(it) : std::next(it);
  }
  std::vector<std::pair<uint64_t, OpKey>> doomed;
  for (const auto& [key, e] : table_) {
    if (!e.complete && e.processSet == id) doomed.emplace_back(e.arrivalSeq, key);
  }
  std::sort(doomed.begin(), doomed.end());
  for (const auto& d : doomed) {
    const Entry& e = table_.at(d.second);
    immediate_[nextSeq_++] = errorResponse(
        e.requests.begin()->second, ErrorCode::kInvalidArgument,
        opLabel(e.type, d.second) + ": process set " + std::to_string(id) + " was removed");
    removeEntry(d.second, false);
  }
}

const std::vector<int32_t>& Negotiator::membersOf(const Entry& e) const {
  static const std::vector<int32_t> kNone;  // immutable; for a set removed under a ready entry
  const std::vector<int32_t>* m = sets_->members(e.processSet);
  return m == nullptr ? kNone : *m;
}

void Negotiator::add(const Request& r, Clock::time_point now) {
  if (r.rank < 0 || r.rank >= worldSize_) return;
  if (static_cast<int32_t>(r.type) < 0 || r.type > kLastOpType) return;

  if (r.type == OpType::kJoin) {
    if (joined_[r.rank]) return;
    joined_[r.rank] = true;
    ++joinedCount_;
    lastJoined_ = r.rank;
    checkCompletions();
    if (joinedCount_ == worldSize_) {
      Response done;
      done.type = OpType::kJoin;
      done.name = kJoinName;
      done.lastJoinedRank = lastJoined_;
      immediate_[nextSeq_++] = std::move(done);
      std::fill(joined_.begin(), joined_.end(), false);
      joinedCount_ = 0;
      lastJoined_ = -1;
    }
    return;
  }

  const OpKey key = keyOf(r);
  auto it = table_.find(key);
  if (it != table_.end() && (it->second.complete || it->second.requests.count(r.rank))) return;

  const std::vector<int32_t>* set = sets_->members(r.processSet);
  if (set == nullptr || !std::binary_search(set->begin(), set->end(), r.rank)) {
    std::string why = set == nullptr ? "rank " + std::to_string(r.rank) +
                                           " sent unknown process set " +
                                           std::to_string(r.processSet)
                                     : "rank " + std::to_string(r.rank) +
                                           " is not a member of process set " +
                                           std::to_string(r.processSet);
    immediate_[nextSeq_++] =
        errorResponse(r, ErrorCode::kInvalidArgument, opLabel(r.type, key) + ": " + why);
    if (it != table_.end()) removeEntry(key, false);
    return;
  }

  if (it == table_.end()) {
    Entry e;
    e.processSet = r.processSet;
    e.type = r.type;
    e.arrivalSeq = nextSeq_++;
    e.firstArrival = now;
    // A refusal the stall shutdown failed before this rank submitted the op: it stands (the
    // refusing rank submits it again only to retry, which replaces it).
    auto refused = stalledRefusals_.find(key);
    if (refused != stalledRefusals_.end()) {
      if (refused->second.rank != r.rank) e.requests[refused->second.rank] = refused->second;
      stalledRefusals_.erase(refused);
    }
    arrivals_.insert(now);
    it = table_.emplace(key, std::move(e)).first;
  }
  Entry& e = it->second;
  e.requests[r.rank] = r;
  if (r.groupSize > 0 && r.groupId >= 0) {
    GroupRecord& g = groups_[{r.rank, r.groupId}];
    if (g.size == 0) g.size = r.groupSize;
    ++g.seen;
    g.pending.insert(key);
  }
  if (isComplete(e)) markComplete(key, e);
}

bool Negotiator::isComplete(const Entry& e) const {
  for (int32_t m : membersOf(e)) {
    if (!joined_[m] && e.requests.count(m) == 0) return false;
  }
  return true;
}

void Negotiator::markComplete(const OpKey& key, Entry& e) {
  e.complete = true;
  e.completeSeq = nextSeq_++;
  e.response = buildResponse(key, e);
  completeOrder_[e.completeSeq] = key;
}

void Negotiator::failUnmatchedGroupMembers(const OpKey& key, const Entry& e) {
  // Ranks that disagree on a group's size submit members the others never will (rank 1's third
  // tensor of a grouped allreduce where rank 0 has two). A rank submits its whole group at once,
  // so once a round's requests are all added every such extra is here: fail them then
  // (takeReady), or their ranks would wait for the stall shutdown.
  // Only when every rank grouped it: a rank that sent the name as a plain op may still send
  // the group's other names as plain ops (they then meet a mismatch error of their own).
  int32_t size = -1;
  bool differ = false;
  for (const auto& rq : e.requests) {
    if (rq.second.groupSize <= 0) return;
    if (size >= 0 && rq.second.groupSize != size) differ = true;
    size = rq.second.groupSize;
  }
  if (!differ) return;
  std::vector<OpKey> members;
  groupClosure(key, false, &members);
  for (const OpKey& m : members) {
    auto it = table_.find(m);
    if (it == table_.end() || it->second.complete || isComplete(it->second)) continue;
    const Request& ref = it->second.requests.begin()->second;
    immediate_[nextSeq_++] =
        errorResponse(ref, ErrorCode::kMismatch,
                      opLabel(ref.type, m) + " is in a group whose size the ranks disagree on (" +
                          e.response.error + "); ranks " + rankList(missingRanks(it->second)) +
                          " will never submit it");
    removeEntry(m, false);
  }
}

void Negotiator::checkCompletions() {
  std::vector<std::pair<uint64_t, OpKey>> now;
  for (const auto& [key, e] : table_) {
    if (!e.complete && isComplete(e)) now.emplace_back(e.arrivalSeq, key);
  }
  std::sort(now.begin(), now.end());
  for (const auto& n : now) markComplete(n.second, table_.at(n.second));
}

std::vector<int32_t> Negotiator::missingRanks(const Entry& e) const {
  std::vector<int32_t> out;
  for (int32_t m : membersOf(e)) {
    if (!joined_[m] && e.requests.count(m) == 0) out.push_back(m);
  }
  return out;
}

std::pair<ErrorCode, std::string> Negotiator::validate(const Entry& e,
                                                       const std::vector<int32_t>& members) const {
  const int32_t refRank = e.requests.begin()->first;
  const Request& ref = e.requests.begin()->second;
  const OpType t = ref.type;
  const std::string head = opLabel(t, keyOf(ref)) + ": ";
  auto sent = [&](int32_t rank) { return "rank " + std::to_string(rank) + " sent "; };
  // A rank that refused the op sent no tensor to compare: its reason comes first.
  for (const auto& [rank, r] : e.requests) {
    if (!r.refusal.empty()) {
      return {ErrorCode::kInvalidArgument,
              head + "rank " + std::to_string(rank) + " could not submit it: " + r.refusal};
    }
  }
  // Fields outer, ranks inner: the most fundamental difference wins, whoever sent it.
  for (const Field& f : kFields) {
    for (auto it = std::next(e.requests.begin()); it != e.requests.end(); ++it) {
      if (f.same(t, ref, it->second)) continue;
      // An allgather's or alltoall's first dimension may differ: say which part did not match.
      const bool partly = std::string(f.label) == "shape" && splitsFirstDim(t);
      return {ErrorCode::kMismatch,
              head + sent(refRank) + f.label + " " + f.show(ref) + ", " + sent(it->first) +
                  (f.repeat ? f.label + std::string(" ") : "") + f.show(it->second) +
                  (partly ? " (only the first dimension may differ)" : "")};
    }
  }

  // Per-rank validity. Only the ref rank's type is known to be shared by now.
  auto invalid = [&](const std::string& why) {
    return std::make_pair(ErrorCode::kInvalidArgument, head + why);
  };
  for (const auto& [rank, r] : e.requests) {
    if (!isDataOp(t)) break;
    if (std::any_of(r.shape.begin(), r.shape.end(), [](int64_t d) { return d < 0; })) {
      return invalid(sent(rank) + "shape " + shapeToString(r.shape) + " with a negative dimension");
    }
    bool needsDim = splitsFirstDim(t) || t == OpType::kReducescatter;
    if (needsDim && r.shape.empty()) {
      return invalid(sent(rank) + "a scalar; " + toString(t) + " needs at least one dimension");
    }
  }
  const int64_t setSize = static_cast<int64_t>(members.size());
  if (t == OpType::kBroadcast && (ref.root < 0 || ref.root >= setSize)) {
    return invalid("root " + std::to_string(ref.root) + " is not a rank of process set " +
                   std::to_string(ref.processSet) + " (" + std::to_string(setSize) + " ranks)");
  }
  if (t == OpType::kAlltoall) {
    for (const auto& [rank, r] : e.requests) {
      if (r.splits.empty()) {  // the runtime fills them in unless dimension 0 does not divide
        return invalid(sent(rank) + "no splits, and its dimension 0 (" +
                       std::to_string(r.shape[0]) + ") is not divisible by the " +
                       std::to_string(setSize) + " ranks");
      }
      if (static_cast<int64_t>(r.splits.size()) != setSize) {
        return invalid(sent(rank) + std::to_string(r.splits.size()) +
                       " splits for a process set of " + std::to_string(setSize) + " ranks");
      }
      uint64_t sum = 0;
      bool negative = false;
      for (int64_t s : r.splits) {
        negative |= s < 0;
        sum += static_cast<uint64_t>(s);  // wraps only on absurd input, caught below
      }
      if (negative) {
        return invalid(sent(rank) + "splits " + shapeToString(r.splits) + " with a negative entry");
      }
      if (sum > static_cast<uint64_t>(r.shape[0])) {
        return invalid(sent(rank) + "splits " + shapeToString(r.splits) + " summing to " +
                       std::to_string(static_cast<int64_t>(sum)) +
                       ", more than its first dimension " + std::to_string(r.shape[0]));
      }
    }
  }
  return {};
}

Response Negotiator::buildResponse(const OpKey& key, const Entry& e) const {
  const Request& ref = e.requests.begin()->second;
  const std::vector<int32_t>& members = membersOf(e);
  auto [code, message] = validate(e, members);
  if (code != ErrorCode::kOk) return errorResponse(ref, code, std::move(message));

  std::vector<int32_t> excused;  // joined members that did not submit
  for (int32_t m : members) {
    if (e.requests.count(m) == 0) excused.push_back(m);
  }
  if (!excused.empty() && ref.type != OpType::kAllreduce && ref.type != OpType::kBarrier) {
    std::string who = excused.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < excused.size(); ++i) who += (i ? ", " : "") + std::to_string(excused[i]);
    who += excused.size() == 1 ? " has" : " have";
    // The hint is Horovod's: sparse gradients are allgathered unless made dense.
    std::string hint = " (only allreduce and barrier run while ranks have joined";
    if (ref.type == OpType::kAllgather) {
      hint += "; sparse gradients: DistributedOptimizer(sparse_as_dense=True)";
    }
    return errorResponse(
        ref, ErrorCode::kJoined,
        opLabel(ref.type, key) + " is not allowed while " + who + " joined" + hint + ")");
  }

  Response r = errorResponse(ref, ErrorCode::kOk, "");
  r.kind = Response::Kind::kOk;
  r.joinedRanks = std::move(excused);
  if (ref.type == OpType::kAllgather) {
    for (int32_t m : members) r.rankDim0.push_back(e.requests.at(m).shape[0]);
  } else if (ref.type == OpType::kAlltoall) {
    r.splitMatrix.reserve(members.size() * members.size());
    for (int32_t m : members) {
      const auto& s = e.requests.at(m).splits;
      r.splitMatrix.insert(r.splitMatrix.end(), s.begin(), s.end());
    }
  }
  return r;
}

bool Negotiator::groupClosure(const OpKey& name, bool requireReady,
                              std::vector<OpKey>* members) const {
  // One pass over the whole closure, never stopping at the first reason it is not ready: the
  // caller learns the membership either way and decides for every member at once. Each group's
  // pending list is walked once: a group of N names costs O(N log N) a round, not N closures of
  // N members that each walk N names.
  std::set<OpKey> seen = {name};
  std::vector<OpKey> queue = {name};
  std::set<GroupKey> expanded;  // each group's pending list is walked once, not once a member
  bool ready = true;
  for (size_t i = 0; i < queue.size(); ++i) {
    auto it = table_.find(queue[i]);
    if (it == table_.end()) continue;
    const Entry& e = it->second;
    if (!e.complete) ready = false;
    // Errors are released on their own: their groups may be inconsistent (mismatched group
    // sizes), and the other members count them as seen.
    if (requireReady && e.complete && e.response.kind == Response::Kind::kError) {
      if (i == 0) break;
      continue;
    }
    for (const auto& [rank, r] : e.requests) {
      if (r.groupSize <= 0 || r.groupId < 0) continue;
      auto g = groups_.find({rank, r.groupId});
      if (g == groups_.end()) continue;
      if (g->second.seen < g->second.size) ready = false;
      if (!expanded.insert(g->first).second) continue;
      for (const OpKey& other : g->second.pending) {
        auto o = table_.find(other);
        bool error = o != table_.end() && o->second.complete &&
                     o->second.response.kind == Response::Kind::kError;
        if (requireReady && error) continue;
        if (seen.insert(other).second) queue.push_back(other);
      }
    }
  }
  *members = std::move(queue);
  return ready;
}

std::vector<Response> Negotiator::takeReady(Clock::time_point) {
  for (const auto& [seq, key] : completeOrder_) {
    const Entry& e = table_.at(key);
    if (e.response.kind == Response::Kind::kError) failUnmatchedGroupMembers(key, e);
  }
  std::vector<std::pair<uint64_t, OpKey>> order(completeOrder_.begin(), completeOrder_.end());
  std::vector<Response> out;
  std::set<OpKey> released;
  std::set<OpKey> heldBack;  // members of a closure found not ready this round
  auto imm = immediate_.begin();
  for (const auto& [seq, name] : order) {
    for (; imm != immediate_.end() && imm->first < seq; ++imm) out.push_back(imm->second);
    if (released.count(name) || heldBack.count(name)) continue;
    std::vector<OpKey> members;
    if (!groupClosure(name, true, &members)) {
      heldBack.insert(members.begin(), members.end());
      continue;
    }
    std::sort(members.begin(), members.end(), [&](const OpKey& a, const OpKey& b) {
      return table_.at(a).completeSeq < table_.at(b).completeSeq;
    });
    const Response& first = table_.at(members.front()).response;
    bool grouped = first.kind == Response::Kind::kOk &&
                   table_.at(members.front()).requests.begin()->second.groupSize > 0;
    int32_t group = grouped ? nextGroup_++ : -1;
    for (const OpKey& m : members) {
      out.push_back(table_.at(m).response);
      out.back().group = group;
      released.insert(m);
    }
  }
  for (; imm != immediate_.end(); ++imm) out.push_back(imm->second);
  immediate_.clear();
  for (const OpKey& name : released) removeEntry(name, false);
  return out;
}

void Negotiator::removeEntry(const OpKey& name, bool dropGroups) {
  auto it = table_.find(name);
  if (it == table_.end()) return;
  for (const auto& [rank, r] : it->second.requests) {
    if (r.groupSize <= 0 || r.groupId < 0) continue;
    auto g = groups_.find({rank, r.groupId});
    if (g == groups_.end()) continue;
    g->second.pending.erase(name);
    if (dropGroups || (g->second.pending.empty() && g->second.seen >= g->second.size)) {
      groups_.erase(g);
    }
  }
  if (it->second.complete) completeOrder_.erase(it->second.completeSeq);
  arrivals_.erase(arrivals_.find(it->second.firstArrival));
  table_.erase(it);
}

void Negotiator::erase(const OpKey& key) { removeEntry(key, false); }

std::vector<Negotiator::Stall> Negotiator::stalled(Clock::time_point now,
                                                   double olderThanSeconds) const {
  if (arrivals_.empty() ||
      std::chrono::duration<double>(now - *arrivals_.begin()).count() <= olderThanSeconds) {
    return {};  // not even the oldest entry has waited long enough
  }
  std::vector<std::pair<uint64_t, Stall>> found;
  std::map<OpKey, bool> readyOf;  // per closure, computed once for all its members
  std::unique_ptr<HintIndex> index;
  for (const auto& [name, e] : table_) {
    double waited = std::chrono::duration<double>(now - e.firstArrival).count();
    if (waited <= olderThanSeconds) continue;
    // A complete entry is stalled only while a group holds it back (otherwise the next
    // takeReady releases it).
    if (e.complete) {
      auto known = readyOf.find(name);
      if (known == readyOf.end()) {
        std::vector<OpKey> members;
        const bool ready = groupClosure(name, true, &members);
        for (const OpKey& m : members) readyOf.emplace(m, ready);
        known = readyOf.emplace(name, ready).first;
      }
      if (known->second) continue;
    }
    Stall s{name.name, e.type, name.processSet,
            waited,    {},     e.complete ? groupBlockers(name) : missingRanks(e),
            {}};
    if (!index) index = std::make_unique<HintIndex>(hintIndex());  // once, if anything stalled
    s.hint = otherTypeHint(name, s.missingRanks, *index);
    for (const auto& rq : e.requests) s.readyRanks.push_back(rq.first);
    found.emplace_back(e.arrivalSeq, std::move(s));
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Stall> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

namespace {

// "<op>.<user name>" -> ".<user name>" (the op-type word is everything before the first dot);
// "" for a name without one, and for automatic names, which share their counters' values
// across op types by coincidence, not intent.
std::string userPart(const std::string& name) {
  const size_t dot = name.find('.');
  if (dot == std::string::npos) return "";
  std::string rest = name.substr(dot);
  if (rest.compare(0, 8, ".noname.") == 0) return "";
  return rest;
}

}  // namespace

Negotiator::HintIndex Negotiator::hintIndex() const {
  HintIndex index;
  for (const auto& [key, e] : table_) {
    if (e.complete) continue;
    std::string rest = userPart(key.name);
    if (!rest.empty()) index[{key.processSet, std::move(rest)}].push_back(&key);
  }
  return index;
}

std::string Negotiator::otherTypeHint(const OpKey& key, const std::vector<int32_t>& missing,
                                      const HintIndex& index) const {
  if (missing.empty()) return "";
  const std::string rest = userPart(key.name);
  if (rest.empty()) return "";
  auto found = index.find({key.processSet, rest});
  if (found == index.end()) return "";
  for (const OpKey* other : found->second) {
    if (*other == key) continue;
    const Entry& e = table_.at(*other);
    std::vector<int32_t> who;
    for (int32_t m : missing) {
      if (e.requests.count(m)) who.push_back(m);
    }
    if (who.empty()) continue;
    return "; " + std::string(who.size() == 1 ? "rank " : "ranks ") +
           (who.size() == 1 ? std::to_string(who[0]) : rankList(who)) + " submitted " +
           opLabel(e.type, *other) + " instead (the same name with another op type?)";
  }
  return "";
}

std::vector<int32_t> Negotiator::groupBlockers(const OpKey& name) const {
  std::vector<OpKey> members;
  groupClosure(name, false, &members);
  std::set<int32_t> blockers;
  for (const OpKey& m : members) {
    auto it = table_.find(m);
    if (it == table_.end()) continue;
    if (!it->second.complete) {
      for (int32_t r : missingRanks(it->second)) blockers.insert(r);
    }
    for (const auto& [rank, r] : it->second.requests) {
      if (r.groupSize <= 0 || r.groupId < 0) continue;
      auto g = groups_.find({rank, r.groupId});
      if (g != groups_.end() && g->second.seen < g->second.size) blockers.insert(rank);
    }
  }
  return {blockers.begin(), blockers.end()};
}

std::vector<Response> Negotiator::failStalled(Clock::time_point now, double olderThanSeconds) {
  std::vector<Response> out;
  for (const Stall& s : stalled(now, olderThanSeconds)) {
    const OpKey key{s.processSet, s.name};
    if (!table_.count(key)) continue;  // already failed as a group member
    std::vector<OpKey> members;
    groupClosure(key, false, &members);
    char waited[32];
    std::snprintf(waited, sizeof waited, "%.1f", s.waitedSeconds);
    for (const OpKey& m : members) {
      auto it = table_.find(m);
      if (it == table_.end()) continue;
      const Request& ref = it->second.requests.begin()->second;
      std::string message;
      // kolo's own remove op is named after nothing the user chose: name the set it removes.
      const std::string what = ref.type == OpType::kRemoveProcessSet && !ref.shape.empty()
                                   ? " (of process set " + std::to_string(ref.shape[0]) + ")"
                                   : "";
      if (m != key) {
        message = opLabel(ref.type, m) + " is grouped with stalled " + opLabel(s.type, key);
      } else if (it->second.complete) {
        message = opLabel(s.type, m) + " stalled for " + waited +
                  " s in a group waiting for ranks " + rankList(s.missingRanks);
      } else {
        message = opLabel(s.type, m) + what + " stalled for " + waited + " s: missing ranks " +
                  rankList(s.missingRanks) + ", submitted by " + rankList(s.readyRanks) + s.hint;
      }
      out.push_back(errorResponse(ref, ErrorCode::kStalled, std::move(message)));
      for (const auto& rq : it->second.requests) {
        if (rq.second.refusal.empty() || rq.second.groupSize > 0) continue;
        if (stalledRefusals_.insert_or_assign(m, rq.second).second) {
          stalledRefusalOrder_.push_back(m);
        }
        break;
      }
    }
    for (const OpKey& m : members) removeEntry(m, true);
    while (stalledRefusalOrder_.size() > kMaxStalledRefusals) {
      stalledRefusals_.erase(stalledRefusalOrder_.front());
      stalledRefusalOrder_.pop_front();
    }
  }
  return out;
}

bool Negotiator::hasPending() const {
  return !table_.empty() || !immediate_.empty() || joinedCount_ > 0;
}

std::vector<int32_t> Negotiator::joinedRanks() const {
  std::vector<int32_t> out;
  for (int i = 0; i < worldSize_; ++i) {
    if (joined_[i]) out.push_back(i);
  }
  return out;
}

}  // namespace kolo
