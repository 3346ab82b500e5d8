// SPDX-License-Identifier: Apache-2.0
// The device backend of the batch plan (design in nccl_executor_impl.h). ops/batch_plan.cc lays
// each batch out -- slots, copies, a joined rank's zero slots, outputs, scale factors, splits --
// exactly as for the host backend (ops/execute.cc), so a tensor gives the same result on either
// path; this file carries the plan out with CUDA kernels and NCCL on the communicator's stream:
//  - allreduce: slots start on 16-byte boundaries so the batched copy kernel moves 16-byte words
//    (PlanOptions::slotAlignBytes). A single tensor runs in its output buffer; a fused batch
//    goes through the device fusion buffer. prescale before, postscale (times 1/n for AVERAGE)
//    after; a joined rank's slots are zeroed with cudaMemsetAsync (min, max, product: the op's
//    identity copied in after the prescale).
//  - hierarchical allreduce on L local ranks: the plan pads the buffer to a multiple of L
//    (PlanOptions::padParts); NCCL reduce-scatter in place leaves this rank's reduced shard at
//    offset localIndex * shard; with several hosts the shard goes to pinned host memory, is
//    allreduced over the cross CPU transport (ring or native, as configured), and comes back;
//    NCCL allgather in place fills the other shards. Bytes on NCCL: 2 (L-1)/L of the buffer,
//    across hosts 2 (H-1)/H of a shard -- 1/L of what a flat allreduce would send between hosts.
//  - allgather / alltoall: outputs are allocated through the entry's allocator (it must return
//    device memory) or owned by the handle (cudaMalloc, freed with the handle).
//  - reducescatter: the input is read-only, so a staged copy is prescaled and reduced.
// Every path ends in finish(): one completion event for the batch, handed to each handle and
// waited for before returning (or, with asynchronous completion, watched by poll()).
#include <vector>

#include "kernels/cuda_kernels.h"
#include "kernels/reduce_cpu.h"
#include "ops/batch_plan.h"
#include "ops/collectives.h"
#include "ops/device/nccl_executor_impl.h"
#include "ops/device_plan.h"
#include "ops/handle.h"

namespace kolo {
namespace {

constexpr size_t kSlotAlignBytes = 16;

// The plan's copies as copy-kernel descriptors: inputs into the working buffer, and the working
// buffer out to the outputs.
std::vector<cuda::CopyDesc> copiesIn(const ops::BatchPlan& p, const std::vector<TensorEntry*>& es,
                                     char* buf) {
  std::vector<cuda::CopyDesc> d;
  for (const ops::PlanCopy& c : p.copyIn) {
    d.push_back({static_cast<const char*>(es[c.tensor]->input.data) + c.tensorOffset,
                 buf + c.bufferOffset, c.bytes});
  }
  return d;
}

std::vector<cuda::CopyDesc> copiesOut(const ops::BatchPlan& p, const std::vector<void*>& outputs,
                                      char* buf) {
  std::vector<cuda::CopyDesc> d;
  for (const ops::PlanCopy& c : p.copyOut) {
    d.push_back(
        {buf + c.bufferOffset, static_cast<char*>(outputs[c.tensor]) + c.tensorOffset, c.bytes});
  }
  return d;
}

// For min, max and product a joined rank's slots get the op's identity over the zeros, after
// the prescale, as the host backend does (ops/execute.cc). From pageable host memory: the copy
// has read the pattern when cudaMemcpyAsync returns, and joins are rare enough not to need
// pinned memory.
Status fillJoinedSlots(NcclTransport& t, const ops::BatchPlan& p, char* buf) {
  if (kernels::zeroIsIdentity(p.op)) return Status::ok();
  for (const ops::PlanCopy& z : p.zeroFill) {
    std::vector<unsigned char> identity(z.bytes);
    kernels::fillIdentity(identity.data(), z.bytes / p.elemSize, p.dtype, p.op);
    Status s = cuda::check(cudaMemcpyAsync(buf + z.bufferOffset, identity.data(), z.bytes,
                                           cudaMemcpyHostToDevice, t.stream()),
                           "cudaMemcpyAsync", t.device());
    if (!s.isOk()) {
      t.abort(s);
      return s;
    }
  }
  return Status::ok();
}

}  // namespace

Status NcclExecutor::plan(const ops::ExecContext& ctx, const Batch& rs, const Entries& es,
                          const ops::PlanOptions& options, ops::BatchPlan* out) {
  return ops::planBatch(rs, es, static_cast<int>(ctx.set->ranks.size()), ctx.set->myIndex, options,
                        out);
}

Status NcclExecutor::runAllreduce(const ops::ExecContext& ctx, SetState& st, const Batch& rs,
                                  const Entries& es) {
  const Response& first = *rs[0];
  const bool hier = st.hierarchical && !cuda::needsKernelReduction(first.dtype);
  NcclTransport& t = hier ? *st.local : *st.all;
  ops::PlanOptions options;
  options.slotAlignBytes = kSlotAlignBytes;
  options.padParts = hier ? t.size() : 1;
  ops::BatchPlan p;
  KOLO_RETURN_IF_ERROR(plan(ctx, rs, es, options, &p));
  std::vector<void*> outputs;
  KOLO_RETURN_IF_ERROR(ops::allocateOutputs(p, es, nullptr, &outputs));

  KOLO_RETURN_IF_ERROR(waitReady(t, es));
  char* buf = static_cast<char*>(outputs[0]);
  if (p.fused) {
    void* mem = nullptr;
    KOLO_RETURN_IF_ERROR(fusionBuffer(p.bufferBytes, &mem));
    buf = static_cast<char*>(mem);
    for (const ops::PlanCopy& z : p.zeroFill) {  // a joined rank contributes zeros
      Status s = cuda::check(cudaMemsetAsync(buf + z.bufferOffset, 0, z.bytes, t.stream()),
                             "cudaMemsetAsync", t.device());
      if (!s.isOk()) {
        t.abort(s);
        return s;
      }
    }
  }
  KOLO_RETURN_IF_ERROR(copies(t, copiesIn(p, es, buf)));
  KOLO_RETURN_IF_ERROR(scale(t, buf, p.count, p.dtype, p.prescale));
  KOLO_RETURN_IF_ERROR(fillJoinedSlots(t, p, buf));
  if (hier) {
    KOLO_RETURN_IF_ERROR(runHierarchical(ctx, st, buf, p.paddedCount, p.dtype, p.op));
  } else {
    KOLO_RETURN_IF_ERROR(t.enqueueAllreduce(buf, buf, p.count, p.dtype, p.op));
  }
  KOLO_RETURN_IF_ERROR(scale(t, buf, p.count, p.dtype, p.postscale));
  if (p.fused) KOLO_RETURN_IF_ERROR(copies(t, copiesOut(p, outputs, buf)));
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
  ops::BatchPlan p;
  KOLO_RETURN_IF_ERROR(plan(ctx, rs, es, {}, &p));
  std::vector<void*> outputs;
  KOLO_RETURN_IF_ERROR(allocateDeviceOutputs(p, es, t.device(), &outputs));
  KOLO_RETURN_IF_ERROR(waitReady(t, es));
  if (!p.fused) {
    KOLO_RETURN_IF_ERROR(
        t.enqueueAllgatherv(es[0]->input.data, p.blockBytes[p.me], outputs[0], p.blockBytes));
    return finish(t, es);
  }
  void* mem = nullptr;
  KOLO_RETURN_IF_ERROR(fusionBuffer(p.bufferBytes, &mem));
  char* buf = static_cast<char*>(mem);
  KOLO_RETURN_IF_ERROR(copies(t, copiesIn(p, es, buf)));
  KOLO_RETURN_IF_ERROR(
      t.enqueueAllgatherv(buf + p.blockOffset[p.me], p.blockBytes[p.me], buf, p.blockBytes));
  KOLO_RETURN_IF_ERROR(copies(t, copiesOut(p, outputs, buf)));
  return finish(t, es);
}

Status NcclExecutor::runBroadcast(const ops::ExecContext& ctx, SetState& st, const Batch& rs,
                                  TensorEntry& e) {
  NcclTransport& t = *st.all;
  ops::BatchPlan p;
  KOLO_RETURN_IF_ERROR(plan(ctx, Batch{rs[0]}, {&e}, {}, &p));  // one tensor
  KOLO_RETURN_IF_ERROR(waitReady(t, {&e}));
  KOLO_RETURN_IF_ERROR(t.enqueueBroadcast(e.input.data, p.collectiveBytes, p.root));
  return finish(t, {&e});
}

Status NcclExecutor::runAlltoall(const ops::ExecContext& ctx, SetState& st, const Batch& rs,
                                 TensorEntry& e) {
  NcclTransport& t = *st.all;
  ops::BatchPlan p;
  KOLO_RETURN_IF_ERROR(plan(ctx, Batch{rs[0]}, {&e}, {}, &p));  // one tensor
  std::vector<void*> outputs;
  KOLO_RETURN_IF_ERROR(allocateDeviceOutputs(p, {&e}, t.device(), &outputs));
  KOLO_RETURN_IF_ERROR(waitReady(t, {&e}));
  KOLO_RETURN_IF_ERROR(t.enqueueAlltoallv(e.input.data, p.sendBytes, outputs[0], p.recvBytes));
  return finish(t, {&e});
}

Status NcclExecutor::runReducescatter(const ops::ExecContext& ctx, SetState& st, const Batch& rs,
                                      TensorEntry& e) {
  NcclTransport& t = *st.all;
  ops::BatchPlan p;
  KOLO_RETURN_IF_ERROR(plan(ctx, Batch{rs[0]}, {&e}, {}, &p));  // one tensor
  std::vector<void*> outputs;
  KOLO_RETURN_IF_ERROR(allocateDeviceOutputs(p, {&e}, t.device(), &outputs));
  void* staged = nullptr;
  KOLO_RETURN_IF_ERROR(fusionBuffer(p.bufferBytes, &staged));
  KOLO_RETURN_IF_ERROR(waitReady(t, {&e}));
  KOLO_RETURN_IF_ERROR(copies(t, copiesIn(p, {&e}, static_cast<char*>(staged))));
  KOLO_RETURN_IF_ERROR(scale(t, staged, p.count, p.dtype, p.prescale));
  KOLO_RETURN_IF_ERROR(t.enqueueReducescatter(staged, outputs[0], p.rankCounts, p.dtype, p.op));
  KOLO_RETURN_IF_ERROR(scale(t, outputs[0], p.rankCounts[p.me], p.dtype, p.postscale));
  return finish(t, {&e});
}

}  // namespace kolo
