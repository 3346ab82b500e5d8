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
  SplitChildren<MpiShared> children;  // transports split from this one

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
