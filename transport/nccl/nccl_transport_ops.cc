// SPDX-License-Identifier: Apache-2.0
// The NCCL transport's collectives (contract in nccl_transport.h): the enqueue* functions that
// the device executor calls, and the Transport interface's blocking forms (enqueue, then wait
// on the stream). Unequal blocks use NCCL groups (see nccl_transport.cc for why).
#include <algorithm>

#include "kernels/cuda_kernels.h"
#include "transport/nccl/nccl_transport.h"

namespace kolo {
namespace {

bool ncclTypeOf(DataType t, ncclDataType_t* out) {
  switch (t) {
    case DataType::kUInt8:
      *out = ncclUint8;
      return true;
    case DataType::kInt8:
      *out = ncclInt8;
      return true;
    case DataType::kInt32:
      *out = ncclInt32;
      return true;
    case DataType::kInt64:
      *out = ncclInt64;
      return true;
    case DataType::kFloat16:
      *out = ncclFloat16;
      return true;
    case DataType::kBFloat16:
      *out = ncclBfloat16;
      return true;
    case DataType::kFloat32:
      *out = ncclFloat32;
      return true;
    case DataType::kFloat64:
      *out = ncclFloat64;
      return true;
    default:
      return false;
  }
}

bool ncclOpOf(ReduceOp op, ncclRedOp_t* out) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:  // the caller postscales by 1/n, as on the host
      *out = ncclSum;
      return true;
    case ReduceOp::kMin:
      *out = ncclMin;
      return true;
    case ReduceOp::kMax:
      *out = ncclMax;
      return true;
    case ReduceOp::kProduct:
      *out = ncclProd;
      return true;
    default:
      return false;
  }
}

std::vector<size_t> offsetsOf(const std::vector<size_t>& sizes) {
  std::vector<size_t> off(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) off[i] = off[i - 1] + sizes[i - 1];
  return off;
}

bool allEqual(const std::vector<size_t>& v) {
  return std::all_of(v.begin(), v.end(), [&](size_t x) { return x == v.front(); });
}

}  // namespace

// ---- asynchronous collectives ------------------------------------------------------------------

Status NcclTransport::kernelReduce(const void* send, void* recv, size_t count, DataType dtype,
                                   ReduceOp op) {
  // Gather every rank's slice, then fold them (NCCL has no reduction for these types).
  const size_t bytes = count * sizeOf(dtype);
  void* slices = nullptr;
  Status s = scratch_.reserve(bytes * static_cast<size_t>(size_), &slices);
  if (!s.isOk()) return fail(s);
  KOLO_RETURN_IF_ERROR(settle(ncclAllGather(send, slices, bytes, ncclUint8, comm_, stream_),
                              "ncclAllGather", deadlineFromNow()));
  s = cuda::check(cuda::reduceSlices(recv, slices, count, size_, count, dtype, op, stream_),
                  "reduceSlices kernel", device_);
  return s.isOk() ? s : fail(s);
}

Status NcclTransport::enqueueAllreduce(const void* send, void* recv, size_t count, DataType dtype,
                                       ReduceOp op) {
  KOLO_RETURN_IF_ERROR(usable());
  if (count == 0) return Status::ok();
  cuda::DeviceGuard g(device_);
  KOLO_RETURN_IF_ERROR(g.status());
  ncclRedOp_t nop;
  KOLO_REQUIRE(ncclOpOf(op, &nop), kUnsupported,
               std::string("the NCCL transport cannot reduce with ") + toString(op));
  if (cuda::needsKernelReduction(dtype)) return kernelReduce(send, recv, count, dtype, op);
  ncclDataType_t t;
  KOLO_REQUIRE(ncclTypeOf(dtype, &t), kUnsupported,
               std::string("the NCCL transport has no type for ") + toString(dtype));
  return settle(ncclAllReduce(send, recv, count, t, nop, comm_, stream_), "ncclAllReduce",
                deadlineFromNow());
}

Status NcclTransport::enqueueAllgatherv(const void* send, size_t sendBytes, void* recv,
                                        const std::vector<size_t>& recvBytes) {
  KOLO_RETURN_IF_ERROR(usable());
  KOLO_REQUIRE(static_cast<int>(recvBytes.size()) == size_ && recvBytes[rank_] == sendBytes,
               kInvalidArgument,
               "allgatherv: recvBytes must have one entry per rank and its "
               "own entry must equal sendBytes");
  cuda::DeviceGuard g(device_);
  KOLO_RETURN_IF_ERROR(g.status());
  char* out = static_cast<char*>(recv);
  if (allEqual(recvBytes)) {
    if (recvBytes[0] == 0) return Status::ok();
    return settle(ncclAllGather(send, out, recvBytes[0], ncclUint8, comm_, stream_),
                  "ncclAllGather", deadlineFromNow());
  }
  const std::vector<size_t> off = offsetsOf(recvBytes);
  ncclResult_t first = ncclGroupStart();
  if (first != ncclSuccess) return fail(ncclError(first, "ncclGroupStart"));
  for (int r = 0; r < size_; ++r) {
    if (recvBytes[r] == 0) continue;
    const void* src = r == rank_ ? send : out + off[r];
    ncclResult_t x = ncclBroadcast(src, out + off[r], recvBytes[r], ncclUint8, r, comm_, stream_);
    if (first == ncclSuccess && x != ncclSuccess && x != ncclInProgress) first = x;
  }
  ncclResult_t end = ncclGroupEnd();
  return settle(first != ncclSuccess ? first : end, "grouped ncclBroadcast (allgatherv)",
                deadlineFromNow());
}

Status NcclTransport::enqueueBroadcast(void* data, size_t bytes, int root) {
  KOLO_RETURN_IF_ERROR(usable());
  KOLO_REQUIRE(
      root >= 0 && root < size_, kInvalidArgument,
      "broadcast root " + std::to_string(root) + " outside [0, " + std::to_string(size_) + ")");
  if (bytes == 0) return Status::ok();
  cuda::DeviceGuard g(device_);
  KOLO_RETURN_IF_ERROR(g.status());
  return settle(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast",
                deadlineFromNow());
}

Status NcclTransport::enqueueAlltoallv(const void* send, const std::vector<size_t>& sendBytes,
                                       void* recv, const std::vector<size_t>& recvBytes) {
  KOLO_RETURN_IF_ERROR(usable());
  KOLO_REQUIRE(static_cast<int>(sendBytes.size()) == size_ &&
                   static_cast<int>(recvBytes.size()) == size_ &&
                   sendBytes[rank_] == recvBytes[rank_],
               kInvalidArgument, "alltoallv: one byte count per rank, own block equal");
  cuda::DeviceGuard g(device_);
  KOLO_RETURN_IF_ERROR(g.status());
  const std::vector<size_t> so = offsetsOf(sendBytes), ro = offsetsOf(recvBytes);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (recvBytes[rank_] > 0) {
    Status s = cuda::check(cudaMemcpyAsync(out + ro[rank_], in + so[rank_], recvBytes[rank_],
                                           cudaMemcpyDeviceToDevice, stream_),
                           "cudaMemcpyAsync (alltoall own block)", device_);
    if (!s.isOk()) return fail(s);
  }
  ncclResult_t first = ncclGroupStart();
  if (first != ncclSuccess) return fail(ncclError(first, "ncclGroupStart"));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    ncclResult_t x = ncclSuccess;
    if (sendBytes[r] > 0) x = ncclSend(in + so[r], sendBytes[r], ncclUint8, r, comm_, stream_);
    if (first == ncclSuccess && x != ncclSuccess && x != ncclInProgress) first = x;
    x = ncclSuccess;
    if (recvBytes[r] > 0) x = ncclRecv(out + ro[r], recvBytes[r], ncclUint8, r, comm_, stream_);
    if (first == ncclSuccess && x != ncclSuccess && x != ncclInProgress) first = x;
  }
  ncclResult_t end = ncclGroupEnd();
  return settle(first != ncclSuccess ? first : end, "grouped ncclSend/ncclRecv (alltoallv)",
                deadlineFromNow());
}

Status NcclTransport::enqueueReducescatter(const void* send, void* recv,
                                           const std::vector<size_t>& recvCounts, DataType dtype,
                                           ReduceOp op) {
  KOLO_RETURN_IF_ERROR(usable());
  KOLO_REQUIRE(static_cast<int>(recvCounts.size()) == size_, kInvalidArgument,
               "reducescatter: one count per rank");
  cuda::DeviceGuard g(device_);
  KOLO_RETURN_IF_ERROR(g.status());
  ncclRedOp_t nop;
  KOLO_REQUIRE(ncclOpOf(op, &nop), kUnsupported,
               std::string("the NCCL transport cannot reduce with ") + toString(op));
  const size_t elem = sizeOf(dtype);
  const std::vector<size_t> off = offsetsOf(recvCounts);
  const char* in = static_cast<const char*>(send);
  if (cuda::needsKernelReduction(dtype)) {
    size_t total = off.back() + recvCounts.back();
    if (total == 0) return Status::ok();
    void* slices = nullptr;
    Status s = scratch_.reserve(total * elem * static_cast<size_t>(size_), &slices);
    if (!s.isOk()) return fail(s);
    KOLO_RETURN_IF_ERROR(
        settle(ncclAllGather(send, slices, total * elem, ncclUint8, comm_, stream_),
               "ncclAllGather", deadlineFromNow()));
    s = cuda::check(cuda::reduceSlices(recv, static_cast<char*>(slices) + off[rank_] * elem,
                                       recvCounts[rank_], size_, total, dtype, op, stream_),
                    "reduceSlices kernel", device_);
    return s.isOk() ? s : fail(s);
  }
  ncclDataType_t t;
  KOLO_REQUIRE(ncclTypeOf(dtype, &t), kUnsupported,
               std::string("the NCCL transport has no type for ") + toString(dtype));
  if (allEqual(recvCounts)) {
    if (recvCounts[0] == 0) return Status::ok();
    return settle(ncclReduceScatter(send, recv, recvCounts[0], t, nop, comm_, stream_),
                  "ncclReduceScatter", deadlineFromNow());
  }
  ncclResult_t first = ncclGroupStart();
  if (first != ncclSuccess) return fail(ncclError(first, "ncclGroupStart"));
  for (int r = 0; r < size_; ++r) {
    if (recvCounts[r] == 0) continue;
    ncclResult_t x = ncclReduce(in + off[r] * elem, recv, recvCounts[r], t, nop, r, comm_, stream_);
    if (first == ncclSuccess && x != ncclSuccess && x != ncclInProgress) first = x;
  }
  ncclResult_t end = ncclGroupEnd();
  return settle(first != ncclSuccess ? first : end, "grouped ncclReduce (reducescatter)",
                deadlineFromNow());
}

// ---- the Transport interface: enqueue, then wait ---------------------------------------------

Status NcclTransport::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  KOLO_RETURN_IF_ERROR(enqueueAllreduce(data, data, count, dtype, op));
  return synchronize(deadlineFromNow());
}

Status NcclTransport::allgatherv(const void* send, size_t sendBytes, void* recv,
                                 const std::vector<size_t>& recvBytes) {
  KOLO_RETURN_IF_ERROR(enqueueAllgatherv(send, sendBytes, recv, recvBytes));
  return synchronize(deadlineFromNow());
}

Status NcclTransport::broadcast(void* data, size_t bytes, int root) {
  KOLO_RETURN_IF_ERROR(enqueueBroadcast(data, bytes, root));
  return synchronize(deadlineFromNow());
}

Status NcclTransport::alltoallv(const void* send, const std::vector<size_t>& sendBytes, void* recv,
                                const std::vector<size_t>& recvBytes) {
  KOLO_RETURN_IF_ERROR(enqueueAlltoallv(send, sendBytes, recv, recvBytes));
  return synchronize(deadlineFromNow());
}

Status NcclTransport::reducescatter(const void* send, void* recv,
                                    const std::vector<size_t>& recvCounts, DataType dtype,
                                    ReduceOp op) {
  KOLO_RETURN_IF_ERROR(enqueueReducescatter(send, recv, recvCounts, dtype, op));
  return synchronize(deadlineFromNow());
}

}  // namespace kolo
