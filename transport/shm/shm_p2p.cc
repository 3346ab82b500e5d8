// SPDX-License-Identifier: Apache-2.0
// Point-to-point over shm rings. Why streaming rings rather than one slot per message: the ring
// algorithms send 256 KiB segments and the tests send 64 MiB messages; a byte ring moves both
// with a fixed footprint and lets sender and receiver copy at the same time (a piece at a time,
// `head`/`tail` published after each piece). Why copy unexpected messages out of the ring:
// otherwise a message for a tag nobody posted yet would block every later message of that pair,
// and the contract only orders messages per tag.
#include "transport/shm/shm_p2p.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "kernels/copy.h"

namespace kolo::shm {
namespace {

constexpr uint32_t kCheckWord = 0x6d736731;  // "msg1"

struct MessageHeader {
  uint32_t tag;
  uint32_t check;
  uint64_t bytes;
};
static_assert(sizeof(MessageHeader) == 16, "headers occupy 16 aligned ring bytes");

uint64_t alignUp16(uint64_t x) { return (x + 15) & ~uint64_t{15}; }

void copyIntoRing(uint8_t* ring, size_t ringBytes, uint64_t pos, const uint8_t* src, size_t n) {
  const size_t at = static_cast<size_t>(pos & (ringBytes - 1));
  const size_t first = std::min(n, ringBytes - at);
  kernels::copyBytes(ring + at, src, first);
  if (first < n) kernels::copyBytes(ring, src + first, n - first);
}

void copyFromRing(uint8_t* dst, const uint8_t* ring, size_t ringBytes, uint64_t pos, size_t n) {
  const size_t at = static_cast<size_t>(pos & (ringBytes - 1));
  const size_t first = std::min(n, ringBytes - at);
  kernels::copyBytes(dst, ring + at, first);
  if (first < n) kernels::copyBytes(dst + first, ring, n - first);
}

}  // namespace

class P2PBatch final : public PendingOps {
 public:
  P2PBatch(std::shared_ptr<P2PEngine> engine, const std::vector<P2POp>& ops)
      : engine_(std::move(engine)),
        ops_(ops.size()),
        remaining_(ops.size()),
        posted_(Clock::now()) {
    for (size_t i = 0; i < ops.size(); ++i) {
      ops_[i].op = ops[i];
      ops_[i].batch = this;
    }
  }

  ~P2PBatch() override {
    for (auto& o : ops_) {
      if (!o.done) engine_->cancel(&o);
    }
  }

  Status test(bool* done) override {
    *done = false;
    if (!error_.isOk()) return error_;
    if (remaining_ > 0) KOLO_RETURN_IF_ERROR(engine_->progress());
    if (!error_.isOk()) return error_;
    if (remaining_ == 0) {
      *done = true;
      return Status::ok();
    }
    return engine_->segment().aborted();
  }

  Status wait(Deadline deadline) override {
    if (remaining_ == 0 || !error_.isOk()) return error_;
    Status fatal;
    Segment& seg = engine_->segment();
    uint64_t watch = 0;
    for (const auto& o : ops_) {
      if (!o.done) watch |= uint64_t{1} << o.op.peer;
    }
    Status s = seg.waitUntil(
        [&] {
          fatal = engine_->progress();
          return !fatal.isOk() || remaining_ == 0 || !error_.isOk();
        },
        deadline, watch, [&](double secs) { return describeOutstanding(secs); });
    if (!fatal.isOk()) return fatal;
    if (!error_.isOk()) return error_;
    return s;
  }

  std::vector<P2PEngine::OpState>& ops() { return ops_; }

  void onComplete(const Status& status) {
    --remaining_;
    if (!status.isOk() && error_.isOk()) error_ = status;
  }

 private:
  // "rank 1 (global 1) waited 0.3 s for 2 recv(s) from rank 0 (global 0) (tag 7), ..."
  std::string describeOutstanding(double secs) const {
    struct Group {
      P2POp::Kind kind;
      int peer;
      uint32_t tag;
      int n;
    };
    std::vector<Group> groups;
    for (const auto& o : ops_) {
      if (o.done) continue;
      auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
        return g.kind == o.op.kind && g.peer == o.op.peer && g.tag == o.op.tag;
      });
      if (it == groups.end()) {
        groups.push_back(Group{o.op.kind, o.op.peer, o.op.tag, 1});
      } else {
        ++it->n;
      }
    }
    const Segment& seg = engine_->segment();
    char waited[32];
    std::snprintf(waited, sizeof(waited), "%.3g", secs);
    std::string msg = seg.label(seg.rank()) + " waited " + waited + " s for ";
    for (size_t i = 0; i < groups.size(); ++i) {
      const Group& g = groups[i];
      if (i > 0) msg += ", ";
      const bool send = g.kind == P2POp::Kind::kSend;
      msg += std::to_string(g.n) + (send ? " send(s) to " : " recv(s) from ") + seg.label(g.peer) +
             " (tag " + std::to_string(g.tag) + ")";
    }
    return msg;
  }

  std::shared_ptr<P2PEngine> engine_;
  std::vector<P2PEngine::OpState> ops_;  // never resized: the engine's queues point into it
  size_t remaining_;
  Status error_;
  const Clock::time_point posted_;
};

P2PEngine::P2PEngine(std::shared_ptr<Segment> segment)
    : seg_(std::move(segment)), peers_(static_cast<size_t>(seg_->size())) {}

Status P2PEngine::post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) {
  KOLO_REQUIRE(out != nullptr, kInvalidArgument, "shm post: null output");
  for (const P2POp& op : ops) {
    KOLO_REQUIRE(op.peer >= 0 && op.peer < seg_->size(), kInvalidArgument,
                 "shm post: peer " + std::to_string(op.peer) + " outside group of " +
                     std::to_string(seg_->size()));
    KOLO_REQUIRE(op.data != nullptr || op.bytes == 0, kInvalidArgument,
                 "shm post: null buffer for " + std::to_string(op.bytes) + " bytes");
  }
  KOLO_RETURN_IF_ERROR(seg_->aborted());
  auto batch = std::make_unique<P2PBatch>(shared_from_this(), ops);
  const int me = seg_->rank();
  for (OpState& o : batch->ops()) {
    if (o.op.kind == P2POp::Kind::kRecv) {
      postRecv(o.op.peer, &o);
    } else if (o.op.peer == me) {
      postSelfSend(&o);
    } else {
      peers_[static_cast<size_t>(o.op.peer)].sends.push_back(&o);
    }
  }
  // Eager: move what fits now, so a batch that is never waited on still gets going.
  Status s = progress();
  *out = std::move(batch);
  return s;
}

bool P2PEngine::matchesSize(const OpState* op, uint64_t bytes) { return op->op.bytes == bytes; }

Status P2PEngine::mismatch(int src, uint32_t tag, uint64_t sent, size_t posted) const {
  return Status(ErrorCode::kMismatch,
                seg_->label(src) + " sent " + std::to_string(sent) + " bytes to " +
                    seg_->label(seg_->rank()) + " (tag " + std::to_string(tag) +
                    ") but the receive was posted for " + std::to_string(posted));
}

void P2PEngine::complete(OpState* op, const Status& status) {
  op->done = true;
  op->batch->onComplete(status);
}

void P2PEngine::postRecv(int peer, OpState* op) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  for (auto it = p.unexpected.begin(); it != p.unexpected.end(); ++it) {
    if (it->tag != op->op.tag) continue;
    const bool arriving = p.in.active && p.in.stash == &*it;
    if (!matchesSize(op, it->data.size())) {
      complete(op, mismatch(peer, it->tag, it->data.size(), op->op.bytes));
      if (arriving) p.in.stash = nullptr;  // discard the rest
    } else if (!arriving) {
      if (!it->data.empty()) kernels::copyBytes(op->op.data, it->data.data(), it->data.size());
      complete(op, Status::ok());
    } else {
      // Still arriving: take what is here and let the rest land in place.
      if (p.in.got > 0) kernels::copyBytes(op->op.data, it->data.data(), p.in.got);
      op->moved = p.in.got;
      p.in.stash = nullptr;
      p.in.op = op;
    }
    p.unexpected.erase(it);
    return;
  }
  p.recvs.push_back(op);
}

void P2PEngine::postSelfSend(OpState* op) {
  Peer& self = peers_[static_cast<size_t>(seg_->rank())];
  auto it = std::find_if(self.recvs.begin(), self.recvs.end(),
                         [&](OpState* r) { return r->op.tag == op->op.tag; });
  if (it != self.recvs.end()) {
    OpState* recv = *it;
    self.recvs.erase(it);
    if (!matchesSize(recv, op->op.bytes)) {
      Status bad = mismatch(seg_->rank(), op->op.tag, op->op.bytes, recv->op.bytes);
      complete(recv, bad);
      complete(op, bad);
      return;
    }
    if (op->op.bytes > 0) kernels::copyBytes(recv->op.data, op->op.data, op->op.bytes);
    complete(recv, Status::ok());
    complete(op, Status::ok());
    return;
  }
  Unexpected u;
  u.tag = op->op.tag;
  const auto* src = static_cast<const uint8_t*>(op->op.data);
  u.data.assign(src, src + op->op.bytes);
  u.complete = true;
  self.unexpected.push_back(std::move(u));
  complete(op, Status::ok());
}

void P2PEngine::cancel(OpState* op) {
  Peer& p = peers_[static_cast<size_t>(op->op.peer)];
  if (op->op.kind == P2POp::Kind::kSend) {
    p.sends.erase(std::remove(p.sends.begin(), p.sends.end(), op), p.sends.end());
    if (op->headerSent) {
      seg_->abort(Status(ErrorCode::kAborted, seg_->label(seg_->rank()) + " abandoned a send of " +
                                                  std::to_string(op->op.bytes) + " bytes to " +
                                                  seg_->label(op->op.peer) + " (tag " +
                                                  std::to_string(op->op.tag) + ") after " +
                                                  std::to_string(op->moved) + " bytes"));
    }
    return;
  }
  p.recvs.erase(std::remove(p.recvs.begin(), p.recvs.end(), op), p.recvs.end());
  if (p.in.op == op) p.in.op = nullptr;  // the rest of that message is discarded
}

Status P2PEngine::progress() {
  const int me = seg_->rank();
  for (int peer = 0; peer < seg_->size(); ++peer) {
    if (peer == me) continue;
    Peer& p = peers_[static_cast<size_t>(peer)];
    progressSend(peer, p);
    Status fatal;
    progressRecv(peer, p, &fatal);
    if (!fatal.isOk()) {
      seg_->abort(fatal);
      return fatal;
    }
  }
  return Status::ok();
}

bool P2PEngine::progressSend(int peer, Peer& p) {
  if (p.sends.empty()) return false;
  const int me = seg_->rank();
  RingCtl& ctl = seg_->ringCtl(me, peer);
  uint8_t* ring = seg_->ringData(me, peer);
  const size_t cap = seg_->ringBytes();
  const size_t piece = std::max<size_t>(4096, std::min<size_t>(cap / 4, 256 * 1024));
  uint64_t head = p.sendHead;
  uint64_t tail = ctl.tail.load(std::memory_order_acquire);
  // Free bytes if the ring may hold everything up to `end`; re-reads tail when short.
  auto fits = [&](uint64_t end) {
    if (end - tail <= cap) return true;
    tail = ctl.tail.load(std::memory_order_acquire);
    return end - tail <= cap;
  };
  bool moved = false;
  while (!p.sends.empty()) {
    OpState* o = p.sends.front();
    if (!o->headerSent) {
      const uint64_t at = alignUp16(head);
      if (!fits(at + sizeof(MessageHeader))) break;
      MessageHeader h{o->op.tag, kCheckWord, o->op.bytes};
      std::memcpy(ring + (at & (cap - 1)), &h, sizeof(h));
      head = at + sizeof(h);
      o->headerSent = true;
      moved = true;
      ctl.head.store(head, std::memory_order_release);
    }
    const auto* src = static_cast<const uint8_t*>(o->op.data);
    while (o->moved < o->op.bytes) {
      if (!fits(head + 1)) break;
      const size_t n =
          std::min({static_cast<size_t>(cap - (head - tail)), o->op.bytes - o->moved, piece});
      copyIntoRing(ring, cap, head, src + o->moved, n);
      head += n;
      o->moved += n;
      moved = true;
      ctl.head.store(head, std::memory_order_release);
    }
    if (o->moved < o->op.bytes) break;
    p.sends.pop_front();
    complete(o, Status::ok());
  }
  p.sendHead = head;
  if (moved) seg_->notify(peer);
  return moved;
}

bool P2PEngine::progressRecv(int peer, Peer& p, Status* fatal) {
  Incoming& in = p.in;
  if (!in.active && p.recvs.empty()) return false;
  const int me = seg_->rank();
  RingCtl& ctl = seg_->ringCtl(peer, me);
  const uint8_t* ring = seg_->ringData(peer, me);
  const size_t cap = seg_->ringBytes();
  const size_t piece = std::max<size_t>(4096, std::min<size_t>(cap / 4, 256 * 1024));
  uint64_t tail = p.recvTail;
  uint64_t head = ctl.head.load(std::memory_order_acquire);
  auto available = [&](uint64_t end) {
    if (head >= end) return true;
    head = ctl.head.load(std::memory_order_acquire);
    return head >= end;
  };
  bool moved = false;
  for (;;) {
    if (!in.active) {
      if (p.recvs.empty()) break;
      const uint64_t at = alignUp16(tail);
      if (!available(at + sizeof(MessageHeader))) break;
      MessageHeader h;
      std::memcpy(&h, ring + (at & (cap - 1)), sizeof(h));
      if (h.check != kCheckWord) {
        *fatal = Status(ErrorCode::kInternal,
                        "the shared-memory stream from " + seg_->label(peer) + " is corrupt");
        break;
      }
      tail = at + sizeof(h);
      moved = true;
      in = Incoming{};
      in.active = true;
      in.tag = h.tag;
      in.bytes = h.bytes;
      auto it = std::find_if(p.recvs.begin(), p.recvs.end(),
                             [&](OpState* r) { return r->op.tag == h.tag; });
      if (it != p.recvs.end()) {
        OpState* r = *it;
        p.recvs.erase(it);
        if (matchesSize(r, h.bytes)) {
          in.op = r;
        } else {
          complete(r, mismatch(peer, h.tag, h.bytes, r->op.bytes));
        }
      } else {
        p.unexpected.emplace_back();
        p.unexpected.back().tag = h.tag;
        p.unexpected.back().data.resize(h.bytes);
        in.stash = &p.unexpected.back();
      }
    }
    while (in.got < in.bytes) {
      if (!available(tail + 1)) break;
      const size_t n = std::min(
          {static_cast<size_t>(head - tail), static_cast<size_t>(in.bytes - in.got), piece});
      uint8_t* dst = in.op != nullptr      ? static_cast<uint8_t*>(in.op->op.data) + in.got
                     : in.stash != nullptr ? in.stash->data.data() + in.got
                                           : nullptr;
      if (dst != nullptr) copyFromRing(dst, ring, cap, tail, n);
      tail += n;
      in.got += n;
      if (in.op != nullptr) in.op->moved = in.got;
      moved = true;
      ctl.tail.store(tail, std::memory_order_release);
    }
    if (in.got < in.bytes) break;
    in.active = false;
    if (in.op != nullptr) complete(in.op, Status::ok());
    if (in.stash != nullptr) in.stash->complete = true;
    in.op = nullptr;
    in.stash = nullptr;
  }
  p.recvTail = tail;
  if (moved) {
    ctl.tail.store(tail, std::memory_order_release);
    seg_->notify(peer);
  }
  return moved;
}

}  // namespace kolo::shm
