// SPDX-License-Identifier: Apache-2.0
// Internal to the MPI transport (mpi_transport.cc, mpi_collectives.cc): the shared state of a
// transport and the helpers its waits use. Not installed, not included elsewhere.
#pragma once

// kolo uses MPI's C API only; keep the C++ bindings (and their link dependency) out.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/mpi/mpi_reductions.h"
#include "transport/poll_support.h"
#include "transport/transport.h"

namespace kolo::mpi_detail {

// How the ranks of an MPI job hear of each other's aborts (the design is in mpi_abort.cc): one
// per world transport, shared with the transports split from it. create() takes over `comm`, a
// duplicate of the world of the channel's own (freed by the destructor), and posts the receive.
// announce() sends `cause` to every other rank, once, and not after this rank heard of another's
// abort. heard() tests the receive: true with the cause ("mpi: global rank R aborted its runtime:
// ...") once a peer's note arrived. Thread safety: every method may be called from any thread (a
// mutex guards the requests; heard() skips the test while another thread holds it). Blocking: none
// (the destructor cancels the posted receive, which completes locally). Errors: MPI failures
// of announce() and heard() are ignored (best effort: waits still end at their deadlines).
class AbortChannel {
 public:
  static Status create(MPI_Comm comm, std::shared_ptr<AbortChannel>* out);
  ~AbortChannel();
  AbortChannel(const AbortChannel&) = delete;
  AbortChannel& operator=(const AbortChannel&) = delete;

  void announce(const Status& cause);
  bool heard(Status* cause);

 private:
  AbortChannel() = default;
  std::mutex mu_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
  MPI_Request recv_ = MPI_REQUEST_NULL;
  std::vector<char> note_;  // the posted receive's buffer
  std::vector<char> sent_;  // this rank's note, alive while its sends are
  std::vector<MPI_Request> sends_;
  bool announced_ = false;
  std::atomic<bool> heard_{false};
  Status heardCause_;
};

// State shared by a transport and the batches it posted (which may outlive a failed call).
struct MpiShared {
  ~MpiShared();  // frees the communicator unless MPI is finalized
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 0;
  int tagUpperBound = 32767;
  bool sharedMemory = false;
  std::vector<int> globalRanks;  // group rank -> MPI_COMM_WORLD rank
  std::shared_ptr<const MpiReductions> reductions;
  AbortState abort;
  SplitChildren<MpiShared> children;      // transports split from this one
  std::shared_ptr<AbortChannel> channel;  // the world's, shared by the transports split from it
  bool world = false;                     // this is the world transport (it announces aborts)

  // A peer's abort heard on the channel: records it as this transport's cause and returns true.
  bool peerAborted(Status* cause);

  // Records the cause (first wins), here and in the transports split from this one.
  void abortWith(const Status& cause);
  // "rank 2 (global 5)"
  std::string describe(int groupRank) const;
};

// Polls `*req` until it completes, the abort state is set (returns the cause) or the deadline
// passes (kTimeout). On failure the request is left behind (MPI cannot cancel collectives) and
// `state` is aborted, because MPI may still write the buffers. `what` names the operation.
Status waitRequest(MpiShared& state, MPI_Request* req, const std::string& what, Deadline deadline);

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(std::shared_ptr<MpiShared> state);
  ~MpiTransport() override = default;

  const char* name() const override { return "mpi"; }
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
  Status reducescatter(const void* send, void* recv, const std::vector<size_t>& recvCounts,
                       DataType dtype, ReduceOp op) override;

  Status split(const std::vector<int>& ranks, int32_t setId,
               std::unique_ptr<Transport>* out) override;
  void abort(const Status& cause) override;

 private:
  Status checkUsable() const;
  std::shared_ptr<MpiShared> state_;
};

}  // namespace kolo::mpi_detail
