// SPDX-License-Identifier: Apache-2.0
#include "core/coordinator.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "core/fusion_planner.h"
#include "ops/collectives.h"
#include "ops/device_executor.h"
#include "ops/execute.h"
#include "ops/hierarchical.h"
#include "timeline/timeline.h"

namespace kolo {
namespace {

// A failure that is not the op's own (the runtime stopped, a peer was lost during its batch)
// as its handle reports it, "allreduce 'grad': <cause>" (" in process set 2" outside the
// global set), so that a caller with many handles pending sees which op each one was.
Status failedOp(const TensorEntry& e, const Status& cause) {
  return Status(cause.code(), opLabel(e.request.type, keyOf(e.request)) + ": " + cause.message());
}

constexpr size_t kFlagNothingNew = 0;  // 1: nothing this rank must negotiate in full
constexpr size_t kFlagIdle = 1;        // 1: nothing pending on this rank
constexpr size_t kFlagCount = 2;

// The control buffer: [flags][one byte per cache slot] (MIN), then, from the next 8-byte
// boundary, the piggyback payload (core/piggyback.h).
size_t payloadOffset(size_t cacheCapacity) { return (kFlagCount + cacheCapacity + 7) / 8 * 8; }

bool isTransportFailure(ErrorCode c) {
  return c == ErrorCode::kPeerLost || c == ErrorCode::kTimeout || c == ErrorCode::kAborted ||
         c == ErrorCode::kIo;
}

// How long the coordinator thread leaves a fresh op's round to a caller about to wait for it.
constexpr auto kCallerGrace = std::chrono::microseconds(100);

std::chrono::nanoseconds seconds(double s) {
  return std::chrono::nanoseconds(static_cast<int64_t>(s * 1e9));
}

// "0, 2, 5"
template <typename Ranks>
std::string joinRanks(const Ranks& ranks) {
  std::string out;
  for (auto r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

Coordinator::Coordinator(Deps deps)
    : d_(std::move(deps)),
      negotiator_(d_.size, d_.sets),
      cache_(static_cast<size_t>(d_.config.cacheCapacity)),
      hierarchy_(d_.hosts, d_.config.shm != ShmMode::kOff) {
  if (d_.rank == 0 && d_.config.autotune.enabled) {
    const bool crossoversUsed =
        d_.global == nullptr || ops::allreduceCrossoversUsed(*d_.global, d_.config.algorithms);
    // Hierarchical allreduce is searched where it chooses something for the global set.
    ProcessSet world;
    const ops::HostLayout* layout =
        d_.sets != nullptr && d_.sets->get(0, &world) ? hierarchy_.layout(world) : nullptr;
    const bool hierarchicalUsed = hierarchicalAllreduceUsed(d_.config.algorithms, layout);
    autotune_ =
        std::make_unique<Autotuner>(d_.config, d_.size, d_.log, crossoversUsed, hierarchicalUsed);
    Status s = autotune_->open();
    if (!s.isOk()) d_.log->warn("autotune runs without a log: {}", s.message());
  }
}

Coordinator::~Coordinator() { shutdown(); }

void Coordinator::warnUnavailableNatives() const {
  const ops::AlgorithmConfig& cfg = d_.config.algorithms;
  const std::pair<OpType, ops::Algorithm> asked[] = {{OpType::kAllreduce, cfg.allreduce},
                                                     {OpType::kAllgather, cfg.allgather},
                                                     {OpType::kBroadcast, cfg.broadcast},
                                                     {OpType::kAlltoall, cfg.alltoall},
                                                     {OpType::kReducescatter, cfg.reducescatter}};
  for (const auto& [op, algorithm] : asked) {
    if (algorithm != ops::Algorithm::kNative) continue;
    const size_t bytes = 1 << 20;
    if (ops::selectAlgorithm(*d_.global, cfg, op, bytes) == ops::Algorithm::kNative) continue;
    std::string upper = toString(op);
    for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    d_.log->warn(
        "KOLO_{}_ALGORITHM=native, but the {} transport has no native {}: kolo's own "
        "runs instead for host tensors ({} for 1 MiB)",
        upper, d_.global->name(), toString(op), ops::plannedStep(*d_.global, cfg, op, bytes));
  }
}

void Coordinator::start() {
  ProcessSet world;
  if (d_.rank == 0 && d_.config.algorithms.hierarchicalAllreduce == ops::Hierarchical::kOn &&
      d_.sets->get(0, &world)) {
    const ops::HostLayout* layout = hierarchy_.layout(world);
    const std::string why =
        layout == nullptr ? "the ranks' host names are unknown" : ops::hierarchyUnfit(*layout);
    if (!why.empty()) {
      d_.log->warn("KOLO_HIERARCHICAL_ALLREDUCE=1, but {}: host allreduces run flat", why);
    }
  }
  if (d_.rank == 0 && d_.global != nullptr) {
    warnUnavailableNatives();
    const std::string crossed =
        ops::crossoversUnfit(d_.config.algorithms.allreduceCrossovers, d_.size);
    if (!crossed.empty() && ops::allreduceCrossoversUsed(*d_.global, d_.config.algorithms)) {
      d_.log->warn("{}", crossed);
    }
  }
  running_ = true;
  thread_ = std::thread([this] { loop(); });
}

void Coordinator::shutdown() {
  std::lock_guard<std::mutex> lock(shutdownMu_);
  if (!thread_.joinable()) return;
  shutdownRequested_ = true;
  d_.queue->notify();
  thread_.join();
}

Status Coordinator::terminalStatus() const {
  std::lock_guard<std::mutex> lock(statusMu_);
  return terminal_;
}

void Coordinator::loop() {
  ownThread_ = std::this_thread::get_id();
  while (true) {
    runDeferred(false);
    Clock::time_point next;
    {
      std::lock_guard<std::mutex> lock(roundMu_);
      if (stopped_) break;
      if (shutdownRequested_ || Clock::now() >= nextRoundAt()) {
        if (!step()) break;
      }
      next = nextRoundAt();
    }
    if (deferredPending_.load()) continue;
    const bool fresh = d_.queue->waitForWork(
        next, [this] { return shutdownRequested_.load() || deferredPending_.load(); });
    if (fresh) leaveToCaller();
  }
  runDeferred(true);  // a failing caller round's callbacks, queued before finish()
}

bool Coordinator::deferCallback(std::function<void()> fn) {
  // Only from inside a round, on any thread: a callback never runs while roundMu_ is held, so
  // one that blocks for a while (on a lock a waiting user thread holds) leaves the rounds to
  // that waiter (runRoundOnCaller), which completes its op and lets the callback go on. A
  // completion outside any round (no runtime thread is involved) runs it there.
  return inRound() && postCallback(std::move(fn));
}

bool Coordinator::postCallback(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(deferredMu_);
    if (!deferring_) return false;
    deferred_.push_back(std::move(fn));
    deferredPending_ = true;
  }
  d_.queue->notify();
  return true;
}

void Coordinator::runDeferred(bool last) {
  // Each loop turn passes here: without a deferral, no lock. One that lands after this check
  // sets the flag and wakes the queue, so the loop comes back before it waits.
  if (!last && !deferredPending_.load()) return;
  std::vector<std::function<void()>> run;
  {
    std::lock_guard<std::mutex> lock(deferredMu_);
    run.swap(deferred_);
    deferredPending_ = false;
    if (last) deferring_ = false;
  }
  for (auto& fn : run) fn();
}

void Coordinator::leaveToCaller() {
  // A caller that submits and then waits (the synchronous calls, a benchmark loop, Python's
  // synchronize) reaches runRoundOnCaller a few microseconds after its enqueue woke this
  // thread. Leave it the round for a moment, yielding the CPU (a timed sleep would cost a timer
  // wake-up, tens of microseconds here); without a waiter the op starts that much later.
  if (!d_.config.callerRounds) return;
  const auto until = Clock::now() + kCallerGrace;
  // roundThread_ is set only inside a round, and this thread is not in one: a caller is.
  while (roundThread_.load() == std::thread::id() && !shutdownRequested_.load() &&
         Clock::now() < until) {
    std::this_thread::yield();
  }
}

bool Coordinator::runRoundOnCaller(Deadline deadline) {
  if (!d_.config.callerRounds) return false;
  if (deadline - Clock::now() < std::chrono::milliseconds(100)) return false;
  if (roundThread_.load() == std::this_thread::get_id()) return false;  // a callback's wait
  std::unique_lock<std::mutex> lock(roundMu_, std::try_to_lock);
  if (!lock.owns_lock() || stopped_) return false;
  ++callerRoundsRun_;
  step();
  return true;
}

bool Coordinator::step() {
  roundThread_ = std::this_thread::get_id();
  Status s = d_.device != nullptr ? d_.device->poll() : Status::ok();
  if (s.isOk()) s = round();
  lastRoundEnd_ = Clock::now();
  if (!s.isOk()) {
    stopped_ = true;
    finish(s);
  }
  roundThread_ = std::thread::id();
  return s.isOk();
}

Clock::time_point Coordinator::nextRoundAt() const {
  // Pacing (see the header): immediate while this rank has ops pending (new ones, or ones the
  // others lack); the cycle time while others are busy; the heartbeat when the job is idle.
  if (d_.queue->size() > 0) return lastRoundEnd_;
  const double wait = globalIdle_ ? d_.config.heartbeatSeconds : d_.config.cycleTimeMs / 1000.0;
  return lastRoundEnd_ + seconds(wait);
}

void Coordinator::finish(const Status& cause) {
  {
    std::lock_guard<std::mutex> lock(statusMu_);
    terminal_ = cause;
  }
  running_ = false;
  if (cause.code() == ErrorCode::kShutdown) {
    d_.log->debug("coordinator stopped after {} rounds ({} run by waiting callers): {}", rounds_,
                  callerRoundsRun_.load(), cause.message());
    Status late = d_.device != nullptr ? d_.device->drain() : Status::ok();
    if (!late.isOk()) {
      d_.log->error(
          "device work queued before shutdown failed (its ops had completed: "
          "asynchronous completion): {}",
          late.toString());
    }
  } else {
    d_.log->error("runtime aborted: {}", cause.toString());
    d_.global->abort(cause);
    hierarchy_.abort(cause);  // its shared-memory groups do not hear of the global abort
  }
  // The queue closes with the same refusal Runtime::usable() gives, so an op that passed
  // validation just before this point fails at submission instead of waiting in a queue that
  // no thread drains any more.
  const Status refusal =
      cause.code() == ErrorCode::kShutdown
          ? cause
          : Status(ErrorCode::kAborted, "the runtime aborted earlier: " + cause.toString());
  for (auto& e : d_.queue->close(refusal)) {
    endNegotiation(*e);
    e->handle->complete(failedOp(*e, cause));
  }
}

Status Coordinator::round() {
  if (d_.timeline && d_.timeline->markCycles()) d_.timeline->markCycleStart();
  // The round works on every entry in the queue, also those enqueued while it runs; each
  // one's NEGOTIATE_ begin is written where the round first looks at it (beginNegotiation).
  d_.queue->clearNew();
  ++rounds_;

  std::vector<uint8_t> view;
  KOLO_RETURN_IF_ERROR(exchangeViewAfterBatches(&view));
  globalIdle_ = view[kFlagIdle] == 1;

  // Slots set on every rank are ready without negotiation, in slot order (same everywhere).
  std::vector<Response> ready;
  std::set<OpKey> cacheReady;
  std::vector<uint32_t> carried;  // reduced in the view's own pass
  for (uint32_t bit : cache_.bitsInUse()) {
    if (view[kFlagCount + bit] == 1) {
      cacheReady.insert(keyOf(cache_.response(bit)));
      if (piggy_.carries(bit)) {
        carried.push_back(bit);
      } else {
        ready.push_back(cache_.response(bit));
      }
      cache_.touch(bit);  // the same touches in the same order on every rank
    }
  }
  // Last to first, as executeAll completes a batch: one wake-up for a caller waiting in order.
  for (auto it = carried.rbegin(); it != carried.rend(); ++it) deliverPiggyback(*it, view);
  // A cached op that waited past the heartbeat was also announced to rank 0; once it completes
  // through the cache, its requests there are stale. They must go in every round, full or not:
  // left behind, they would complete the name's next submission with this round's requests
  // (a wrong result on the early ranks, a hang on the late one).
  if (d_.rank == 0) {
    for (const auto& key : cacheReady) negotiator_.erase(key);
  }

  bool shutdownNow = false;
  std::string shutdownReason;
  if (view[kFlagNothingNew] == 0) {
    ResponseList list;
    KOLO_RETURN_IF_ERROR(negotiateFull(cacheReady, &list));
    updateCache(list.responses);
    if (list.hasTuning) applyTuning(list.tuning);
    for (auto& r : list.responses) ready.push_back(std::move(r));
    shutdownNow = list.shutdown;
    shutdownReason = list.shutdownReason;
  }

  // Rank 0 holds every pending op's negotiation state, so it warns of stalls in any round, also
  // those that carry nothing new (an announced op waits in the Negotiator without full rounds).
  if (d_.rank == 0 && d_.config.stallCheck) warnStalled(Clock::now());

  Status exec = executeAll(ready);
  if (!exec.isOk()) return exec;
  if (autotune_) autotune_->observe(ready, Clock::now());
  if (shutdownNow) return Status(ErrorCode::kShutdown, shutdownReason);
  return Status::ok();
}

void Coordinator::warnStalled(Clock::time_point now) {
  // At most once a second: the scan is over every pending op.
  if (now - lastStallScan_ < std::chrono::seconds(1)) return;
  lastStallScan_ = now;
  // Only ops that are still stalled keep their last-warning time (the others completed).
  // One line per op for the first kStallLines due in a scan; the rest are counted in one line
  // (thousands of tensors behind one late rank would otherwise be thousands of lines a scan).
  constexpr size_t kStallLines = 10;
  std::map<OpKey, Clock::time_point> warned;
  size_t said = 0;
  std::set<int32_t> othersMissing;
  double othersWaited = 0;
  for (const auto& st : negotiator_.stalled(now, d_.config.stallCheckSeconds)) {
    const OpKey key{st.processSet, st.name};
    auto it = stallWarned_.find(key);
    if (it != stallWarned_.end() && now - it->second < seconds(d_.config.stallCheckSeconds)) {
      warned[key] = it->second;
      continue;
    }
    warned[key] = now;
    if (said++ >= kStallLines) {
      othersMissing.insert(st.missingRanks.begin(), st.missingRanks.end());
      othersWaited = std::max(othersWaited, st.waitedSeconds);
      continue;
    }
    d_.log->warn(
        "stall: {} '{}' (process set {}) has waited {:.0f} s; ranks still missing: {}. "
        "One or more ranks did not submit it (different code paths or a stuck rank?){}",
        toString(st.type), st.name, st.processSet, st.waitedSeconds, joinRanks(st.missingRanks),
        st.hint);
  }
  if (said > kStallLines) {
    d_.log->warn("stall: {} more ops have waited up to {:.0f} s; ranks still missing: {}",
                 said - kStallLines, othersWaited, joinRanks(othersMissing));
  }
  stallWarned_ = std::move(warned);
}

Status Coordinator::exchangeViewAfterBatches(std::vector<uint8_t>* view) {
  // After a round with a batch of a process set this rank is not in, this rank reaches the
  // exchange while that set's members may still run it, for as long as the batch takes (a
  // model-parallel group's 4 GB allreduce): waiting for them is not waiting for a silent peer,
  // and KOLO_TIMEOUT_SECONDS, which bounds each of their own waits, would abort a healthy job
  // here. The members' waits bound the batch (one that stops answering fails its peers within
  // the timeout, and their abort shuts their connections, which ends this wait too), so this
  // one exchange waits up to the stall shutdown time instead (30 minutes by default: how long a
  // rank may wait for others busy elsewhere; never less than the timeout).
  if (!skippedBatch_) return exchangeCacheView(view);
  skippedBatch_ = false;
  return waitingForBusyPeers(*d_.global, [&] { return exchangeCacheView(view); });
}

Status Coordinator::waitingForBusyPeers(Transport& t, const std::function<Status()>& fn) const {
  const double seconds = std::max(d_.config.timeoutSeconds, d_.config.stallShutdownSeconds > 0
                                                                ? d_.config.stallShutdownSeconds
                                                                : Config().stallShutdownSeconds);
  const auto usual = t.timeout();
  t.setTimeout(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  Status s = fn();
  t.setTimeout(usual);
  return s;
}

bool Coordinator::mayWaitForBusy(const ProcessSet& set, std::vector<ProcessSet>* earlier) {
  bool busy = false, seen = false;
  for (const ProcessSet& other : *earlier) {
    if (other.id == set.id) {
      seen = true;
      continue;
    }
    bool shared = false, outside = false;
    for (int32_t r : set.ranks) {
      (std::binary_search(other.ranks.begin(), other.ranks.end(), r) ? shared : outside) = true;
    }
    busy = busy || (shared && outside);
  }
  if (!seen) earlier->push_back(set);
  return busy;
}

Status Coordinator::exchangeCacheView(std::vector<uint8_t>* view) {
  const auto now = Clock::now();
  const auto announceAfter = seconds(d_.config.heartbeatSeconds);
  const size_t viewBytes = kFlagCount + cache_.capacity();
  // The layout is a function of the cache's entries (and of fixed configuration): planned again
  // only in rounds where the cache changed, which are the same rounds on every rank.
  if (!piggyPlanned_ || cache_.version() != piggyCacheVersion_) {
    if (!piggyPlanned_ && d_.config.controlPiggybackBytes > 0) piggyRule_ = piggybackRule();
    piggy_.plan(cache_, piggyRule_ ? static_cast<size_t>(d_.config.controlPiggybackBytes) : 0,
                d_.size, piggyRule_);
    piggyPlanned_ = true;
    piggyCacheVersion_ = cache_.version();
  }
  const size_t payloadAt = payloadOffset(cache_.capacity());
  view->assign(piggy_.payloadBytes() > 0 ? payloadAt + piggy_.payloadBytes() : viewBytes, 0);
  bool nothingNew = !shutdownRequested_;
  bool idle = !shutdownRequested_;
  bool joined = false;
  // A grouped allreduce takes the cache only as a whole: its members are enqueued at once
  // (TensorQueue::addGroup), so each rank sets all of a group's bits in one round or none, and
  // the AND over the ranks releases the group together. One miss sends every member of the
  // group through the Negotiator, whose group record would otherwise wait for members that
  // went the cache's way.
  looked_.clear();
  missedGroups_.clear();
  d_.queue->forEach([&](TensorEntry& e) {
    beginNegotiation(e);
    idle = false;
    if (e.request.type == OpType::kJoin) joined = true;
    if (e.cacheSeen != cache_.version() + 1) {
      e.cacheLookup = static_cast<uint8_t>(cache_.lookup(e.request, &e.cacheBit));
      e.cacheSeen = cache_.version() + 1;
    }
    Looked l{&e, static_cast<ResponseCache::Lookup>(e.cacheLookup), e.cacheBit};
    if (e.request.groupSize > 0 && l.hit != ResponseCache::Lookup::kHit) {
      missedGroups_.push_back(e.request.groupId);
    }
    looked_.push_back(l);
  });
  std::sort(missedGroups_.begin(), missedGroups_.end());  // one entry per missed member
  missedGroups_.erase(std::unique(missedGroups_.begin(), missedGroups_.end()), missedGroups_.end());
  for (Looked& l : looked_) {
    TensorEntry& e = *l.entry;
    if (e.request.groupSize > 0 &&
        std::binary_search(missedGroups_.begin(), missedGroups_.end(), e.request.groupId)) {
      l.hit = ResponseCache::Lookup::kMiss;
    }
    if (l.hit == ResponseCache::Lookup::kHit) {
      (*view)[kFlagCount + l.bit] = 1;
      if (piggy_.carries(l.bit)) {
        piggy_.fill(l.bit, e, cache_.response(l.bit), view->data() + payloadAt);
      }
    }
    if (!e.announced &&
        (l.hit != ResponseCache::Lookup::kHit || now - e.enqueued > announceAfter)) {
      nothingNew = false;
    }
  }
  if (joined) {
    // A joined rank takes part through full negotiation only (it has no entries to match).
    nothingNew = false;
    std::fill(view->begin() + kFlagCount, view->begin() + viewBytes, 0);
  } else {
    // Slots of sets this rank is not in must not hold the others back.
    for (uint32_t bit : cache_.bitsInUse()) {
      ProcessSet set;
      int32_t id = cache_.response(bit).processSet;
      if (!d_.sets->get(id, &set) || set.myIndex < 0) (*view)[kFlagCount + bit] = 1;
    }
  }
  // Rank 0 forces a full round to send new autotune parameters to every rank.
  if (autotune_ && autotune_->hasProposal()) nothingNew = false;
  // Rank 0 forces a full round to deliver responses it made outside one (a removed set's
  // pending ops fail): no other rank may have anything new to ask for one.
  if (d_.rank == 0 && negotiator_.hasImmediate()) nothingNew = false;
  // Rank 0 forces a full round when stalled ops must be failed on every rank. The stall
  // shutdown holds whether or not the stall check (its warnings) is on: a Horovod user who
  // disabled the warnings did not ask for a job that waits forever (0 = never, explicitly).
  if (d_.rank == 0 && d_.config.stallShutdownSeconds > 0 &&
      !negotiator_.stalled(now, d_.config.stallShutdownSeconds).empty()) {
    nothingNew = false;
  }
  (*view)[kFlagNothingNew] = nothingNew ? 1 : 0;
  (*view)[kFlagIdle] = idle ? 1 : 0;
  // The control plane always runs kolo's own p2p algorithms, whatever KOLO_<OP>_ALGORITHM says:
  // their failures name the peer that was lost or that stopped answering ("lost rank 2", "timed
  // out waiting for receive from rank 2"), which is the first thing a user needs when a job dies
  // (a transport's native collective, Gloo's, reports only a socket address). They are the
  // latency-optimal ones (ops::controlAllreduce: recursive doubling; ops::controlBroadcast: a
  // binomial tree, scatter-allgather for a list of 64 KiB or more from 4 ranks), so a round costs
  // O(log2 N) message latencies rather than the ring's 2 (N-1).
  if (piggy_.payloadBytes() == 0) {
    return ops::controlAllreduce(*d_.global, view->data(), view->size(), DataType::kUInt8,
                                 ReduceOp::kMin);
  }
  // The same recursive doubling, with the piggyback's SUM regions beside the MIN bytes.
  std::vector<ops::ReduceRegion> regions{{0, viewBytes, DataType::kUInt8, ReduceOp::kMin}};
  piggy_.regions(payloadAt, &regions);
  return ops::recursiveDoublingAllreduceRegions(*d_.global, view->data(), view->size(), regions);
}

std::function<bool(size_t)> Coordinator::piggybackRule() {
  ProcessSet set;
  // Over shared memory the control round costs microseconds and the data path is the native
  // rank-order fold: nothing to save, and the piggyback's tree would change the bits.
  if (!d_.sets->get(0, &set) || set.transport == nullptr ||
      set.transport->capabilities().sharedMemory) {
    return nullptr;
  }
  const ops::HostLayout* layout = hierarchy_.layout(set);
  const ops::AlgorithmConfig* algorithms = &d_.config.algorithms;
  return [layout, algorithms](size_t bytes) {
    return layout == nullptr || !ops::useHierarchical(*algorithms, *layout, bytes);
  };
}

void Coordinator::deliverPiggyback(uint32_t bit, const std::vector<uint8_t>& control) {
  const Response& r = cache_.response(bit);
  const OpKey key = keyOf(r);
  TensorEntry* e = d_.queue->find(key);
  if (e == nullptr) return;  // cannot be: the view byte says it is pending here
  endNegotiation(*e);
  const bool traced = timelineActive();
  const std::string name = traced ? displayName(key) : std::string();
  if (traced) {
    d_.timeline->opStart(name, r.type);
    d_.timeline->activityStart(name, "CONTROL_PIGGYBACK_ALLREDUCE");
  }
  piggy_.deliver(bit, control.data() + payloadOffset(cache_.capacity()), r, *e);
  if (traced) {
    d_.timeline->activityEnd(name);
    d_.timeline->opEnd(name, r.dtype, r.shape);
  }
  completeEntry(key, Status::ok());
}

Status Coordinator::negotiateFull(const std::set<OpKey>& cacheReady, ResponseList* out) {
  RequestList mine;
  mine.rank = d_.rank;
  mine.shutdown = shutdownRequested_;
  d_.queue->forEach([&](TensorEntry& e) {
    beginNegotiation(e);
    if (e.announced || cacheReady.count(keyOf(e.request))) return;
    e.announced = true;
    mine.requests.push_back(e.request);
  });
  std::vector<std::vector<uint8_t>> all;
  // A binomial tree (ops::controlGather): ceil(log2 N) latencies, not N-1 receives at rank 0.
  KOLO_RETURN_IF_ERROR(ops::controlGather(*d_.global, encode(mine), 0, &all));

  std::vector<uint8_t> answer;
  if (d_.rank == 0) {
    const auto now = Clock::now();
    ResponseList list;
    std::vector<int> shutdownRanks;
    for (size_t r = 0; r < all.size(); ++r) {
      RequestList theirs;
      Status s = decode(all[r].data(), all[r].size(), &theirs);
      if (!s.isOk()) {
        return Status(ErrorCode::kInternal, "rank " + std::to_string(r) +
                                                " sent a malformed request list: " + s.message());
      }
      if (theirs.shutdown) shutdownRanks.push_back(static_cast<int>(r));
      for (const auto& req : theirs.requests) {
        negotiator_.add(req, now);
        if (timelineActive()) {
          d_.timeline->negotiateRankReady(displayName(keyOf(req)), static_cast<int>(r));
        }
      }
    }
    list.responses = negotiator_.takeReady(now);
    if (d_.config.stallShutdownSeconds > 0) {
      for (auto& r : negotiator_.failStalled(now, d_.config.stallShutdownSeconds)) {
        list.responses.push_back(std::move(r));
      }
    }
    if (!shutdownRanks.empty()) {
      list.shutdown = true;
      list.shutdownReason = "kolo was shut down (by rank " + joinRanks(shutdownRanks) + ")";
    }
    if (autotune_ && autotune_->hasProposal()) {
      list.hasTuning = true;
      list.tuning = autotune_->takeProposal();
    }
    answer = encode(list);
  }
  KOLO_RETURN_IF_ERROR(broadcastFromRoot(&answer));
  if (d_.rank != 0) {
    Status s = decode(answer.data(), answer.size(), out);
    if (!s.isOk()) {
      return Status(ErrorCode::kInternal, "malformed response list from rank 0: " + s.message());
    }
  } else {
    KOLO_RETURN_IF_ERROR(decode(answer.data(), answer.size(), out));
  }
  return Status::ok();
}

Status Coordinator::broadcastFromRoot(std::vector<uint8_t>* bytes) {
  uint64_t len = bytes->size();
  KOLO_RETURN_IF_ERROR(ops::controlBroadcast(*d_.global, &len, sizeof(len), 0));
  if (len > (uint64_t{1} << 32)) {
    return Status(ErrorCode::kInternal,
                  "rank 0 announced a " + std::to_string(len) + "-byte response list");
  }
  bytes->resize(len);
  return ops::controlBroadcast(*d_.global, bytes->data(), len, 0);
}

void Coordinator::updateCache(const std::vector<Response>& fromNegotiation) {
  if (cache_.capacity() == 0) return;
  for (const auto& r : fromNegotiation) {
    if (!ResponseCache::isCacheable(r)) {
      cache_.erase(keyOf(r));
      continue;
    }
    // Every rank makes the same put() calls in the same order, so slots agree everywhere. The
    // stored request is this rank's own (for lookups); ranks without one store the response's.
    TensorEntry* e = d_.queue->find(keyOf(r));
    Request req;
    if (e != nullptr) {
      req = e->request;
    } else {
      req.spec() = r.spec();
    }
    cache_.put(r, req);
  }
}

void Coordinator::applyTuning(const TuningParams& p) {
  // Every rank, this same round, before executing it: the batches of this round on take the new
  // values everywhere. A changed hierarchical setting moves the piggyback rule (which small
  // cached allreduces ride in the control round), so the next round plans again, on every rank.
  // The host groups (hierarchy_) stay: built at a set's first hierarchical allreduce, kept.
  if (applyTuningParams(p, &d_.config)) piggyPlanned_ = false;
  d_.log->info(
      "autotune: round {} applies fusion threshold {} B, cycle time {} ms, allreduce "
      "halving-doubling from {} B, ring from {} B, hierarchical allreduce {} ({})",
      rounds_, p.fusionThresholdBytes, p.cycleTimeMs, p.allreduceHdMinBytes,
      p.allreduceRingMinBytes, ops::toString(p.hierarchicalAllreduce),
      p.active ? "searching" : "fixed");
  if (autotune_) autotune_->applied(Clock::now());
}

void Coordinator::beginNegotiation(TensorEntry& e) {
  if (e.timelineOpen || !timelineActive()) return;
  d_.timeline->negotiateStart(displayName(keyOf(e.request)), e.request.type);
  e.timelineOpen = true;
}

bool Coordinator::timelineActive() const { return d_.timeline != nullptr && d_.timeline->active(); }

void Coordinator::endNegotiation(TensorEntry& e) {
  if (!e.timelineOpen) return;
  d_.timeline->negotiateEnd(displayName(keyOf(e.request)));
  e.timelineOpen = false;
}

void Coordinator::completeEntry(const OpKey& key, const Status& s) {
  auto entry = d_.queue->remove(key);
  if (!entry) return;
  endNegotiation(*entry);
  entry->handle->complete(s);
}

Status Coordinator::changeProcessSet(const Response& r, int32_t* id) {
  std::vector<int32_t> ranks(r.shape.begin(), r.shape.end());
  if (r.type == OpType::kAddProcessSet) return d_.sets->add(ranks, id);
  *id = ranks.empty() ? -1 : ranks[0];
  KOLO_RETURN_IF_ERROR(d_.sets->remove(*id));
  hierarchy_.erase(*id);
  negotiator_.processSetRemoved(*id);
  for (uint32_t bit : cache_.bitsInUse()) {
    if (cache_.response(bit).processSet == *id) cache_.erase(keyOf(cache_.response(bit)));
  }
  return Status::ok();
}

Status Coordinator::executeAll(const std::vector<Response>& ready) {
  if (ready.empty()) return Status::ok();
  auto batches =
      planFusion(ready, d_.config.fusionThresholdBytes, d_.size, d_.config.fusionDirectBytes);
  std::vector<ProcessSet> ran;  // the sets of this round's batches so far, once each
  for (const auto& batch : batches) {
    const Response& first = ready[batch.indices.front()];
    ProcessSet set;
    bool known = d_.sets->get(first.processSet, &set);

    if (first.kind == Response::Kind::kError) {
      for (size_t i : batch.indices) {
        completeEntry(keyOf(ready[i]), Status(ready[i].errorCode, ready[i].error));
      }
      continue;
    }
    switch (first.type) {
      case OpType::kJoin: {
        if (TensorEntry* e = d_.queue->find(keyOf(first))) {
          e->handle->lastJoinedRank = first.lastJoinedRank;
        }
        completeEntry(keyOf(first), Status::ok());
        continue;
      }
      case OpType::kBarrier:
        completeEntry(keyOf(first), Status::ok());
        continue;
      case OpType::kAddProcessSet:
      case OpType::kRemoveProcessSet: {
        int32_t id = -1;
        Status s = changeProcessSet(first, &id);
        if (!s.isOk() && isTransportFailure(s.code())) return s;
        if (TensorEntry* e = d_.queue->find(keyOf(first))) e->handle->processSetId = id;
        completeEntry(keyOf(first), s);
        continue;
      }
      default:
        break;
    }
    if (!known) {
      for (size_t i : batch.indices) {
        completeEntry(keyOf(ready[i]),
                      Status(ErrorCode::kInvalidArgument,
                             "process set " + std::to_string(first.processSet) + " is unknown"));
      }
      continue;
    }
    // A batch whose set shares some members with one of this round's earlier batches, not all:
    // those members may still be busy there, longer than KOLO_TIMEOUT_SECONDS, while the
    // others wait for them here (exchangeViewAfterBatches' case, in the data path). Its members
    // first meet in a barrier that waits as long as that exchange would; every member decides
    // alike (the round's batches and the sets are the same on every rank).
    const bool meetFirst = mayWaitForBusy(set, &ran);
    if (set.myIndex < 0) {  // not a member: the others run it without us
      skippedBatch_ = true;
      continue;
    }
    if (meetFirst) {
      uint8_t one = 1;
      KOLO_RETURN_IF_ERROR(waitingForBusyPeers(*set.transport, [&] {
        return ops::controlAllreduce(*set.transport, &one, 1, DataType::kUInt8, ReduceOp::kMin);
      }));
    }

    std::vector<const Response*> rs;
    std::vector<TensorEntry*> es;
    // Names are built only while the timeline writes. A tensor this rank joined for (no entry)
    // gets its op bar too: execute records its steps like any other's.
    const bool traced = timelineActive();
    for (size_t i : batch.indices) {
      rs.push_back(&ready[i]);
      es.push_back(d_.queue->find(keyOf(ready[i])));
      if (traced) {
        if (es.back() != nullptr) endNegotiation(*es.back());
        d_.timeline->opStart(displayName(keyOf(ready[i])), ready[i].type);
      }
    }
    ops::ExecContext ctx{&set, &d_.config.algorithms, &fusion_, d_.timeline, d_.device};
    ctx.hierarchy = &hierarchy_;
    Status s = ops::execute(ctx, rs, es);
    // Last to first: a caller waits for its handles in submission order, so it wakes once, at
    // the first handle, and finds the rest complete, instead of racing the loop and sleeping
    // again at each (one futex wake per tensor: 100 x 64 KiB at 2 ranks went from 1.3 to
    // 0.83 ms per step, median of 4 interleaved runs).
    for (size_t k = rs.size(); k-- > 0;) {
      if (traced) d_.timeline->opEnd(displayName(keyOf(*rs[k])), rs[k]->dtype, rs[k]->shape);
      if (es[k] == nullptr) continue;
      auto entry = d_.queue->remove(keyOf(*rs[k]));
      if (entry) entry->handle->complete(s.isOk() ? entry->localError : failedOp(*entry, s));
    }
    if (!s.isOk() && isTransportFailure(s.code())) return s;
  }
  return Status::ok();
}

}  // namespace kolo
