// SPDX-License-Identifier: Apache-2.0
// Abort notes: how a survivor names the rank that was really lost, not the neighbour that passed
// the failure on.
//
// When a rank aborts its transport it first leaves a note in the group's rendezvous store,
// "kolo/abort/<group rank>" = "<code>:<blamed>:<message>", <blamed> being the group rank it holds
// responsible (-1: none), and only then closes its connections. A peer that sees a connection
// close looks for the note of that peer (explainLoss): a note that blames a third rank is relayed
// ("... (seen by rank 1 (global 1), which then closed its connections)"); no note means the peer
// itself died. A rank that times out leaves a provisional note blaming the peer it waited for,
// then looks a while for its peers' notes (explainTimeout): in a ring or a tree, the rank waited
// for is often a survivor that is itself waiting for the rank that really stopped. A relayed
// note is followed along the blamed ranks' own notes (1 -> 0 -> 3 -> the stopped 4) to the first
// rank that left none or a loop, so a survivor two hops away still names the stopped rank.
//
// Used by the socket transports (tcp, gloo). Ownership: one per group, held by the group's shared
// state. Thread safety: every method may be called from any thread (the store is thread-safe,
// blamed() is atomic). Blocking: leave() does one store write; explainLoss waits at most
// kNoteWait for a note; explainTimeout at most `grace`. Errors: store failures are swallowed
// (best effort: without the store, peers just name this rank).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "rendezvous/store.h"

namespace kolo {

class AbortNotes {
 public:
  // How long explainLoss waits for the peer's note (it is written before the peer's
  // connections close, so it is usually there at once).
  static constexpr std::chrono::milliseconds kNoteWait{200};

  // `store`: the group's store view (may be null: no notes). `globalRanks`: group -> global.
  AbortNotes(std::shared_ptr<Store> store, int rank, std::vector<int> globalRanks);

  // Leaves this rank's note: `cause`, blaming blamed() (best effort).
  void leave(const Status& cause);
  // `direct` is the failure seen on the connection to `groupRank`. When that peer aborted first
  // (it left a note blaming someone else), its own cause is returned instead, marked as relayed.
  Status explainLoss(int groupRank, const Status& direct);
  // `direct` is a timeout waiting for `peers` (most suspect first). Leaves a provisional note
  // blaming peers[0], then looks for up to `grace` for a note of one of them that blames a third
  // rank and returns it relayed (at once when the chain of notes ends at a rank that blames
  // nobody, else the last answer when the grace is over); else `direct`.
  Status explainTimeout(const std::vector<int>& peers, const Status& direct,
                        std::chrono::milliseconds grace);

  // The rank the latest failure blames (-1: none), which leave() writes.
  int blamed() const { return blamed_.load(); }
  // "rank 2 (global 5)"
  std::string describe(int groupRank) const;
  const std::vector<int>& globalRanks() const { return globalRanks_; }

 private:
  void write(const Status& cause, int blamedRank);
  // A peer's note as this rank's cause, following the blamed ranks' notes; ok when it says
  // nothing (unreadable, blames us, or a cycle of waits). *settled (optional): false when the
  // chain ended at a rank that has left no note yet (the answer may still change).
  Status relayed(int groupRank, const std::vector<uint8_t>& note, bool* settled = nullptr);

  std::shared_ptr<Store> store_;
  int rank_;
  std::vector<int> globalRanks_;
  std::atomic<int> blamed_{-1};
};

}  // namespace kolo
