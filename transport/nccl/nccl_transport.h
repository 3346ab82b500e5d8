// SPDX-License-Identifier: Apache-2.0
// The NCCL transport: kolo's Transport over one NCCL communicator, for CUDA device memory.
//
// Creation is collective over the group: rank 0 makes a unique id (newUniqueId), the caller
// distributes it (the device executor passes it through the rendezvous Store, or over the
// group's CPU transport when there is no store), and every rank calls create() with it. The
// communicator is non-blocking (ncclConfig_t.blocking = 0), so creation, every NCCL call and
// every wait poll ncclCommGetAsyncError against a deadline instead of blocking inside NCCL: a
// peer that never arrives, dies or hangs gives kTimeout / kPeerLost, never a hang.
//
// Streams: the transport owns one non-blocking CUDA stream on its device; every operation runs
// on it, in call order. The enqueue* functions only launch (they return once NCCL accepted the
// work); synchronize()/waitEvent() wait for it. The Transport interface's collectives and
// PendingOps::wait are enqueue + wait, as that interface promises blocking calls.
//
// Point-to-point: post() issues ncclSend/ncclRecv in one NCCL group. NCCL has no tags: between
// a pair of ranks messages match in issue order, so a peer must post its receives in the order
// the sends were posted (kolo's algorithms do). Counts are bytes.
//
// Reductions: NCCL's sum/min/max/prod for uint8, int8, int32, int64, fp16, bf16, fp32, fp64;
// kAverage adds (the caller postscales). int16, uint16 and bool are gathered and folded by a
// CUDA kernel (cuda_kernels.h). NaN handling of min/max is NCCL's.
//
// Failure: any NCCL or CUDA error, a timeout, or abort() calls ncclCommAbort (on the thread
// that uses the communicator; abort() from another thread only flags it, and the next poll
// acts), after which every call returns the first cause. Thread safety: as Transport.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda_util.h"
#include "transport/transport.h"

namespace kolo {

class NcclTransport final : public Transport {
 public:
  // NCCL_UNIQUE_ID_BYTES of a fresh ncclUniqueId (rank 0 of a group calls it).
  static Status newUniqueId(std::vector<uint8_t>* out);

  // Collective over the group: joins communicator `id` as `rank` of `size` on `device`, waiting
  // at most `timeout` for the others. `globalRanks` maps group ranks to global ranks (for
  // messages; empty = identity). `label` names the communicator in errors ("process set 0").
  static Status create(int device, int rank, int size, const std::vector<uint8_t>& id,
                       std::chrono::milliseconds timeout, std::vector<int> globalRanks,
                       const std::string& label, std::unique_ptr<NcclTransport>* out);
  ~NcclTransport() override;

  // ---- Transport ---------------------------------------------------------------------------
  const char* name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int globalRank(int groupRank) const override;
  Capabilities capabilities() const override;
  Status post(const std::vector<P2POp>& ops, std::unique_ptr<PendingOps>* out) override;
  Status allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  Status allgatherv(const void* send, size_t sendBytes, void* recv,
                    const std::vector<size_t>& recvBytes) override;
  Status broadcast(void* data, size_t bytes, int root) override;
  Status alltoallv(const void* send, const std::vector<size_t>& sendBytes, void* recv,
                   const std::vector<size_t>& recvBytes) override;
  Status reducescatter(const void* send, void* recv, const std::vector<size_t>& recvCounts,
                       DataType dtype, ReduceOp op) override;
  // ncclCommSplit: collective over every rank of this transport.
  Status split(const std::vector<int>& ranks, int32_t setId,
               std::unique_ptr<Transport>* out) override;
  void abort(const Status& cause) override;
  // abort() and, on the thread that uses the communicator, ncclCommAbort at once (its kernels
  // stop instead of spinning until the next use).
  void abortNow(const Status& cause);

  // ---- asynchronous API (the device executor) ----------------------------------------------
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // send may equal recv (in place). Same contracts as the Transport collectives above.
  Status enqueueAllreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  // recv may alias this rank's block (send == recv + offset of block rank()).
  Status enqueueAllgatherv(const void* send, size_t sendBytes, void* recv,
                           const std::vector<size_t>& recvBytes);
  Status enqueueBroadcast(void* data, size_t bytes, int root);
  Status enqueueAlltoallv(const void* send, const std::vector<size_t>& sendBytes, void* recv,
                          const std::vector<size_t>& recvBytes);
  // send holds sum(recvCounts) elements; recv receives block rank(). recv may be
  // send + offset of block rank() when the counts are equal.
  Status enqueueReducescatter(const void* send, void* recv, const std::vector<size_t>& recvCounts,
                              DataType dtype, ReduceOp op);
  // Waits for `event` (recorded on any stream of this device), watching this communicator.
  Status waitEvent(cudaEvent_t event, Deadline deadline);
  // One look at `event`, without blocking: *done once it completed; ok while it runs and the
  // communicator is healthy; the failure (the communicator aborted) on a CUDA or NCCL error or
  // once `deadline` passed.
  Status queryEvent(cudaEvent_t event, Deadline deadline, bool* done);
  // Waits until everything enqueued on stream() so far has completed.
  Status synchronize(Deadline deadline);
  // The first failure (ok while healthy).
  Status failure() const;
  // Shuts the communicator down: ncclCommFinalize, waiting at most `limit` for the peers to do
  // the same, then ncclCommDestroy; ncclCommAbort instead when the transport had failed, was
  // aborted, or the peers did not finalize in time. Returns whether it finalized cleanly. Later
  // calls fail with kShutdown. The destructor closes with min(timeout, 10 s).
  bool close(std::chrono::milliseconds limit);

 private:
  NcclTransport() = default;
  Status usable();
  // Records the cause, calls ncclCommAbort (once), returns the cause.
  Status fail(const Status& cause);
  // Turns an NCCL result into a Status, waiting out ncclInProgress (non-blocking comm).
  Status settle(ncclResult_t r, const char* what, Deadline deadline);
  Status ncclError(ncclResult_t r, const char* what);
  Status kernelReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  std::string describe() const;

  int device_ = -1;
  int rank_ = 0;
  int size_ = 1;
  std::string label_;
  std::vector<int> globalRanks_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<void> syncEvent_;  // reused by synchronize()
  cuda::DeviceBuffer scratch_;       // kernelReduce's gathered slices
  std::atomic<bool> abortRequested_{false};
  mutable std::mutex mu_;
  Status failure_;     // guarded by mu_
  Status abortCause_;  // guarded by mu_
  bool commAborted_ = false;
};

}  // namespace kolo
