// SPDX-License-Identifier: Apache-2.0
// NcclExecutor: runs batches of CUDA tensors (ops::DeviceExecutor over NCCL). Internal to
// ops/device; nccl_executor.cc holds setup and dispatch, nccl_collectives.cc the data paths.
//
// Design:
//  - One CUDA device per rank: the first device tensor submitted fixes it (a later tensor on
//    another device is rejected at submission). A rank that never submitted one (it joined)
//    uses device localRank % deviceCount.
//  - Per process set, lazily on its first device batch (all members run that batch at the same
//    point of the agreed response list, so creation is collective without extra agreement):
//    an NCCL communicator over every member; with KOLO_HIERARCHICAL_ALLREDUCE also one over the
//    members on this host and a CPU transport (split from the set's) over the members with
//    this local index on the other hosts. Unique ids go through the Store when the runtime has
//    one, else over the set's CPU transport (ops::shareFromRoots).
//  - A batch: the communicator's stream waits on every entry's ready event (recorded on the
//    producer's stream at submission: the runtime waits on exactly that work, not on the
//    device); copies into the device fusion buffer (batched kernel), prescale, the NCCL
//    collective, postscale, copies out; then one completion event recorded on the stream is
//    given to every handle of the batch, and the coordinator thread polls it (with NCCL's async
//    error and the transport deadline) before returning, so a handle completes only when its
//    device work has, and a lost peer fails the op instead of hanging it.
//  - Hierarchical allreduce: reduce-scatter inside the host (NCCL), allreduce of this rank's
//    shard across hosts over the CPU transport (through pinned host memory), allgather inside
//    the host (NCCL). Used for set 0 and every other set whose hosts hold equal member counts;
//    other sets, and int16/uint16/bool, take the flat NCCL allreduce.
//  - Asynchronous completion (KOLO_ASYNC_COMPLETION=1, Horovod's HOROVOD_ENABLE_ASYNC_COMPLETION):
//    finish() records the completion event and returns at once; the handles complete while the
//    device work may still run, and the consumer orders its stream after the event
//    (kolo_handle_stream_wait; kolo.torch does it in synchronize()). The batch stays in
//    inFlight_, which poll() checks between rounds: the oldest batch against the transport
//    deadline counted from when it could start; a failure aborts every communicator. Every
//    batch waits (on the device) for the previous batch's event, whatever its stream, so the
//    shared fusion buffer is never written by two streams at once; growing the fusion or
//    staging buffer first waits (on the host) for the work in flight, and a handle's owned
//    output released early is freed by poll() once its batch completed (frees_). At shutdown
//    the coordinator drains what is in flight, so a late failure is logged, not lost.
//  - Any failure of a communicator aborts it (ncclCommAbort) and is returned as a transport
//    failure (kTimeout / kPeerLost / kIo), which aborts the runtime; a set whose setup failed
//    keeps failing with that cause.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/config.h"
#include "ops/process_set.h"
#include "ops/entry.h"
#include "ops/batch_plan.h"
#include "ops/device/cuda_device.h"
#include "ops/device_executor.h"
#include "ops/execute.h"
#include "kernels/cuda_util.h"
#include "rendezvous/store.h"
#include "transport/nccl/nccl_transport.h"

namespace kolo {

class NcclExecutor final : public CudaDeviceBase {
 public:
  NcclExecutor(const Config& cfg, std::shared_ptr<Store> store,
               std::shared_ptr<CudaDeviceChoice> choice);
  ~NcclExecutor() override;
  const char* name() const override { return "nccl"; }

  Status execute(const ops::ExecContext& ctx, const std::vector<const Response*>& responses,
                 const std::vector<TensorEntry*>& entries) override;
  Status poll() override;
  Status drain() override;

 private:
  struct SetState {
    Status broken;  // setup failed: every later batch of the set fails with this
    // Every member, made at the first batch that needs it (flatComm): a hierarchical set whose
    // ranks share a GPU per host (KOLO_HOSTNAME on a one-GPU machine) never makes it, since
    // NCCL refuses two ranks of one communicator on one device.
    std::unique_ptr<NcclTransport> all;
    Status allBroken;  // making `all` failed: every later batch that needs it fails with this
    bool hierarchical = false;
    std::unique_ptr<NcclTransport> local;  // hierarchical: the members on this host
    std::unique_ptr<Transport> cross;      // hierarchical, several hosts: CPU, one per host
  };
  using Batch = std::vector<const Response*>;
  using Entries = std::vector<TensorEntry*>;
  struct InFlight {  // asynchronous completion: a batch queued on the device, not seen done
    std::shared_ptr<void> event;
    NcclTransport* transport;  // owned by sets_, which lives as long as the executor
    Deadline deadline;
  };

  Status stateFor(const ProcessSet& set, int device, SetState** out);
  // st->all, made now if it is not yet. Collective over the set's members: every member runs
  // the same batches in the same order, so all of them reach the first one that needs it.
  Status flatComm(const ProcessSet& set, int device, SetState* st);
  Status setUp(const ProcessSet& set, int device, SetState* st);
  Status makeComm(const ProcessSet& set, int device, const std::vector<int>& members,
                  const std::string& kind, std::unique_ptr<NcclTransport>* out);

  // Batch plumbing (nccl_executor.cc).
  Status waitReady(NcclTransport& t, const Entries& es);
  Status finish(NcclTransport& t, const Entries& es);
  // A batch in flight failed: aborts every communicator, forgets the batches, returns cause.
  Status failInFlight(const Status& cause);
  // fusion_.reserve / staging_.reserve, draining first when the buffer must grow.
  Status fusionBuffer(size_t bytes, void** out);
  Status stagingBuffer(size_t bytes, void** out);
  // The batch's plan (ops/batch_plan.h); its outputs come from allocateDeviceOutputs
  // (cuda_device.h).
  Status plan(const ops::ExecContext& ctx, const Batch& rs, const Entries& es,
              const ops::PlanOptions& options, ops::BatchPlan* out);
  Status copies(NcclTransport& t, const std::vector<cuda::CopyDesc>& descs);
  Status scale(NcclTransport& t, void* data, size_t count, DataType dtype, double factor);

  // Data paths (nccl_collectives.cc): each plans its batch and carries the plan out.
  Status runAllreduce(const ops::ExecContext& ctx, SetState& st, const Batch& rs,
                      const Entries& es);
  Status runHierarchical(const ops::ExecContext& ctx, SetState& st, char* buf, size_t padded,
                         DataType dtype, ReduceOp op);
  Status runAllgather(const ops::ExecContext& ctx, SetState& st, const Batch& rs,
                      const Entries& es);
  Status runBroadcast(const ops::ExecContext& ctx, SetState& st, const Batch& rs, TensorEntry& e);
  Status runAlltoall(const ops::ExecContext& ctx, SetState& st, const Batch& rs, TensorEntry& e);
  Status runReducescatter(const ops::ExecContext& ctx, SetState& st, const Batch& rs,
                          TensorEntry& e);

  const std::shared_ptr<Store> store_;
  std::string host_;

  // Coordinator thread only.
  std::map<int32_t, SetState> sets_;
  cuda::DeviceBuffer fusion_;
  cuda::PinnedBuffer staging_;  // hierarchical: the shard on its way across hosts
  std::vector<InFlight> inFlight_;  // asynchronous completion only
  std::shared_ptr<void> lastDone_;  // asynchronous completion: the last batch's event
  // Owned outputs released while their batch ran (asynchronous completion); the handles'
  // deleters hold it weakly and may run on any thread.
  std::shared_ptr<cuda::DeferredFrees> frees_ = std::make_shared<cuda::DeferredFrees>();
};

}  // namespace kolo
