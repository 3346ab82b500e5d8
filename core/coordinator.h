// SPDX-License-Identifier: Apache-2.0
// Coordinator: the background thread of a Runtime. Each round it
//   1. drains this rank's new ops and computes its view: a byte per response-cache slot (1 =
//      "pending here, cached"), plus "nothing new to negotiate" and "idle" flags;
//   2. runs one MIN-allreduce of that vector over the global transport (a bitwise AND): slots
//      that are 1 everywhere are ready with no request messages (the cache round); the same
//      pass sums the payload of small cached allreduces (core/piggyback.h), which then complete
//      without a data step;
//   3. only if some rank has something uncached (or joined, or is shutting down, or rank 0
//      must fail stalled ops), every rank sends its new requests to rank 0 up a binomial tree
//      (ops::controlGather, ceil(log2 N) steps), and rank 0's Negotiator
//      validates them and answers the same ordered response list to every rank;
//   4. plans fusion over the ready responses and executes the batches, completing handles.
// Every rank runs the same rounds in lockstep, so all ranks execute the same response list.
// Pacing: a round starts at once when an op is enqueued, and at once after a round that left
// ops of this rank pending (the next round then waits in its control allreduce for the ranks
// that lack them, and completes as soon as they submit, instead of a cycle later); a rank with
// nothing pending while others are busy runs a round every KOLO_CYCLE_TIME; when every rank is
// idle the thread sleeps on a condition variable and only a heartbeat round
// (KOLO_HEARTBEAT_SECONDS) runs, so an idle runtime costs nothing and a silent peer is still
// noticed (KOLO_TIMEOUT_SECONDS).
// Caller rounds (KOLO_CALLER_ROUNDS, on by default): a round may run on any thread, one at a
// time (roundMu_). A thread that waits for its own op (HandleState::wait) runs the rounds itself
// while no other thread is running one (runRoundOnCaller), so a synchronous op costs no wake-up
// of this thread and no wake-up back; this thread then only paces what nobody waits for
// (asynchronous ops, the cycle and the heartbeat), counting from the last round run by anyone.
// Every round, on whichever thread, is the same collective step in the same order. New ops
// wake this thread as before, but it leaves their round to a caller for up to 100 us.
// Autotune (KOLO_AUTOTUNE, core/autotune.h): rank 0's Autotuner scores the executed
// allreduces; a new parameter set forces a full round and travels in its response list, and
// every rank applies it in that round before executing (the same round everywhere).
// Failure: any transport error aborts the runtime; every pending op fails with the first cause
// (naming the lost rank), later submissions fail at once with it.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "base/config.h"
#include "base/log.h"
#include "core/autotune.h"
#include "core/negotiator.h"
#include "core/piggyback.h"
#include "core/process_set.h"
#include "core/response_cache.h"
#include "core/tensor_queue.h"
#include "ops/fusion_buffer.h"
#include "ops/hierarchical.h"
#include "transport/transport.h"

namespace kolo {

class Timeline;
namespace ops {
class DeviceExecutor;
}

class Coordinator {
 public:
  struct Deps {
    Config config;
    int rank = 0, size = 1;
    Transport* global = nullptr;            // not owned
    ProcessSetTable* sets = nullptr;        // not owned
    TensorQueue* queue = nullptr;           // not owned
    Timeline* timeline = nullptr;           // not owned, may be null
    ops::DeviceExecutor* device = nullptr;  // not owned; null without a CUDA/NCCL path
    std::vector<std::string> hosts;         // every global rank's host name (empty: unknown)
    Logger log;
  };

  explicit Coordinator(Deps deps);
  ~Coordinator();  // stops the thread (as shutdown(kShutdown))

  void start();
  // Asks every rank to stop after the current round and waits for this thread to end (bounded
  // by the transport timeout). Pending ops fail with a kShutdown error naming who shut down.
  // Idempotent; safe from any thread except the coordinator itself (callbacks must not call it).
  void shutdown();
  // ok while running; afterwards the reason new ops must fail (abort cause or shutdown).
  Status terminalStatus() const;
  bool running() const { return running_.load(); }
  // A waiting caller's turn (ops::Progress): runs one round on the calling thread and returns
  // true, or returns false at once when another thread is running a round, the runtime has
  // stopped, caller rounds are off, or `deadline` is less than 100 ms away. The round may block
  // until the peers take part (bounded by KOLO_TIMEOUT_SECONDS, as on this thread), so a wait
  // can end that much past its deadline. Any thread except inside a completion callback.
  bool runRoundOnCaller(Deadline deadline);
  // Rounds run so far by waiting callers (runRoundOnCaller), for tests and diagnostics.
  uint64_t callerRoundsRun() const { return callerRoundsRun_.load(); }
  // True on the thread running a round (a completion callback runs there): no wait there can
  // see a later round's result.
  bool inRound() const { return roundThread_.load() == std::this_thread::get_id(); }
  // A completion callback of an op that a round completed (ops::Progress), on this thread or a
  // waiting caller's: queued for this thread, which runs it after the round, outside roundMu_
  // (kolo.h: callbacks run on a kolo thread; a user thread inside a wait may hold locks the
  // callback takes, and runs the rounds that complete its op meanwhile). False where the
  // calling thread is not in a round, or this thread has ended: it runs there.
  bool deferCallback(std::function<void()> fn);
  // The same from any thread (a callback attached after its op completed): queued for this
  // thread unless its loop has ended (false: the caller runs it).
  bool postCallback(std::function<void()> fn);
  // True on this coordinator's own thread (inside callbacks and allocators, between rounds).
  bool onOwnThread() const { return ownThread_.load() == std::this_thread::get_id(); }
  // True where only kolo's own code, completion callbacks and output allocators run: inside a
  // round (on any thread) or on this coordinator's thread. Nothing there may wait for an op.
  bool inCallback() const { return inRound() || onOwnThread(); }

 private:
  void loop();
  // roundMu_ held: a device poll and one round; on failure, or the agreed shutdown, finishes the
  // runtime (finish) and returns false. Records when the round ended.
  bool step();
  // After new ops woke this thread: yields for up to 100 us while no caller has taken the round.
  void leaveToCaller();
  // This thread: runs the callbacks deferCallback queued, in order. `last`: the loop has ended;
  // later deferrals are refused (they run on their own thread).
  void runDeferred(bool last);
  // roundMu_ held: when this thread's pacing wants the next round (now while ops of this rank
  // are pending; the cycle time while others are busy; the heartbeat when all are idle).
  Clock::time_point nextRoundAt() const;
  Status round();
  // exchangeCacheView, waiting up to the stall shutdown time (not KOLO_TIMEOUT_SECONDS) when
  // the last round had a batch of a set without this rank (skippedBatch_): its members may
  // still be running it.
  Status exchangeViewAfterBatches(std::vector<uint8_t>* view);
  // Runs fn (waits on t) with t's timeout raised, then restored, to how long a rank waits for
  // peers busy in a batch it is not in: the stall shutdown time (30 minutes by default), never
  // less than KOLO_TIMEOUT_SECONDS.
  Status waitingForBusyPeers(Transport& t, const std::function<Status()>& fn) const;
  // Whether `set` shares some, not all, of its members with one of `earlier` (the sets of this
  // round's batches so far, each once; `set` is added): a member may then wait for another
  // still busy there. One pass over the round's distinct sets (one set: nothing to compare).
  static bool mayWaitForBusy(const ProcessSet& set, std::vector<ProcessSet>* earlier);
  Status exchangeCacheView(std::vector<uint8_t>* view);
  Status negotiateFull(const std::set<OpKey>& cacheReady, ResponseList* out);
  Status broadcastFromRoot(std::vector<uint8_t>* bytes);
  void updateCache(const std::vector<Response>& fromNegotiation);
  Status executeAll(const std::vector<Response>& ready);
  // The timeline's NEGOTIATE_<OP> begin and end of an entry: the begin when a round first
  // looks at it (with the timeline on), the end once, if a begin was written.
  void beginNegotiation(TensorEntry& e);
  // Rank 0: logs a warning for each op pending longer than KOLO_STALL_CHECK_TIME_SECONDS (again
  // every such period), naming its set and the ranks that did not submit it.
  void warnStalled(Clock::time_point now);
  void endNegotiation(TensorEntry& e);
  // Whether the timeline writes now: event names (displayName) are built only then.
  bool timelineActive() const;
  void completeEntry(const OpKey& key, const Status& s);
  // Whether a global-set allreduce of `bytes` may ride in the control round (core/piggyback.h):
  // the global transport is not shared memory (null rule: none may) and the data path would not
  // be hierarchical. Taken once, and again after autotune switched hierarchical allreduce
  // (applyTuning; the same round on every rank).
  std::function<bool(size_t)> piggybackRule();
  // Completes the carried op of cache slot `bit` from the reduced control buffer.
  void deliverPiggyback(uint32_t bit, const std::vector<uint8_t>& control);
  // Executes an agreed kAddProcessSet / kRemoveProcessSet on the ProcessSetTable (the one owner
  // of the sets) and tells the Negotiator and the cache of a removal. *id: the set's id.
  // Rank 0 at start: a KOLO_<OP>_ALGORITHM=native the global transport cannot honour (kolo's
  // own algorithm runs instead, select.cc rule 2) is said once, not left silent.
  void warnUnavailableNatives() const;
  Status changeProcessSet(const Response& r, int32_t* id);
  void finish(const Status& cause);
  // Every rank, in the round whose response list carries them: the autotuner's knobs.
  void applyTuning(const TuningParams& p);

  Deps d_;
  Negotiator negotiator_;  // used on rank 0 only
  ResponseCache cache_;
  FusionBuffer fusion_;
  ops::HierarchyCache hierarchy_;          // host allreduces across hosts (ops/hierarchical.h)
  Piggyback piggy_;                        // small cached allreduces in the control buffer
  std::function<bool(size_t)> piggyRule_;  // piggybackRule(), taken once (null: no piggyback)
  bool piggyPlanned_ = false;              // piggy_ holds a plan for...
  uint64_t piggyCacheVersion_ = 0;         // ...this cache_.version()
  std::thread thread_;
  std::mutex roundMu_;  // one round at a time, on this thread or a waiting caller's
  std::atomic<std::thread::id> roundThread_{};  // the thread inside step(), if any (a callback
                                                // there that waits must not take roundMu_
                                                // again; leaveToCaller sees a caller's round)
  bool stopped_ = false;                        // (roundMu_) finish() ran: no more rounds
  Clock::time_point lastRoundEnd_{};            // (roundMu_) by whichever thread
  std::atomic<uint64_t> callerRoundsRun_{0};
  std::atomic<std::thread::id> ownThread_{};  // this coordinator's thread while loop() runs
  std::mutex deferredMu_;
  std::vector<std::function<void()>> deferred_;  // (deferredMu_) callbacks for this thread
  bool deferring_ = true;                        // (deferredMu_) false once loop() ended
  std::atomic<bool> deferredPending_{false};     // deferred_ is not empty
  std::atomic<bool> running_{false};
  std::atomic<bool> shutdownRequested_{false};
  bool globalIdle_ = true;     // (roundMu_) last round: every rank idle
  bool skippedBatch_ = false;  // (roundMu_) last round had a batch of a set without this rank
  std::map<OpKey, Clock::time_point> stallWarned_;  // rank 0: last warning per op
  Clock::time_point lastStallScan_{};               // rank 0: last warnStalled() scan
  // exchangeCacheView's scratch (kept to reuse the allocations): each queued entry's cache
  // lookup, and the groups with a member that missed (coordinator thread only). Entries stay
  // valid through the round: only this thread removes them.
  struct Looked {
    TensorEntry* entry;
    ResponseCache::Lookup hit;
    uint32_t bit;
  };
  std::vector<Looked> looked_;
  std::vector<int32_t> missedGroups_;
  std::unique_ptr<Autotuner> autotune_;  // rank 0 with KOLO_AUTOTUNE, else null
  uint64_t rounds_ = 0;                  // rounds run (the same on every rank)
  mutable std::mutex statusMu_;
  Status terminal_;
  std::mutex shutdownMu_;
};

}  // namespace kolo
