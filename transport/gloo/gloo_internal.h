// SPDX-License-Identifier: Apache-2.0
// Internal to the Gloo transport (gloo_transport.cc, gloo_collectives.cc), and the connection
// bench/gloo_algorithms.cc uses for Gloo's own algorithms (connectGroup, glooMessage).
// kolo uses Gloo through its public headers only, for its native collectives; how it interrupts
// Gloo's waits is in gloo_interpose.h. Point-to-point batches go over kolo's own TCP transport
// (transport/tcp), a mesh of its own beside Gloo's.
#pragma once

#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rendezvous/store.h"
#include "transport/abort_notes.h"
#include "transport/gloo/gloo_interpose.h"
#include "transport/poll_support.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace kolo::gloo_detail {

// "[/path/pair.cc:612] Connection closed by peer" -> "Connection closed by peer"
std::string glooMessage(const std::exception& e);

// State shared by a transport and its split children.
struct GlooShared {
  std::shared_ptr<gloo::rendezvous::Context> context;
  // The TCP device (listening address, I/O thread), shared with split groups.
  std::shared_ptr<gloo::transport::Device> device;
  // Every buffer of this group inside Gloo's collectives (abortAll).
  std::shared_ptr<GroupWaits> waits;
  // The group's point-to-point (post()): kolo's TCP transport, aborted with the group and
  // aborting it in turn. Null in bench's groups.
  std::unique_ptr<TcpTransport> p2p;
  std::shared_ptr<Store> store;  // this group's prefixed view, for split()
  int rank = 0;
  int size = 0;
  std::vector<int> globalRanks;  // group rank -> global rank
  std::unique_ptr<AbortNotes> notes;  // transport/abort_notes.h
  AbortState abort;
  SplitChildren<GlooShared> children;  // transports split from this one

  // Records the cause (first wins), leaves it as this rank's abort note, interrupts every wait
  // inside Gloo's collectives, closes the group's connections (Gloo's and the p2p mesh's), so
  // that peers see them close instead of waiting for their timeout, and aborts the children.
  void abortWith(const Status& cause);
  // "rank 2 (global 5)"
  std::string describe(int groupRank) const { return describeGroupRank(groupRank, globalRanks); }

  uint8_t probeSink = 0;  // brokenPeers()' receives, kept until the group goes
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> probes;
  // The peers whose connection Gloo has marked failed (a native collective failed: which
  // connection it was, Gloo's message tells by address only). Leaves a receive pending on
  // every healthy connection: only for a transport about to abort.
  std::vector<int> brokenPeers();
};

// Connects a full mesh of `size` ranks through `store` (already prefixed for this group).
// `watched` (the transport's groups): contexts and buffers go through gloo_interpose.h, so kolo
// can interrupt their waits. false: Gloo's own TCP objects, unwrapped, for baselines that
// measure Gloo itself (bench/gloo_algorithms.cc); such a group cannot be aborted by kolo.
// The point-to-point mesh is not made here (see linkP2P).
Status connectGroup(std::shared_ptr<Store> store, int rank, int size,
                    std::shared_ptr<gloo::transport::Device> device,
                    std::chrono::milliseconds timeout, std::vector<int> globalRanks,
                    const TcpTransport* peers, std::shared_ptr<GlooShared>* out,
                    bool watched = true);

// Makes `p2p` (kolo's TCP transport over the same ranks) the group's point-to-point and links
// the two aborts: either one aborting aborts the other with the same cause.
void linkP2P(const std::shared_ptr<GlooShared>& state, std::unique_ptr<TcpTransport> p2p);

class GlooTransport final : public Transport {
 public:
  explicit GlooTransport(std::shared_ptr<GlooShared> state) : state_(std::move(state)) {}
  ~GlooTransport() override = default;

  const char* name() const override { return "gloo"; }
  int rank() const override { return state_->rank; }
  int size() const override { return state_->size; }
  int globalRank(int groupRank) const override;
  Capabilities capabilities() const override;

  Status post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) override;

  Status allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  Status allgatherv(const void* send, size_t sendBytes, void* recv,
                    const std::vector<size_t>& recvBytes) override;
  Status broadcast(void* data, size_t bytes, int root) override;
  Status alltoallv(const void* send, const std::vector<size_t>& sendBytes, void* recv,
                   const std::vector<size_t>& recvBytes) override;

  Status split(const std::vector<int>& ranks, int32_t setId,
               std::unique_ptr<Transport>* out) override;
  void abort(const Status& cause) override;

 private:
  Status checkUsable() const;
  // Runs one of Gloo's blocking collectives, turning any exception into a Status (and aborting
  // the transport: Gloo leaves its context unusable after a failure).
  template <typename Fn>
  Status runNative(const char* what, Fn&& fn);
  uint32_t nextTag() { return nativeTag_++; }

  std::shared_ptr<GlooShared> state_;
  uint32_t nativeTag_ = 0;  // same sequence on every rank: collectives run in the same order
  int splits_ = 0;          // likewise; keeps rendezvous keys of successive splits apart
};

}  // namespace kolo::gloo_detail
