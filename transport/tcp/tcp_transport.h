// SPDX-License-Identifier: Apache-2.0
// The TCP transport: kolo's own point-to-point over a full mesh of TCP connections.
//
// Why kolo has its own: a small message through Gloo's TCP pairs costs two thread wake-ups
// (Gloo's I/O thread, then the waiter it notifies) plus a "receive posted" note that travels
// back to the sender before the data may go. On the control round, where every op's latency is
// a few such messages in a row, that was 3-7x the cost of the wire (bench/RESULTS.md). Here the
// thread that waits for a batch drives the sockets itself: sends are written at post(), and a
// wait blocks in poll() on the connections of its pending operations, so the kernel wakes the
// waiter directly when bytes arrive and a message costs one wake-up and no reply.
//
// Wire: per ordered pair one byte stream of messages, each a 16-byte header (tag, magic, byte
// count) and the payload. A receive is matched to the oldest message with its tag from that
// peer (FIFO per (peer, tag), as transport.h promises); a message that arrives before its
// receive is posted is kept until it is (a copy), one that finds its receive already posted is
// read straight into the receiver's buffer when large. A byte count that differs from the
// posted receive's is a program error: the transport aborts naming both.
//
// Set-up: each rank listens on the given interface or host (port chosen by the kernel),
// publishes "<nonce>|<address>" in the store under "tcp/addr/<rank>", connects to every lower
// rank (sending a hello with its rank and the peer's nonce, so a stray connection is refused)
// and accepts every higher one; all bounded by the connect timeout. split() builds a new mesh
// among the members in the same way under a key prefix of its own.
//
// Failures: a closed or reset connection fails the operations on it with kPeerLost naming the
// peer (or, through the peer's abort note, the rank that peer lost first: transport/abort_notes.h)
// and aborts the transport; abort() from any thread wakes a waiting poll() at once (an eventfd)
// and shuts every connection down, so peers notice within a round trip. A wait past its deadline
// returns kTimeout naming the outstanding peers (kPeerLost naming a peer whose connection closed
// meanwhile, though nothing waited on it) and leaves the batch usable; a batch destroyed
// with operations outstanding aborts the transport (the streams cannot be resynchronized).
//
// Thread safety: as Transport (one thread at a time; abort() from any thread). Nothing runs in
// the background: no threads of its own.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/store.h"
#include "transport/transport.h"

namespace kolo {

namespace tcp_detail {
class Mesh;
}

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(std::shared_ptr<tcp_detail::Mesh> mesh);
  ~TcpTransport() override;

  const char* name() const override { return "tcp"; }
  int rank() const override;
  int size() const override;
  int globalRank(int groupRank) const override;
  Capabilities capabilities() const override { return Capabilities{}; }

  Status post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) override;
  Status split(const std::vector<int>& ranks, int32_t setId,
               std::unique_ptr<Transport>* out) override;
  void abort(const Status& cause) override;

  // Called once, on the aborting thread, when this transport aborts (a failure it saw, abort(),
  // or its parent's abort). A transport that contains this one (gloo) aborts itself with it.
  void setAbortListener(std::function<void(const Status&)> listener);
  // ok until the transport aborted; then the first cause.
  Status abortCause() const;
  // For a group that rides on this transport and is still connecting (gloo): kPeerLost naming
  // a peer that closed its connection, from `direct` and that peer's abort note; ok when none
  // did. No blocking beyond reading one note.
  Status closedConnection(const Status& direct) const;

 private:
  std::shared_ptr<tcp_detail::Mesh> mesh_;
  int splits_ = 0;  // every rank counts every split: the key prefixes agree everywhere
};

// Collective over `size` ranks: connects the full mesh through `store` (keys under
// "kolo/tcp/<generation>/", so successive jobs over one store never meet). `iface` (a network
// interface name) or else `hostnameOrAddr` (else 127.0.0.1) is where this rank listens. Fails
// with kTimeout naming the ranks that did not connect within `timeout`, kInvalidArgument for an
// address this host cannot listen on.
Status createTcpTransport(std::shared_ptr<Store> store, int rank, int size,
                          const std::string& iface, const std::string& hostnameOrAddr,
                          std::chrono::milliseconds timeout, std::unique_ptr<TcpTransport>* out);

}  // namespace kolo
