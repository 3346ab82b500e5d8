// The Gloo transport's point-to-point batches.
//
// Each op gets its own Gloo UnboundBuffer and the slot kP2PSlotPrefix | tag. Gloo matches sends
// and receives per (pair, slot) in post order, which is exactly kolo's FIFO per (src, dst, tag).
//
// Waiting blocks in Gloo's public UnboundBuffer::waitRecv/waitSend on one open op at a time, so
// the thread is woken by Gloo's I/O thread the moment that op completes (no polling, no sleep
// between a completion and its waiter). Two things bound such a wait, because Gloo's own
// timeout closes every connection of the context and is therefore only a backstop here:
//  - the WaitTimer interrupts it (abortWait*) at the batch's deadline, and, while more than one
//    op is open, at the end of a kSlice, after which the batch moves on to the next open op.
//    Gloo reports a failure only to the waits on the failed pair's buffers, so the rotation is
//    what notices a peer lost while the batch waits on another: within a slice per open op.
//    An op that completed or failed costs no slice: its wait returns at once. The slice is as
//    short as the polling it replaces (1 ms): when a rank dies, others fail in turn within a
//    few ms, and the rank that is named is the one whose failure is seen first.
//  - abort() from any thread interrupts every wait of the group (GroupWaits::abortAll).
// test() is the same wait with an expiry of kProbe: it blocks that long at most per open op.
#include <algorithm>

#include "transport/gloo/gloo_internal.h"

namespace kolo::gloo_detail {
namespace {

// Top byte of a Gloo slot names the collective (Gloo uses 0x01..0x08); 'k' is kolo's p2p.
constexpr uint64_t kP2PSlotPrefix = uint64_t{0x6B} << 56;
// How long one of several open ops is waited for before the next one's turn.
constexpr std::chrono::milliseconds kSlice{1};
// test(): how long an open op is waited for.
constexpr std::chrono::microseconds kProbe{50};
// Gloo's own wait timeout, past kolo's expiry: it only fires if the WaitTimer could not.
constexpr std::chrono::milliseconds kBackstop{5000};

struct Entry {
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  int peer = 0;
  bool recv = false;
  size_t bytes = 0;
  bool done = false;
};

class GlooPending final : public PendingOps {
 public:
  explicit GlooPending(std::shared_ptr<GlooShared> state)
      : state_(std::move(state)), posted_(Clock::now()) {}

  ~GlooPending() override {
    if (open_ == 0) return;
    // A posted receive cannot be withdrawn from Gloo, and its pair would stall on the data
    // meant for it: the transport is done for. Closing the connections also tells the peers.
    // The first failure this batch saw is the most useful cause for every later call.
    const std::string abandoned = "gloo: a batch was abandoned with " + std::to_string(open_) +
                                  " operation(s) outstanding (" + outstanding() + ")";
    if (!lastTimeout_.isOk()) {
      state_->abortWith(Status(ErrorCode::kTimeout, lastTimeout_.message() + "; " + abandoned));
    } else {
      state_->abortWith(Status(ErrorCode::kAborted, abandoned));
    }
  }

  Entry& add(std::unique_ptr<gloo::transport::UnboundBuffer> buffer, const P2POp& op) {
    Entry e;
    e.buffer = std::move(buffer);
    e.peer = op.peer;
    e.recv = op.kind == P2POp::Kind::kRecv;
    e.bytes = op.bytes;
    entries_.push_back(std::move(e));
    ++open_;
    return entries_.back();
  }

  // The op of `e` could not even be posted.
  Status postFailed(Entry& e, const std::exception& ex) {
    e.done = true;  // nothing of it is pending in Gloo
    --open_;
    return fail(e, glooMessage(ex));
  }

  Status test(bool* done) override {
    *done = false;
    for (Entry& e : entries_) {
      KOLO_RETURN_IF_ERROR(usable());
      if (!e.done) KOLO_RETURN_IF_ERROR(block(e, Clock::now() + kProbe));
    }
    KOLO_RETURN_IF_ERROR(usable());
    *done = open_ == 0;
    return Status::ok();
  }

  Status wait(Deadline deadline) override {
    size_t next = 0;  // the open op whose turn it is
    for (;;) {
      KOLO_RETURN_IF_ERROR(usable());
      if (open_ == 0) return Status::ok();
      const Clock::time_point now = Clock::now();
      if (now >= deadline) {
        // A last look at every open op (a wait called with a deadline already past, or ops
        // that completed while another one's wait ran out).
        bool done = false;
        KOLO_RETURN_IF_ERROR(test(&done));
        return done ? Status::ok() : timedOut(deadline);
      }
      while (entries_[next % entries_.size()].done) ++next;
      Entry& e = entries_[next % entries_.size()];
      const Clock::time_point expiry = open_ > 1 ? std::min(deadline, now + kSlice) : deadline;
      KOLO_RETURN_IF_ERROR(block(e, expiry));
      if (!e.done) ++next;  // interrupted: the next open op's turn
    }
  }

 private:
  Status usable() const {
    if (!failed_.isOk()) return failed_;
    if (state_->abort.isSet()) return state_->abort.cause();
    return Status::ok();
  }

  // Waits for `e` until it completes, fails, or `expiry` (or an abort) interrupts the wait.
  Status block(Entry& e, Clock::time_point expiry) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(expiry - Clock::now());
    const auto glooTimeout = std::max(left, std::chrono::milliseconds(0)) + kBackstop;
    const uint64_t ticket = state_->timer->arm(e.buffer.get(), e.recv, expiry);
    bool completed = false;
    std::string error;
    try {
      completed = e.recv ? e.buffer->waitRecv(nullptr, glooTimeout)
                         : e.buffer->waitSend(nullptr, glooTimeout);
    } catch (const std::exception& ex) {
      error = glooMessage(ex);
      if (error.empty()) error = "unknown error";
    } catch (...) {
      error = "unknown exception";
    }
    state_->timer->cancel(ticket);
    if (!error.empty()) return fail(e, error);
    if (completed) {
      e.done = true;
      --open_;
    }
    return Status::ok();
  }

  // The op of `e` failed (its connection closed, or the group aborted meanwhile).
  Status fail(Entry& e, const std::string& why) {
    failed_ =
        state_->abort.isSet() ? state_->abort.cause() : state_->explainLoss(e.peer, lost(e, why));
    state_->abortWith(failed_);  // the pair is closed; peers learn it at once
    return failed_;
  }

  Status timedOut(Deadline deadline) {
    // A quarter of the time this batch was given (about the transport timeout), <= 1 s.
    const auto grace = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(1000),
        std::chrono::duration_cast<std::chrono::milliseconds>((deadline - posted_) / 4));
    lastTimeout_ = state_->explainTimeout(
        outstandingPeers(),
        Status(ErrorCode::kTimeout, "gloo: timed out waiting for " + outstanding()), grace);
    return lastTimeout_;
  }

  Status lost(const Entry& e, const std::string& why) const {
    return Status(ErrorCode::kPeerLost, "gloo: lost " + state_->describe(e.peer) + " during a " +
                                            (e.recv ? "receive of " : "send of ") +
                                            std::to_string(e.bytes) + " bytes: " + why);
  }

  // Peers of unfinished ops, those we receive from first (a send may only wait for a peer
  // that is itself waiting for someone else).
  std::vector<int> outstandingPeers() const {
    std::vector<int> peers;
    for (int pass = 0; pass < 2; ++pass) {
      for (const Entry& e : entries_) {
        if (e.done || e.recv != (pass == 0)) continue;
        if (std::find(peers.begin(), peers.end(), e.peer) == peers.end()) peers.push_back(e.peer);
      }
    }
    return peers;
  }

  std::string outstanding() const {
    std::string text;
    std::vector<std::pair<int, bool>> named;
    for (const Entry& e : entries_) {
      if (e.done) continue;
      auto key = std::make_pair(e.peer, e.recv);
      if (std::find(named.begin(), named.end(), key) != named.end()) continue;
      named.push_back(key);
      if (!text.empty()) text += ", ";
      text += std::string(e.recv ? "receive from " : "send to ") + state_->describe(e.peer);
    }
    return text.empty() ? "nothing" : text;
  }

  std::shared_ptr<GlooShared> state_;
  std::vector<Entry> entries_;
  size_t open_ = 0;
  Status failed_;
  Status lastTimeout_;
  Clock::time_point posted_;
};

}  // namespace

Status GlooTransport::post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) {
  KOLO_RETURN_IF_ERROR(checkUsable());
  // Validate everything first: once an op is posted, a failure abandons the batch.
  for (const P2POp& op : ops) {
    KOLO_REQUIRE(op.peer >= 0 && op.peer < state_->size && op.peer != state_->rank,
                 kInvalidArgument,
                 "gloo: peer " + std::to_string(op.peer) + " is not another rank of a group of " +
                     std::to_string(state_->size));
  }
  auto pending = std::make_unique<GlooPending>(state_);
  for (const P2POp& op : ops) {
    const uint64_t slot = kP2PSlotPrefix | op.tag;
    // Entry first: whatever happens, the buffer is owned by the batch.
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    try {
      buffer = state_->context->createUnboundBuffer(op.data, op.bytes);
    } catch (const std::exception& e) {
      return Status(ErrorCode::kInternal, "gloo: createUnboundBuffer: " + glooMessage(e));
    }
    Entry& e = pending->add(std::move(buffer), op);
    try {
      if (e.recv) {
        e.buffer->recv(op.peer, slot, 0, op.bytes);
      } else {
        e.buffer->send(op.peer, slot, 0, op.bytes);
      }
    } catch (const std::exception& ex) {
      if (state_->abort.isSet()) return state_->abort.cause();
      return pending->postFailed(e, ex);
    }
  }
  *out = std::move(pending);
  return Status::ok();
}

}  // namespace kolo::gloo_detail
