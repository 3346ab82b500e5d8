// SPDX-License-Identifier: Apache-2.0
// Loopback transport: one mailbox shared by the thread ranks of a group.
//
// Why rendezvous instead of buffering sends: a buffered send would cost a second copy and hide
// ordering bugs that MPI and Gloo expose for large messages (a send that "completes" before its
// receive exists). Here the thread that posts the second half of a pair does the only memcpy,
// after dropping the mailbox lock, so ranks copy in parallel and the lock only guards queues.
//
// Lifetimes: the shared GroupState outlives every transport and batch of the group (shared_ptr).
// A batch registers in `live` so abort() can wake its waiter; an operation being copied is
// marked kCopying and its batch's destructor waits for that copy to end, so a peer never writes
// into a buffer its owner already gave up.
#include "transport/loopback/loopback_transport.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "transport/poll_support.h"

namespace kolo {
namespace {

constexpr int kMaxRanks = 4096;

class Batch;
struct GroupState;

struct OpEntry {
  enum class State { kQueued, kCopying, kDone };
  P2POp op;
  Batch* batch = nullptr;
  State state = State::kQueued;
};

// Unmatched operations of one (src, dst, tag) stream. At most one of the two queues is
// non-empty: a new operation first tries to pair with the oldest waiting counterpart.
struct Channel {
  std::deque<OpEntry*> sends;
  std::deque<OpEntry*> recvs;
};

struct SplitMeeting {
  std::vector<int> ranks;
  std::shared_ptr<GroupState> child;
  size_t joined = 0;
};

struct GroupState {
  explicit GroupState(std::vector<int> globals)
      : size(static_cast<int>(globals.size())), globalRanks(std::move(globals)) {}

  const int size;
  const std::vector<int> globalRanks;

  std::mutex mu;  // guards everything below and every Batch's mutable state
  bool aborted = false;
  Status abortCause;
  std::unordered_map<uint64_t, Channel> channels;
  std::unordered_set<Batch*> live;
  std::map<std::pair<int32_t, int>, SplitMeeting> meetings;  // (setId, generation)
  std::vector<std::weak_ptr<GroupState>> children;

  std::string label(int r) const {
    const int g = globalRanks[static_cast<size_t>(r)];
    return g == r ? "rank " + std::to_string(r) : describeRank(r, g);
  }
};

uint64_t channelKey(int src, int dst, uint32_t tag) {
  return (static_cast<uint64_t>(src) << 48) | (static_cast<uint64_t>(dst) << 32) | tag;
}

class Batch final : public PendingOps {
 public:
  Batch(std::shared_ptr<GroupState> group, int rank, const std::vector<P2POp>& ops)
      : group_(std::move(group)),
        rank_(rank),
        entries_(ops.size()),
        remaining_(ops.size()),
        posted_(Clock::now()) {
    for (size_t i = 0; i < ops.size(); ++i) {
      entries_[i].op = ops[i];
      entries_[i].batch = this;
    }
  }

  ~Batch() override {
    std::unique_lock<std::mutex> lock(group_->mu);
    for (OpEntry& e : entries_) {
      if (e.state != OpEntry::State::kQueued) continue;
      bool send = e.op.kind == P2POp::Kind::kSend;
      int src = send ? rank_ : e.op.peer;
      int dst = send ? e.op.peer : rank_;
      auto it = group_->channels.find(channelKey(src, dst, e.op.tag));
      if (it == group_->channels.end()) continue;
      auto& queue = send ? it->second.sends : it->second.recvs;
      queue.erase(std::remove(queue.begin(), queue.end(), &e), queue.end());
    }
    // A copy under way is a memcpy between live buffers that ends in bounded time; its
    // completion notifies cv_.
    cv_.wait(lock, [this] {
      return std::none_of(entries_.begin(), entries_.end(),
                          [](const OpEntry& e) { return e.state == OpEntry::State::kCopying; });
    });
    group_->live.erase(this);
  }

  Status test(bool* done) override {
    std::lock_guard<std::mutex> lock(group_->mu);
    *done = false;
    if (!error_.isOk()) return error_;
    if (remaining_ == 0) {
      *done = true;
      return Status::ok();
    }
    if (group_->aborted) return group_->abortCause;
    return Status::ok();
  }

  Status wait(Deadline deadline) override {
    std::unique_lock<std::mutex> lock(group_->mu);
    bool settled = cv_.wait_until(
        lock, deadline, [this] { return remaining_ == 0 || !error_.isOk() || group_->aborted; });
    if (!error_.isOk()) return error_;
    if (remaining_ == 0) return Status::ok();
    if (settled) return group_->abortCause;
    return Status(ErrorCode::kTimeout, describeOutstandingLocked());
  }

  std::vector<OpEntry>& entries() { return entries_; }

  // Called with group_->mu held.
  void completeLocked(OpEntry* e, const Status& err) {
    e->state = OpEntry::State::kDone;
    --remaining_;
    if (!err.isOk() && error_.isOk()) error_ = err;
    cv_.notify_all();
  }
  void wakeLocked() { cv_.notify_all(); }

 private:
  // "rank 1 waited 0.2 s for 2 recv(s) from rank 0 (tag 7), 1 send(s) to rank 2 (tag 7)"
  std::string describeOutstandingLocked() const {
    struct Group {
      P2POp::Kind kind;
      int peer;
      uint32_t tag;
      int n;
    };
    std::vector<Group> groups;
    for (const OpEntry& e : entries_) {
      if (e.state == OpEntry::State::kDone) continue;
      auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
        return g.kind == e.op.kind && g.peer == e.op.peer && g.tag == e.op.tag;
      });
      if (it == groups.end()) {
        groups.push_back(Group{e.op.kind, e.op.peer, e.op.tag, 1});
      } else {
        ++it->n;
      }
    }
    double secs = std::chrono::duration<double>(Clock::now() - posted_).count();
    char waited[32];
    std::snprintf(waited, sizeof(waited), "%.3g", secs);
    std::string msg = group_->label(rank_) + " waited " + waited + " s for ";
    for (size_t i = 0; i < groups.size(); ++i) {
      const Group& g = groups[i];
      if (i > 0) msg += ", ";
      bool send = g.kind == P2POp::Kind::kSend;
      msg += std::to_string(g.n) + (send ? " send(s) to " : " recv(s) from ") +
             group_->label(g.peer) + " (tag " + std::to_string(g.tag) + ")";
    }
    return msg;
  }

  std::shared_ptr<GroupState> group_;
  const int rank_;
  std::vector<OpEntry> entries_;  // never resized: mailbox queues point into it
  size_t remaining_;
  Status error_;
  std::condition_variable cv_;
  const Clock::time_point posted_;
};

void abortGroup(const std::shared_ptr<GroupState>& group, const Status& cause) {
  std::vector<std::shared_ptr<GroupState>> children;
  {
    std::lock_guard<std::mutex> lock(group->mu);
    if (group->aborted) return;
    group->aborted = true;
    group->abortCause =
        cause.isOk() ? Status(ErrorCode::kAborted, "transport aborted without a cause") : cause;
    for (Batch* b : group->live) b->wakeLocked();
    for (auto& weak : group->children) {
      if (auto child = weak.lock()) children.push_back(std::move(child));
    }
  }
  for (auto& child : children) abortGroup(child, cause);
}

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<GroupState> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  const char* name() const override { return "loopback"; }
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }
  int globalRank(int groupRank) const override {
    if (groupRank < 0 || groupRank >= group_->size) return -1;
    return group_->globalRanks[static_cast<size_t>(groupRank)];
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.sharedMemory = true;
    return c;
  }

  Status post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) override;
  Status split(const std::vector<int>& ranks, int32_t setId,
               std::unique_ptr<Transport>* out) override;
  void abort(const Status& cause) override { abortGroup(group_, cause); }

 private:
  std::shared_ptr<GroupState> group_;
  const int rank_;
  std::map<int32_t, int> splitCalls_;  // per setId: how many splits this rank made with it
};

Status LoopbackTransport::post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) {
  KOLO_REQUIRE(out != nullptr, kInvalidArgument, "loopback post: null output");
  for (const P2POp& op : ops) {
    KOLO_REQUIRE(op.peer >= 0 && op.peer < group_->size, kInvalidArgument,
                 "loopback post: peer " + std::to_string(op.peer) + " outside group of " +
                     std::to_string(group_->size));
    KOLO_REQUIRE(op.data != nullptr || op.bytes == 0, kInvalidArgument,
                 "loopback post: null buffer for " + std::to_string(op.bytes) + " bytes");
  }
  auto batch = std::make_unique<Batch>(group_, rank_, ops);
  std::vector<std::pair<OpEntry*, OpEntry*>> copies;  // (send, recv)
  {
    std::lock_guard<std::mutex> lock(group_->mu);
    if (group_->aborted) return group_->abortCause;
    group_->live.insert(batch.get());
    for (OpEntry& e : batch->entries()) {
      const bool send = e.op.kind == P2POp::Kind::kSend;
      const int src = send ? rank_ : e.op.peer;
      const int dst = send ? e.op.peer : rank_;
      Channel& ch = group_->channels[channelKey(src, dst, e.op.tag)];
      auto& waiting = send ? ch.recvs : ch.sends;
      if (waiting.empty()) {
        (send ? ch.sends : ch.recvs).push_back(&e);
        continue;
      }
      OpEntry* other = waiting.front();
      waiting.pop_front();
      OpEntry* s = send ? &e : other;
      OpEntry* r = send ? other : &e;
      if (s->op.bytes != r->op.bytes) {
        Status err(ErrorCode::kMismatch,
                   group_->label(src) + " sent " + std::to_string(s->op.bytes) + " bytes to " +
                       group_->label(dst) + " (tag " + std::to_string(e.op.tag) +
                       ") but the receive was posted for " + std::to_string(r->op.bytes));
        s->batch->completeLocked(s, err);
        r->batch->completeLocked(r, err);
        continue;
      }
      s->state = OpEntry::State::kCopying;
      r->state = OpEntry::State::kCopying;
      copies.emplace_back(s, r);
    }
  }
  if (!copies.empty()) {
    for (auto& c : copies) {
      if (c.first->op.bytes > 0)
        std::memcpy(c.second->op.data, c.first->op.data, c.first->op.bytes);
    }
    std::lock_guard<std::mutex> lock(group_->mu);
    for (auto& c : copies) {
      c.first->batch->completeLocked(c.first, Status::ok());
      c.second->batch->completeLocked(c.second, Status::ok());
    }
  }
  *out = std::move(batch);
  return Status::ok();
}

Status LoopbackTransport::split(const std::vector<int>& ranks, int32_t setId,
                                std::unique_ptr<Transport>* out) {
  KOLO_REQUIRE(out != nullptr, kInvalidArgument, "loopback split: null output");
  out->reset();
  for (size_t i = 0; i < ranks.size(); ++i) {
    KOLO_REQUIRE(ranks[i] >= 0 && ranks[i] < group_->size, kInvalidArgument,
                 "split: rank " + std::to_string(ranks[i]) + " outside group of " +
                     std::to_string(group_->size));
    KOLO_REQUIRE(i == 0 || ranks[i - 1] < ranks[i], kInvalidArgument,
                 "split: ranks must be ascending and unique");
  }
  const int generation = splitCalls_[setId]++;
  auto mine = std::lower_bound(ranks.begin(), ranks.end(), rank_);
  const bool member = mine != ranks.end() && *mine == rank_;
  std::shared_ptr<GroupState> child;
  {
    std::lock_guard<std::mutex> lock(group_->mu);
    if (group_->aborted) return group_->abortCause;
    if (!member) return Status::ok();
    const auto key = std::make_pair(setId, generation);
    SplitMeeting& meeting = group_->meetings[key];
    if (!meeting.child) {
      std::vector<int> globals;
      globals.reserve(ranks.size());
      for (int r : ranks) globals.push_back(group_->globalRanks[static_cast<size_t>(r)]);
      meeting.ranks = ranks;
      meeting.child = std::make_shared<GroupState>(std::move(globals));
      auto& kids = group_->children;
      kids.erase(std::remove_if(kids.begin(), kids.end(),
                                [](const std::weak_ptr<GroupState>& w) { return w.expired(); }),
                 kids.end());
      kids.push_back(meeting.child);
    } else if (meeting.ranks != ranks) {
      return Status(ErrorCode::kMismatch, group_->label(rank_) + " split process set " +
                                              std::to_string(setId) +
                                              " with a different member list than its peers");
    }
    child = meeting.child;
    if (++meeting.joined == ranks.size()) group_->meetings.erase(key);
  }
  auto t = std::make_unique<LoopbackTransport>(child, static_cast<int>(mine - ranks.begin()));
  t->setTimeout(timeout());
  *out = std::move(t);
  return Status::ok();
}

}  // namespace

Status createLoopbackGroup(int n, std::vector<std::unique_ptr<Transport>>* out) {
  KOLO_REQUIRE(out != nullptr, kInvalidArgument, "createLoopbackGroup: null output");
  KOLO_REQUIRE(n >= 1 && n <= kMaxRanks, kInvalidArgument,
               "createLoopbackGroup: size " + std::to_string(n) + " outside 1.." +
                   std::to_string(kMaxRanks));
  std::vector<int> globals(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) globals[static_cast<size_t>(r)] = r;
  auto group = std::make_shared<GroupState>(std::move(globals));
  out->clear();
  for (int r = 0; r < n; ++r) out->push_back(std::make_unique<LoopbackTransport>(group, r));
  return Status::ok();
}

}  // namespace kolo
