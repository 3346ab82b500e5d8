// SPDX-License-Identifier: Apache-2.0
// Point-to-point messages over the segment's rings (internal to transport/shm).
//
// Every ordered pair (src, dst) has one single-producer single-consumer byte ring. A message is
// a 16-byte header (tag, check word, byte count) at a 16-byte aligned position, then its
// payload, streamed: the sender copies pieces in as space frees up and publishes `head` after
// each, the receiver copies pieces out and publishes `tail`, so a message of any size flows
// through a ring of fixed size with both copies overlapping. There is no progress thread:
// test() and wait() move data for every pending operation of this rank.
//
// Matching (FIFO per (src, dst, tag), as transport.h requires): the header at the front of the
// ring from src goes to the oldest posted, unmatched receive from src with its tag. A message
// nobody posted for yet (a later tag) is copied into an "unexpected" buffer so the ring keeps
// moving; a later receive takes it from there (and, while it is still arriving, takes over the
// rest of it directly). A new message is only started when some receive from that peer is
// posted, so an idle rank applies back-pressure instead of buffering without bound.
// Sends complete once their last byte is in the ring. A receive posted with a byte count other
// than the message's fails with kMismatch (the payload is discarded; the stream stays in step).
//
// Cancelling: destroying an incomplete batch withdraws its queued operations; a receive being
// filled is switched to "discard". A send whose payload is half in the ring cannot be withdrawn
// without desynchronizing the stream: the transport aborts (group-wide).
//
// Thread safety: one thread at a time (the transport's); abort goes through the Segment.
#pragma once

#include <deque>
#include <list>
#include <memory>
#include <vector>

#include "base/status.h"
#include "transport/shm/shm_segment.h"
#include "transport/transport.h"

namespace kolo::shm {

class P2PBatch;

class P2PEngine : public std::enable_shared_from_this<P2PEngine> {
 public:
  explicit P2PEngine(std::shared_ptr<Segment> segment);

  Status post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out);

  Segment& segment() { return *seg_; }

 private:
  friend class P2PBatch;

  struct OpState {
    P2POp op;
    P2PBatch* batch = nullptr;
    size_t moved = 0;         // payload bytes written to / read from the ring so far
    bool headerSent = false;  // sends: the header is in the ring
    bool done = false;
  };
  struct Unexpected {
    uint32_t tag = 0;
    std::vector<uint8_t> data;
    bool complete = false;
  };
  // The message currently arriving from one peer.
  struct Incoming {
    bool active = false;
    uint32_t tag = 0;
    uint64_t bytes = 0;
    uint64_t got = 0;
    OpState* op = nullptr;        // a matched receive, or
    Unexpected* stash = nullptr;  // an unexpected buffer, or neither: discard
  };
  struct Peer {
    std::deque<OpState*> sends;        // to this peer, in post order
    std::deque<OpState*> recvs;        // posted, unmatched receives from this peer, in post order
    std::list<Unexpected> unexpected;  // arrived before their receive, in arrival order
    Incoming in;
    uint64_t sendHead = 0;  // our copy of ring(me, peer).head
    uint64_t recvTail = 0;  // our copy of ring(peer, me).tail
  };

  // Moves whatever can move for every peer with pending work. Errors are fatal stream errors.
  Status progress();
  bool progressSend(int peer, Peer& p);
  bool progressRecv(int peer, Peer& p, Status* fatal);
  void postRecv(int peer, OpState* op);
  void postSelfSend(OpState* op);
  void complete(OpState* op, const Status& status);
  void cancel(OpState* op);
  static bool matchesSize(const OpState* op, uint64_t bytes);
  Status mismatch(int src, uint32_t tag, uint64_t sent, size_t posted) const;

  std::shared_ptr<Segment> seg_;
  std::vector<Peer> peers_;  // indexed by rank; peers_[me] holds self-sends as unexpected
};

}  // namespace kolo::shm
