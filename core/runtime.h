// SPDX-License-Identifier: Apache-2.0
// Runtime: one kolo instance in one process. Owns the Config, the rendezvous Store, the global
// Transport, the process sets, the TensorQueue, the Timeline and the Coordinator thread. The
// store, transport, topology and device executor come from bootstrap/ (bootstrap.h), which
// also says how init -> shutdown -> init (any rank and size) keeps rounds apart.
//
// Submission methods validate their arguments on the calling thread (errors name the op, the
// tensor and this rank, and nothing is enqueued), then enqueue and return a handle at once.
// Thread safety: every public method may be called from any thread. shutdown() is idempotent
// and bounded in time; the destructor calls it. A thread waiting on a handle this runtime made
// may run control rounds itself (KOLO_CALLER_ROUNDS, core/coordinator.h). The engine has no
// global variables: the C API's singleton in bindings/c is the only process-wide Runtime, and
// the MPI transport holds the only other mutable process-wide variables, because MPI's own state
// is process-wide (transport/mpi/mpi_transport.cc).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/log.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/topology.h"
#include "core/coordinator.h"
#include "core/process_set.h"
#include "ops/handle.h"
#include "core/tensor_queue.h"
#include "ops/device_executor.h"
#include "rendezvous/store.h"
#include "timeline/timeline.h"
#include "transport/transport.h"

namespace kolo {

using HandlePtr = std::shared_ptr<HandleState>;
class WaiterRounds;  // runtime.cc

class Runtime {
 public:
  // Full initialization from the Config: bootstrap() (launch environment, store, rendezvous,
  // host names, topology, transports), then the engine. `initCount` counts earlier init
  // attempts in this process: the rendezvous round unless KOLO_RENDEZVOUS_ROUND is set.
  static Status create(const Config& config, int64_t initCount, std::unique_ptr<Runtime>* out);
  // The engine over what a bootstrap produced: `create` is bootstrap() then this. The tests'
  // thread ranks over loopback fill `boot` themselves (test/support/runtime_over.h).
  static Status createFrom(BootstrapResult boot, std::unique_ptr<Runtime>* out);
  ~Runtime();

  // Fails (kInvalidArgument) inside a completion callback: the round running the callback
  // would wait for itself.
  Status shutdown();
  // True inside a completion callback or an output allocator (Coordinator::inCallback).
  bool insideRound() const { return coordinator_ && coordinator_->inCallback(); }

  const Topology& topology() const { return topo_; }
  // The data transport ("shm", "mpi", "gloo", "loopback").
  const char* transportName() const { return transport_->name(); }
  // The transport that launched and controls the job ("mpi", "gloo", "loopback"): under shm,
  // the one shm was built on.
  const char* controllerName() const;
  // Whether CUDA tensors can be submitted: the build has a device executor (any CUDA build: NCCL,
  // or host-staged without NCCL) and a device is visible.
  bool deviceEnabled() const;
  // How CUDA tensors travel: the device executor's name ("nccl", "auto": NCCL where the set's
  // ranks have a GPU each; "host": staged through host memory), "" in a build without CUDA.
  const char* deviceOperations() const;
  const Config& config() const { return config_; }
  // Control rounds that waiting callers ran themselves (KOLO_CALLER_ROUNDS), so far.
  uint64_t callerRoundsRun() const { return coordinator_ ? coordinator_->callerRoundsRun() : 0; }
  Timeline& timeline() { return timeline_; }
  // Starts the timeline for this rank (rank 0 only unless KOLO_TIMELINE_ALL_RANKS: then
  // "f.json" becomes "f.<rank>.json"). A no-op on ranks that do not write.
  Status startTimeline(const std::string& path, bool markCycles);
  // Stops it, logging a write error it met or the events it dropped.
  void stopTimeline();

  // ---- ops (asynchronous) ----------------------------------------------------------------
  Status allreduce(const std::string& name, const TensorView& input, const TensorView* output,
                   ReduceOp op, double prescale, double postscale, int32_t processSet,
                   HandlePtr* handle);
  Status groupedAllreduce(const std::string& name, const std::vector<TensorView>& inputs,
                          const std::vector<TensorView>* outputs, ReduceOp op, double prescale,
                          double postscale, int32_t processSet, HandlePtr* handle);
  Status allgather(const std::string& name, const TensorView& input, OutputAllocator alloc,
                   int32_t processSet, HandlePtr* handle);
  Status broadcast(const std::string& name, const TensorView& tensor, int32_t root,
                   int32_t processSet, HandlePtr* handle);
  // splits empty = even split of dim 0.
  Status alltoall(const std::string& name, const TensorView& input,
                  const std::vector<int64_t>& splits, OutputAllocator alloc, int32_t processSet,
                  HandlePtr* handle);
  Status reducescatter(const std::string& name, const TensorView& input, ReduceOp op,
                       double prescale, double postscale, OutputAllocator alloc,
                       int32_t processSet, HandlePtr* handle);
  Status barrier(int32_t processSet, HandlePtr* handle);
  Status join(HandlePtr* handle);
  // This rank cannot submit the collective `type` named `name` that the set's other ranks do
  // (a check of its input outside kolo failed, e.g. a framework's dtype or layout): the op goes
  // to negotiation without a tensor and fails on every rank with `reason`, naming this rank,
  // instead of the others waiting for it. groupSize > 0 with kAllreduce: a grouped allreduce
  // of that many members. Once it is sent (and up to a second passed waiting for the agreed
  // error) returns OK, with *refusal = the op's own error for this rank (kInvalidArgument
  // "<op> '<name>' on rank R: <reason>"); an error when nothing could be sent (not
  // initialized, a bad name or set, the name in flight).
  Status refuseOp(OpType type, const std::string& name, int32_t groupSize, int32_t processSet,
                  const std::string& reason, Status* refusal);
  // Collective over all ranks; the handle's processSetId holds the new id.
  Status addProcessSet(const std::vector<int32_t>& ranks, HandlePtr* handle);
  Status removeProcessSet(int32_t id, HandlePtr* handle);
  bool processSet(int32_t id, ProcessSet* out) const { return sets_->get(id, out); }

 private:
  // startTimeline's path rule (rank 0, or every rank with its rank in the name); `reset`
  // non-null: continue the file an earlier round wrote (Timeline::resume).
  Status openTimeline(const std::string& path, bool markCycles, const Timeline::Reset* reset);
  Runtime() = default;
  Status start(BootstrapResult boot);
  Status usable() const;
  // What an op needs before the other ranks can be told about it: a working runtime, a valid
  // name, a process set that exists and has this rank. A failure goes to the caller alone.
  Status admit(const char* op, const std::string& name, int32_t processSet, ProcessSet* set) const;
  // This rank's tensor (dtype, dimensions, data pointer, device). A failure is refused
  // (refuseInput): the tensor is this rank's own, and the others may have sent good ones.
  Status checkTensor(const char* op, const std::string& name, const TensorView& t) const;
  std::unique_ptr<TensorEntry> makeEntry(OpType type, const std::string& name,
                                         const TensorView& t, int32_t processSet) const;
  Status enqueue(std::unique_ptr<TensorEntry> e, HandlePtr* handle);
  // A refusal that depends on this rank's own values (its shape, splits or root), which the
  // other ranks may have sent valid: the caller gets `why` now, and the op still goes to
  // negotiation with the values as submitted (without its data), where the Negotiator's
  // per-rank checks fail it on every rank naming this one, so that the others do not wait
  // for an op this rank never sends. The caller gets no handle; the agreed error completes the
  // entry. Waits (passively, outside completion callbacks) up to a second for that error: the
  // name is then free for a retry, on every rank alike when every rank refused. Only for values
  // the Negotiator refuses itself (an accepted request would run without data).
  Status refuse(std::unique_ptr<TensorEntry> e, Status why);
  // The same for a failure the Negotiator cannot see (checkTensor, an output that does not
  // match, a bad reduce op or scale): the request goes without its tensor and carries `reason`
  // (Request::refusal), which the others get as "<op> '<name>': rank R could not submit it:
  // <reason>". A grouped allreduce refuses all of its members (refuseGroup).
  // Each returns `why`; `sent` (may be null) gets whether the queue took the entries.
  Status refuseInput(std::vector<std::unique_ptr<TensorEntry>> entries, Status why,
                     const std::string& reason, bool grouped, Status* sent);
  Status refuseOne(std::unique_ptr<TensorEntry> e, Status why, const std::string& prefix);
  Status refuseGroup(const std::string& name, int32_t groupSize, int64_t groupId,
                     int32_t processSet, Status why, const std::string& reason, Status* sent);
  Status sendRefusal(std::vector<std::unique_ptr<TensorEntry>> entries, Status why, bool grouped,
                     Status* sent);
  // Device tensors: the executor's submission checks and the producer's ready event.
  Status prepareDevice(TensorEntry* e, const std::string& op) const;
  std::string where(const char* op, const std::string& name) const;

  Config config_;
  Topology topo_{};
  Logger log_;
  std::shared_ptr<Store> store_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<ProcessSetTable> sets_;
  TensorQueue queue_;
  Timeline timeline_;
  std::unique_ptr<ops::DeviceExecutor> device_;  // CUDA tensors; null without CUDA. Declared
                                                 // before coordinator_: outlives its thread.
  std::unique_ptr<Coordinator> coordinator_;
  // Every handle's Progress (ops/handle.h): rounds on a waiting caller's thread. Detached (and
  // waited for) before the coordinator stops; handles that outlive the runtime hold it weakly.
  std::shared_ptr<WaiterRounds> waiterRounds_;
  std::mutex countersMu_;
  int64_t groupCount_ = 0;
  bool shutDown_ = false;
};

}  // namespace kolo
