// Internal to the Gloo transport (gloo_transport.cc, gloo_p2p.cc, gloo_collectives.cc), and the
// connection bench/gloo_algorithms.cc uses for Gloo's own algorithms (connectGroup, glooMessage).
// kolo uses Gloo through its public headers only; how it interrupts Gloo's waits is in
// gloo_interpose.h and wait_timer.h.
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
#include "transport/gloo/gloo_interpose.h"
#include "transport/gloo/wait_timer.h"
#include "transport/poll_support.h"
#include "transport/transport.h"

namespace kolo::gloo_detail {

// "[/path/pair.cc:612] Connection closed by peer" -> "Connection closed by peer"
std::string glooMessage(const std::exception& e);

// State shared by a transport and its batches.
struct GlooShared {
  std::shared_ptr<gloo::rendezvous::Context> context;
  // The TCP device (listening address, I/O thread), shared with split groups.
  std::shared_ptr<gloo::transport::Device> device;
  // Every buffer of this group, ours and Gloo's (abortAll).
  std::shared_ptr<GroupWaits> waits;
  // Ends the batches' waits on time; shared with split groups. Null in bench's groups.
  std::shared_ptr<WaitTimer> timer;
  std::shared_ptr<Store> store;  // this group's prefixed view, for split()
  int rank = 0;
  int size = 0;
  std::vector<int> globalRanks;  // group rank -> global rank
  AbortState abort;
  SplitChildren<GlooShared> children;  // transports split from this one

  // Records the cause (first wins), interrupts every wait on the group's buffers -- ours and
  // those inside Gloo's own collectives -- and closes the group's connections, so that peers
  // see them close instead of waiting for their timeout. Transports split from this one abort
  // too. Before any of that it leaves the cause in the store as this rank's abort note.
  void abortWith(const Status& cause);
  // `direct` is the failure seen on the connection to `groupRank`. When that peer aborted
  // first (it left an abort note), its own cause is returned instead, marked as relayed: a
  // survivor then names the rank that was really lost, not the survivor that passed the
  // failure on by closing its connections. Waits at most kAbortNoteWait for the note.
  Status explainLoss(int groupRank, const Status& direct);
  // `direct` is a timeout waiting for `peers` (most suspect first). Leaves a provisional note
  // blaming peers[0], then looks for up to `grace` for a note of one of them that blames a
  // third rank (a peer that waits for the rank that really stopped) and returns it relayed.
  Status explainTimeout(const std::vector<int>& peers, const Status& direct,
                        std::chrono::milliseconds grace);
  std::atomic<int> blamed{-1};  // the rank the latest failure blames (for the abort note)
  uint8_t probeSink = 0;        // brokenPeers()' receives, kept until the group goes
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> probes;

  // "rank 2 (global 5)"
  std::string describe(int groupRank) const;

  // The peers whose connection Gloo has marked failed (a native collective failed: which
  // connection it was, Gloo's message tells by address only). Leaves a receive pending on
  // every healthy connection: only for a transport about to abort.
  std::vector<int> brokenPeers();

 private:
  void leaveNote(const Status& cause, int blamedRank);
  // A peer's note as this rank's cause; ok when it says nothing (unreadable, or blames us).
  Status relayed(int groupRank, const std::vector<uint8_t>& note);
};

// Connects a full mesh of `size` ranks through `store` (already prefixed for this group).
// `watched` (the transport's groups): contexts and buffers go through gloo_interpose.h, so kolo
// can interrupt their waits. false: Gloo's own TCP objects, unwrapped, for baselines that
// measure Gloo itself (bench/gloo_algorithms.cc); such a group cannot be aborted by kolo.
Status connectGroup(std::shared_ptr<Store> store, int rank, int size,
                    std::shared_ptr<gloo::transport::Device> device,
                    std::chrono::milliseconds timeout, std::vector<int> globalRanks,
                    std::shared_ptr<GlooShared>* out, bool watched = true);

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
