// The device data paths of NcclExecutor (design in nccl_executor_impl.h). They mirror
// ops/execute.cc step for step, so a tensor gives the same result on either path:
//  - allreduce: a single tensor runs in its output buffer (input copied there first when out of
//    place); a fused batch goes through the device fusion buffer, each tensor's slot starting
//    on a 16-byte boundary so the batched copy kernel moves 16-byte words. prescale before,
//    postscale (times 1/n for AVERAGE) after; a joined rank's slots are zeros.
//  - hierarchical allreduce on L local ranks: the buffer is padded to a multiple of L; NCCL
//    reduce-scatter in place leaves this rank's reduced shard at offset localIndex * shard;
//    with several hosts the shard goes to pinned host memory, is allreduced over the cross CPU
//    transport (ring or native, as configured), and comes back; NCCL allgather in place fills
//    the other shards. Bytes on NCCL: 2 (L-1)/L of the buffer, across hosts 2 (H-1)/H of a
//    shard -- 1/L of what a flat allreduce would send between hosts.
//  - allgather / alltoall: outputs are allocated through the entry's allocator (it must return
//    device memory) or owned by the handle (cudaMalloc, freed with the handle).
//  - reducescatter: the input is read-only, so a staged copy is prescaled and reduced.
// Every path ends in finish(): one completion event for the batch, handed to each handle and
// waited for before returning (or, with asynchronous completion, watched by poll()).
#include <numeric>

#include "ops/handle.h"
#include "ops/collectives.h"
#include "ops/device_plan.h"
#include "kernels/reduce_cpu.h"
#include "kernels/cuda_kernels.h"
#include "ops/device/nccl_executor_impl.h"

namespace kolo {
namespace {

constexpr size_t kSlotAlignBytes = 16;

size_t rowBytes(const Response& r) {
  size_t row = sizeOf(r.dtype);
  for (size_t i = 1; i < r.shape.size(); ++i) row *= static_cast<size_t>(r.shape[i]);
  return row;
}

void* outputOf(const TensorEntry& e) {
  return e.output.data != nullptr ? e.output.data : e.input.data;
}

}  // namespace

Status NcclExecutor::runAllreduce(const ops::ExecContext& ctx, SetState& st, const Batch& rs,
                                  const Entries& es) {
  const Response& first = *rs[0];
  const DataType dtype = first.dtype;
  const size_t elem = sizeOf(dtype);
  const int n = static_cast<int>(ctx.set->ranks.size());
  const double post = ops::averagedPostscale(first.postscale, first.reduceOp, n);
  const bool hier = st.hierarchical && !cuda::needsKernelReduction(dtype);
  NcclTransport& t = hier ? *st.local : *st.all;
  const cudaStream_t stream = t.stream();

  std::vector<size_t> counts(rs.size()), slots;
  for (size_t i = 0; i < rs.size(); ++i) counts[i] = elementsOf(rs[i]->shape);
  const size_t total = ops::alignedSlots(counts, elem, kSlotAlignBytes, &slots);
  const size_t padded = hier ? ops::paddedCount(total, t.size()) : total;
  const bool direct = rs.size() == 1 && es[0] != nullptr && padded == total;

  KOLO_RETURN_IF_ERROR(waitReady(t, es));
  char* buf = nullptr;
  if (direct) {
    const TensorEntry& e = *es[0];
    buf = static_cast<char*>(outputOf(e));
    KOLO_RETURN_IF_ERROR(copies(t, {{e.input.data, buf, total * elem}}));
  } else {
    void* p = nullptr;
    Status s = fusionBuffer(padded * elem, &p);
    if (!s.isOk()) return s;
    buf = static_cast<char*>(p);
    std::vector<cuda::CopyDesc> in;
    for (size_t i = 0; i < rs.size(); ++i) {
      char* slot = buf + slots[i] * elem;
      if (es[i] != nullptr) {
        in.push_back({es[i]->input.data, slot, counts[i] * elem});
      } else if (counts[i] > 0) {  // a joined rank contributes zeros
        s = cuda::check(cudaMemsetAsync(slot, 0, counts[i] * elem, stream), "cudaMemsetAsync",
                        t.device());
        if (!s.isOk()) {
          t.abort(s);
          return s;
        }
      }
    }
    KOLO_RETURN_IF_ERROR(copies(t, in));
  }
  KOLO_RETURN_IF_ERROR(scale(t, buf, total, dtype, first.prescale));
  if (hier) {
    KOLO_RETURN_IF_ERROR(runHierarchical(ctx, st, buf, padded, dtype, first.reduceOp));
  } else {
    KOLO_RETURN_IF_ERROR(t.enqueueAllreduce(buf, buf, total, dtype, first.reduceOp));
  }
  KOLO_RETURN_IF_ERROR(scale(t, buf, total, dtype, post));
  if (!direct) {
    std::vector<cuda::CopyDesc> out;
    for (size_t i = 0; i < rs.size(); ++i) {
      if (es[i] != nullptr)
        out.push_back({buf + slots[i] * elem, outputOf(*es[i]), counts[i] * elem});
    }
    KOLO_RETURN_IF_ERROR(copies(t, out));
  }
  return finish(t, es);
}

Status NcclExecutor::runHierarchical(const ops::ExecContext& ctx, SetState& st, char* buf,
                                     size_t padded, DataType dtype, ReduceOp op) {
  NcclTransport& local = *st.local;
  const size_t elem = sizeOf(dtype);
  const int parts = local.size();
  const size_t shard = padded / static_cast<size_t>(parts);
  char* mine = buf + static_cast<size_t>(local.rank()) * shard * elem;
  KOLO_RETURN_IF_ERROR(local.enqueueReducescatter(
      buf, mine, std::vector<size_t>(static_cast<size_t>(parts), shard), dtype, op));
  if (st.cross != nullptr && st.cross->size() > 1 && shard > 0) {
    void* host = nullptr;
    KOLO_RETURN_IF_ERROR(stagingBuffer(shard * elem, &host));
    Status s = cuda::check(
        cudaMemcpyAsync(host, mine, shard * elem, cudaMemcpyDeviceToHost, local.stream()),
        "cudaMemcpyAsync (shard to host)", local.device());
    if (!s.isOk()) {
      local.abort(s);
      return s;
    }
    KOLO_RETURN_IF_ERROR(local.synchronize(local.deadlineFromNow()));
    // The CPU transports add for AVERAGE too; the postscale divides.
    const ReduceOp hostOp = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
    KOLO_RETURN_IF_ERROR(ops::allreduce(*st.cross, *ctx.algorithms, host, shard, dtype, hostOp));
    s = cuda::check(
        cudaMemcpyAsync(mine, host, shard * elem, cudaMemcpyHostToDevice, local.stream()),
        "cudaMemcpyAsync (shard to device)", local.device());
    if (!s.isOk()) {
      local.abort(s);
      return s;
    }
  }
  return local.enqueueAllgatherv(mine, shard * elem, buf,
                                 std::vector<size_t>(static_cast<size_t>(parts), shard * elem));
}

Status NcclExecutor::runAllgather(const ops::ExecContext& ctx, SetState& st, const Batch& rs,
                                  const Entries& es) {
  NcclTransport& t = *st.all;
  const int n = static_cast<int>(ctx.set->ranks.size());
  const int me = ctx.set->myIndex;
  // Rank k's block holds every tensor's rows from k, tensor after tensor (as on the host).
  std::vector<size_t> blockBytes(static_cast<size_t>(n), 0);
  for (const Response* r : rs) {
    for (int k = 0; k < n; ++k) blockBytes[k] += static_cast<size_t>(r->rankDim0[k]) * rowBytes(*r);
  }
  std::vector<void*> outputs(rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    std::vector<int64_t> shape = rs[i]->shape;
    if (shape.empty()) shape.push_back(1);
    shape[0] = std::accumulate(rs[i]->rankDim0.begin(), rs[i]->rankDim0.end(), int64_t{0});
    KOLO_RETURN_IF_ERROR(allocateOutput(
        *es[i], t.device(), shape, static_cast<size_t>(shape[0]) * rowBytes(*rs[i]), &outputs[i]));
  }
  KOLO_RETURN_IF_ERROR(waitReady(t, es));
  if (rs.size() == 1) {
    KOLO_RETURN_IF_ERROR(
        t.enqueueAllgatherv(es[0]->input.data, blockBytes[me], outputs[0], blockBytes));
    return finish(t, es);
  }
  const size_t total = std::accumulate(blockBytes.begin(), blockBytes.end(), size_t{0});
  void* p = nullptr;
  KOLO_RETURN_IF_ERROR(fusionBuffer(total, &p));
  char* buf = static_cast<char*>(p);
  std::vector<size_t> blockOffset(static_cast<size_t>(n), 0);
  for (int k = 1; k < n; ++k) blockOffset[k] = blockOffset[k - 1] + blockBytes[k - 1];
  std::vector<cuda::CopyDesc> in;
  size_t off = blockOffset[me];
  for (size_t i = 0; i < rs.size(); ++i) {
    const size_t bytes = static_cast<size_t>(rs[i]->rankDim0[me]) * rowBytes(*rs[i]);
    in.push_back({es[i]->input.data, buf + off, bytes});
    off += bytes;
  }
  KOLO_RETURN_IF_ERROR(copies(t, in));
  KOLO_RETURN_IF_ERROR(t.enqueueAllgatherv(buf + blockOffset[me], blockBytes[me], buf, blockBytes));
  std::vector<cuda::CopyDesc> out;
  std::vector<size_t> cursor = blockOffset;
  for (size_t i = 0; i < rs.size(); ++i) {
    char* dst = static_cast<char*>(outputs[i]);
    for (int k = 0; k < n; ++k) {
      const size_t bytes = static_cast<size_t>(rs[i]->rankDim0[k]) * rowBytes(*rs[i]);
      out.push_back({buf + cursor[k], dst, bytes});
      dst += bytes;
      cursor[k] += bytes;
    }
  }
  KOLO_RETURN_IF_ERROR(copies(t, out));
  return finish(t, es);
}

Status NcclExecutor::runBroadcast(SetState& st, const Response& r, TensorEntry& e) {
  NcclTransport& t = *st.all;
  KOLO_RETURN_IF_ERROR(waitReady(t, {&e}));
  KOLO_RETURN_IF_ERROR(t.enqueueBroadcast(e.input.data, e.input.byteSize(), r.root));
  return finish(t, {&e});
}

Status NcclExecutor::runAlltoall(const ops::ExecContext& ctx, SetState& st, const Response& r,
                                 TensorEntry& e) {
  NcclTransport& t = *st.all;
  const int n = static_cast<int>(ctx.set->ranks.size());
  const int me = ctx.set->myIndex;
  const size_t row = rowBytes(r);
  std::vector<size_t> sendBytes(static_cast<size_t>(n)), recvBytes(static_cast<size_t>(n));
  std::vector<int32_t> received(static_cast<size_t>(n));
  int64_t rows = 0;
  for (int k = 0; k < n; ++k) {
    sendBytes[k] = static_cast<size_t>(r.splitMatrix[me * n + k]) * row;
    received[k] = static_cast<int32_t>(r.splitMatrix[k * n + me]);
    recvBytes[k] = static_cast<size_t>(received[k]) * row;
    rows += received[k];
  }
  std::vector<int64_t> shape = e.request.shape;
  shape[0] = rows;
  void* out = nullptr;
  KOLO_RETURN_IF_ERROR(allocateOutput(e, t.device(), shape, static_cast<size_t>(rows) * row, &out));
  e.handle->receivedSplits = received;
  KOLO_RETURN_IF_ERROR(waitReady(t, {&e}));
  KOLO_RETURN_IF_ERROR(t.enqueueAlltoallv(e.input.data, sendBytes, out, recvBytes));
  return finish(t, {&e});
}

Status NcclExecutor::runReducescatter(const ops::ExecContext& ctx, SetState& st, const Response& r,
                                      TensorEntry& e) {
  NcclTransport& t = *st.all;
  const int n = static_cast<int>(ctx.set->ranks.size());
  const int me = ctx.set->myIndex;
  const size_t elem = sizeOf(r.dtype);
  const size_t rowElems = rowBytes(r) / elem;
  const size_t dim0 = r.shape.empty() ? 1 : static_cast<size_t>(r.shape[0]);
  const std::vector<size_t> rows = ops::evenSplit(dim0, n);
  std::vector<size_t> counts(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) counts[k] = rows[k] * rowElems;
  const size_t total = dim0 * rowElems;
  std::vector<int64_t> shape = r.shape.empty() ? std::vector<int64_t>{1} : r.shape;
  shape[0] = static_cast<int64_t>(rows[me]);
  void* out = nullptr;
  KOLO_RETURN_IF_ERROR(allocateOutput(e, t.device(), shape, counts[me] * elem, &out));
  void* staged = nullptr;
  KOLO_RETURN_IF_ERROR(fusionBuffer(total * elem, &staged));
  KOLO_RETURN_IF_ERROR(waitReady(t, {&e}));
  KOLO_RETURN_IF_ERROR(copies(t, {{e.input.data, staged, total * elem}}));
  KOLO_RETURN_IF_ERROR(scale(t, staged, total, r.dtype, r.prescale));
  KOLO_RETURN_IF_ERROR(t.enqueueReducescatter(staged, out, counts, r.dtype, r.reduceOp));
  const double post = ops::averagedPostscale(r.postscale, r.reduceOp, n);
  KOLO_RETURN_IF_ERROR(scale(t, out, counts[me], r.dtype, post));
  return finish(t, {&e});
}

}  // namespace kolo
