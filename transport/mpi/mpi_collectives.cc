// SPDX-License-Identifier: Apache-2.0
// The MPI transport's native collectives: the non-blocking MPI-3 calls (MPI_Iallreduce,
// MPI_Iallgatherv, MPI_Ibcast, MPI_Ialltoallv, MPI_Ireduce_scatter) followed by the same
// deadline-bounded polling as point-to-point batches, so a missing rank gives kTimeout instead
// of a hang.
//
// MPI counts and displacements are int. Allreduce and broadcast are cut into consecutive calls
// below that limit (every rank cuts identically). The v-collectives cannot be cut that way
// without changing their meaning, so they move bytes in the largest unit (a power of two up to
// 4 KiB) that divides every count and displacement; when even that does not fit they report
// kUnsupported, and ops/select's ring algorithms remain available.
#include <climits>
#include <numeric>

#include "transport/mpi/mpi_internal.h"

namespace kolo::mpi_detail {
namespace {

constexpr size_t kMaxUnit = 4096;
constexpr size_t kBroadcastChunkBytes = size_t{1} << 30;

// A derived byte type freed at scope exit (MPI lets a type be freed while operations that use
// it are pending).
class ByteUnit {
 public:
  ByteUnit() = default;
  ~ByteUnit() {
    if (owned_ && !mpiFinalized()) MPI_Type_free(&type_);
  }
  ByteUnit(const ByteUnit&) = delete;
  ByteUnit& operator=(const ByteUnit&) = delete;

  // Picks the unit for `values` (all byte counts and displacements) and converts them.
  Status choose(const std::vector<const std::vector<size_t>*>& values, const char* what) {
    size_t bits = 0;
    for (const auto* v : values) {
      for (size_t x : *v) bits |= x;
    }
    unit_ = kMaxUnit;
    while (unit_ > 1 && (bits & (unit_ - 1)) != 0) unit_ /= 2;
    for (const auto* v : values) {
      for (size_t x : *v) {
        if (x / unit_ > static_cast<size_t>(INT_MAX)) {
          return Status(ErrorCode::kUnsupported,
                        std::string("mpi: ") + what +
                            " counts exceed MPI's int limit; use the ring algorithm");
        }
      }
    }
    if (unit_ == 1) {
      type_ = MPI_BYTE;
      return Status::ok();
    }
    int rc = MPI_Type_contiguous(static_cast<int>(unit_), MPI_BYTE, &type_);
    if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Type_contiguous");
    rc = MPI_Type_commit(&type_);
    if (rc != MPI_SUCCESS) {
      MPI_Type_free(&type_);
      return mpiError(rc, "MPI_Type_commit");
    }
    owned_ = true;
    return Status::ok();
  }

  std::vector<int> convert(const std::vector<size_t>& v) const {
    std::vector<int> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<int>(v[i] / unit_);
    return out;
  }
  MPI_Datatype type() const { return type_; }

 private:
  size_t unit_ = 1;
  MPI_Datatype type_ = MPI_BYTE;
  bool owned_ = false;
};

std::vector<size_t> prefixOffsets(const std::vector<size_t>& sizes) {
  std::vector<size_t> off(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) off[i] = off[i - 1] + sizes[i - 1];
  return off;
}

}  // namespace

Status MpiTransport::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  KOLO_RETURN_IF_ERROR(checkUsable());
  MPI_Datatype type;
  MPI_Op mpiOp;
  KOLO_RETURN_IF_ERROR(state_->reductions->map(dtype, op, &type, &mpiOp));
  const size_t elem = sizeOf(dtype);
  auto* base = static_cast<uint8_t*>(data);
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(count - done, static_cast<size_t>(INT_MAX));
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, base + done * elem, static_cast<int>(n), type, mpiOp,
                            state_->comm, &req);
    if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Iallreduce");
    KOLO_RETURN_IF_ERROR(waitRequest(*state_, &req, "MPI_Iallreduce", deadlineFromNow()));
    done += n;
  }
  return Status::ok();
}

Status MpiTransport::allgatherv(const void* send, size_t sendBytes, void* recv,
                                const std::vector<size_t>& recvBytes) {
  KOLO_RETURN_IF_ERROR(checkUsable());
  KOLO_REQUIRE(recvBytes.size() == static_cast<size_t>(state_->size), kInvalidArgument,
               "mpi: allgatherv needs one byte count per rank");
  KOLO_REQUIRE(sendBytes == recvBytes[static_cast<size_t>(state_->rank)], kInvalidArgument,
               "mpi: allgatherv send size differs from this rank's receive count");
  const std::vector<size_t> displs = prefixOffsets(recvBytes);
  ByteUnit unit;
  KOLO_RETURN_IF_ERROR(unit.choose({&recvBytes, &displs}, "allgatherv"));
  const std::vector<int> counts = unit.convert(recvBytes);
  const std::vector<int> offsets = unit.convert(displs);
  auto* out = static_cast<uint8_t*>(recv);
  const void* in = send;
  // The contract lets `send` alias this rank's block of `recv`: that is MPI_IN_PLACE.
  if (send == out + displs[static_cast<size_t>(state_->rank)]) in = MPI_IN_PLACE;
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Iallgatherv(in, counts[static_cast<size_t>(state_->rank)], unit.type(), out,
                           counts.data(), offsets.data(), unit.type(), state_->comm, &req);
  if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Iallgatherv");
  return waitRequest(*state_, &req, "MPI_Iallgatherv", deadlineFromNow());
}

Status MpiTransport::broadcast(void* data, size_t bytes, int root) {
  KOLO_RETURN_IF_ERROR(checkUsable());
  KOLO_REQUIRE(root >= 0 && root < state_->size, kInvalidArgument,
               "mpi: broadcast root " + std::to_string(root) + " is outside the group");
  auto* base = static_cast<uint8_t*>(data);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bytes - done, kBroadcastChunkBytes);
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Ibcast(base + done, static_cast<int>(n), MPI_BYTE, root, state_->comm, &req);
    if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Ibcast");
    KOLO_RETURN_IF_ERROR(waitRequest(*state_, &req, "MPI_Ibcast", deadlineFromNow()));
    done += n;
  }
  return Status::ok();
}

Status MpiTransport::alltoallv(const void* send, const std::vector<size_t>& sendBytes, void* recv,
                               const std::vector<size_t>& recvBytes) {
  KOLO_RETURN_IF_ERROR(checkUsable());
  const size_t n = static_cast<size_t>(state_->size);
  KOLO_REQUIRE(sendBytes.size() == n && recvBytes.size() == n, kInvalidArgument,
               "mpi: alltoallv needs one send and one receive count per rank");
  const std::vector<size_t> sendOff = prefixOffsets(sendBytes);
  const std::vector<size_t> recvOff = prefixOffsets(recvBytes);
  ByteUnit unit;
  KOLO_RETURN_IF_ERROR(unit.choose({&sendBytes, &recvBytes, &sendOff, &recvOff}, "alltoallv"));
  const std::vector<int> sc = unit.convert(sendBytes), sd = unit.convert(sendOff);
  const std::vector<int> rc_ = unit.convert(recvBytes), rd = unit.convert(recvOff);
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Ialltoallv(send, sc.data(), sd.data(), unit.type(), recv, rc_.data(), rd.data(),
                          unit.type(), state_->comm, &req);
  if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Ialltoallv");
  return waitRequest(*state_, &req, "MPI_Ialltoallv", deadlineFromNow());
}

Status MpiTransport::reducescatter(const void* send, void* recv,
                                   const std::vector<size_t>& recvCounts, DataType dtype,
                                   ReduceOp op) {
  KOLO_RETURN_IF_ERROR(checkUsable());
  KOLO_REQUIRE(recvCounts.size() == static_cast<size_t>(state_->size), kInvalidArgument,
               "mpi: reducescatter needs one count per rank");
  MPI_Datatype type;
  MPI_Op mpiOp;
  KOLO_RETURN_IF_ERROR(state_->reductions->map(dtype, op, &type, &mpiOp));
  const size_t total = std::accumulate(recvCounts.begin(), recvCounts.end(), size_t{0});
  if (total > static_cast<size_t>(INT_MAX)) {
    return Status(ErrorCode::kUnsupported,
                  "mpi: reducescatter of more than INT_MAX elements; use the ring algorithm");
  }
  std::vector<int> counts(recvCounts.begin(), recvCounts.end());
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Ireduce_scatter(send, recv, counts.data(), type, mpiOp, state_->comm, &req);
  if (rc != MPI_SUCCESS) return mpiError(rc, "MPI_Ireduce_scatter");
  return waitRequest(*state_, &req, "MPI_Ireduce_scatter", deadlineFromNow());
}

}  // namespace kolo::mpi_detail
