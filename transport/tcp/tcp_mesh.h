// SPDX-License-Identifier: Apache-2.0
// Internal to the TCP transport: one group's connections and the engine that moves its
// messages (tcp_transport.h explains the wire and the failure rules).
//
// Ownership: a Mesh owns its sockets and is shared (shared_ptr) by its transport and the batches
// posted on it; Ops belong to their batch, the Mesh only points at the unfinished ones (a batch
// that goes away unfinished aborts the Mesh and purges the pointers first).
// Threading: everything except abortWith() runs on the one thread that uses the transport;
// abortWith() may run on any thread: it only sets the cause, writes the eventfd that every poll
// watches and shuts the sockets down (descriptors are closed only by the destructor).
// Blocking: only progress() blocks, in ppoll(), until something happened or `until`.
#pragma once

#include <poll.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "rendezvous/store.h"
#include "transport/abort_notes.h"
#include "transport/poll_support.h"
#include "transport/tcp/tcp_socket.h"

namespace kolo::tcp_detail {

constexpr size_t kHeaderBytes = 16;

struct Op {
  bool recv = false;
  int peer = 0;
  uint32_t tag = 0;
  uint8_t* data = nullptr;
  size_t bytes = 0;
  size_t moved = 0;  // send: bytes of header + payload written so far
  bool done = false;
  size_t* open = nullptr;  // the batch's count of unfinished ops
  uint8_t header[kHeaderBytes] = {};
};

// One connection to a peer: what goes out (sends in post order), what is expected (receives
// posted per tag), what came early, and the message being read.
struct Conn {
  Fd fd;
  int peer = -1;
  std::deque<Op*> sends;
  std::unordered_map<uint32_t, std::deque<Op*>> posted;
  std::unordered_map<uint32_t, std::deque<std::vector<uint8_t>>> early;
  size_t waiting = 0;  // sends + posted receives + a receive being read into: poll it while > 0
  // The message being read: into `target` (a posted receive) or into `buffer` (none was).
  bool reading = false;
  uint32_t tag = 0;
  uint64_t bytes = 0, got = 0;
  Op* target = nullptr;
  std::vector<uint8_t> buffer;
  // Bytes read ahead of the parser (headers and small payloads).
  std::vector<uint8_t> stage;
  size_t stageBegin = 0, stageEnd = 0;
  Status broken;  // set once the connection failed; operations on it then fail
};

class Mesh {
 public:
  Mesh(int rank, int size, std::vector<int> globalRanks, std::shared_ptr<Store> store,
       SocketAddress listenAddress);
  ~Mesh();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::vector<int>& globalRanks() const { return notes_.globalRanks(); }
  const std::shared_ptr<Store>& store() const { return store_; }
  const SocketAddress& listenAddress() const { return listenAddress_; }
  std::string describe(int peer) const { return notes_.describe(peer); }

  // Set-up: takes the connected socket to `peer`. Fails when the eventfd cannot be made.
  Status init();
  void adopt(int peer, Fd fd);

  // Queues the ops (already validated) and writes what the sockets take at once. On failure
  // the transport has aborted and the cause is returned.
  Status post(const std::vector<Op*>& ops);
  // One pass: writes and reads what the sockets allow, blocking in ppoll() until something
  // happened or `until` (a past `until`: no blocking). Returns the abort cause once aborted.
  Status progress(Deadline until);
  // A batch that goes away unfinished: aborts with `cause`, then drops every pointer to ops.
  void abandon(const Status& cause);

  // Any thread. The first cause wins; leaves the abort note, wakes the poll, shuts the
  // sockets down, aborts the split children, then calls the listener.
  void abortWith(const Status& cause);
  bool aborted() const { return abort_.isSet(); }
  Status abortCause() const { return abort_.cause(); }
  void addChild(const std::shared_ptr<Mesh>& child) { children_.add(child); }
  void setAbortListener(std::function<void(const Status&)> listener);

  // For a timeout's message. First a look (no blocking) at every connection: one that its peer
  // closed while nothing here waited on it (a rank that exited between two batches, whose ring
  // neighbours then wait for each other) names that peer, explained by its abort note when it
  // left one. Else the waited-for peers' abort notes (abort_notes.h).
  Status explainTimeout(const std::vector<int>& peers, const Status& direct,
                        std::chrono::milliseconds grace);
  // The look at the connections alone (no blocking beyond reading one abort note): kPeerLost
  // naming a peer that closed its connection, explained by its note; ok when none did. Also
  // used while the mesh, or a group that rides on it (gloo), is still connecting.
  Status closedConnection(const Status& direct);
  // `direct` is a failure that `peer` caused: its abort note's cause when it left one that blames
  // a third rank (relayed), else `direct`; this rank's own note then blames `peer`.
  Status explainLoss(int peer, const Status& direct) { return notes_.explainLoss(peer, direct); }

 private:
  Conn& conn(int peer) { return *conns_[static_cast<size_t>(peer)]; }
  void flush(Conn& c);
  void read(Conn& c);
  void parse(Conn& c);
  void startMessage(Conn& c, uint32_t tag, uint64_t bytes);
  void finishMessage(Conn& c);
  void complete(Conn& c, Op* op);
  // A message of `bytes` with `tag` meets the receive `op`: false (and the transport aborted,
  // naming both counts) when the counts differ.
  bool sizesMatch(Conn& c, const Op* op, uint32_t tag, uint64_t bytes);
  // A message that was read before its receive was posted, copied into `op`, which completes.
  bool deliver(Conn& c, Op* op, uint32_t tag, const std::vector<uint8_t>& message);
  // The connection broke: fails it and, when operations were waiting on it, aborts the group
  // with the loss (explained by the peer's abort note when it has one).
  void breakConn(Conn& c, const std::string& why);
  // A protocol violation on `c` (a program error, or corruption): aborts with kInternal.
  void violation(Conn& c, const std::string& what);
  void purge();

  int rank_;
  int size_;
  std::shared_ptr<Store> store_;
  SocketAddress listenAddress_;
  AbortNotes notes_;
  std::vector<std::unique_ptr<Conn>> conns_;  // indexed by peer; null for this rank
  Fd wake_;                                   // eventfd written by abortWith
  AbortState abort_;
  bool purged_ = false;
  SplitChildren<Mesh> children_;
  std::mutex listenerMu_;
  std::function<void(const Status&)> listener_;
  std::vector<::pollfd> pollfds_;  // scratch
  std::vector<Conn*> polled_;           // scratch: the connection of pollfds_[i + 1]
};

// Connects the full mesh of `size` ranks through `store` (already prefixed for this group),
// listening on `listenAddress` (port 0). Collective; bounded by `timeout`.
Status connectMesh(std::shared_ptr<Store> store, int rank, int size,
                   const SocketAddress& listenAddress, std::chrono::milliseconds timeout,
                   std::vector<int> globalRanks, std::shared_ptr<Mesh>* out);

}  // namespace kolo::tcp_detail
