// SPDX-License-Identifier: Apache-2.0
// The batch plan (contract in batch_plan.h). How each collective is laid out, and why:
//
//  - Allreduce. Tensor i has counts[i] elements; its slot starts at slots[i] (elements), right
//    after the previous slot, rounded up to the backend's alignment (host: packed, so Adasum
//    sees the tensors back to back; device: 16 bytes, so the copy kernel moves 16-byte words;
//    the gaps are reduced along with the rest and never read). `count` ends at the last slot;
//    `paddedCount` rounds it up to padParts (the hierarchical reduce-scatter needs equal
//    shards). A batch of one tensor that this rank submitted, with no padding, is not fused:
//    the collective runs in the tensor's output (the input is copied there first when the op
//    is out of place; a copy onto itself is skipped by both backends). Otherwise every tensor
//    is copied into its slot, and a joined rank (no entry) fills its slots with zeros: it
//    contributes nothing to a sum, and AVERAGE still divides by the whole set. Scaling happens
//    once on the buffer, so fused and unfused ops round identically: prescale before the
//    collective, postscale (times 1/n for AVERAGE) after it. Bytes moved by the copies: the
//    batch twice (in and out); by the collective: what its algorithm moves for count elements.
//  - Allgather. Every rank's contribution is one block: rank k's block holds, tensor after
//    tensor, tensor i's rankDim0[k] rows from k. One allgatherv of the blocks gathers
//    everything; then tensor i's output (dim 0 = the sum of rankDim0, allocated now) is the
//    concatenation of its rows from every block, in rank order. This rank copies its own rows
//    into its block (copyIn) and, after the collective, each (tensor, rank) piece out
//    (copyOut). A single tensor skips the buffer: its input is gathered straight into its
//    output, which already has that layout.
//  - Broadcast runs in the tensor itself (input.byteSize bytes from root).
//  - Alltoall: the split matrix row `me` says how many rows this rank sends each rank, column
//    `me` how many it receives; the output's dim 0 is their sum, the handle's receivedSplits
//    the column.
//  - Reducescatter: dim 0 split as evenly as possible (ops::evenSplit: the first rows % n
//    ranks get one row more); rank k receives rankCounts[k] elements. The caller's input is
//    read-only, so the whole tensor is staged in the fusion buffer, prescaled there and reduced
//    from there; the postscale applies to this rank's share in its output.
#include "ops/batch_plan.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "base/tensor.h"
#include "kernels/reduce_cpu.h"
#include "ops/collectives.h"
#include "ops/device_plan.h"

namespace kolo::ops {
namespace {

Status planAllreduce(const std::vector<const Response*>& rs, const std::vector<TensorEntry*>& es,
                     const PlanOptions& options, BatchPlan* p) {
  const size_t m = rs.size();
  p->counts.resize(m);
  for (size_t i = 0; i < m; ++i) p->counts[i] = elementsOf(rs[i]->shape);
  if (options.slotAlignBytes > 1) {
    p->count = alignedSlots(p->counts, p->elemSize, options.slotAlignBytes, &p->slots);
  } else {
    p->slots.assign(m, 0);
    for (size_t i = 1; i < m; ++i) p->slots[i] = p->slots[i - 1] + p->counts[i - 1];
    p->count = m == 0 ? 0 : p->slots[m - 1] + p->counts[m - 1];
  }
  p->paddedCount = paddedCount(p->count, std::max(1, options.padParts));
  p->collectiveBytes = p->count * p->elemSize;
  p->fused = !(m == 1 && es[0] != nullptr && p->paddedCount == p->count);
  p->bufferBytes = p->fused ? p->paddedCount * p->elemSize : 0;
  for (size_t i = 0; i < m; ++i) {
    const PlanCopy c{i, 0, p->slots[i] * p->elemSize, p->counts[i] * p->elemSize};
    if (es[i] == nullptr) {
      if (c.bytes > 0) p->zeroFill.push_back(c);
      continue;
    }
    p->copyIn.push_back(c);
    if (p->fused) p->copyOut.push_back(c);
  }
  return Status::ok();
}

Status planAllgather(const std::vector<const Response*>& rs, BatchPlan* p) {
  const int n = p->setSize;
  const size_t m = rs.size();
  for (const Response* r : rs) {
    KOLO_REQUIRE(r->rankDim0.size() == static_cast<size_t>(n), kInternal,
                 "allgather '" + r->name + "': " + std::to_string(r->rankDim0.size()) +
                     " first dimensions for a set of " + std::to_string(n));
  }
  p->blockBytes.assign(static_cast<size_t>(n), 0);
  for (const Response* r : rs) {
    for (int k = 0; k < n; ++k)
      p->blockBytes[k] += static_cast<size_t>(r->rankDim0[k]) * rowBytes(*r);
  }
  p->blockOffset.assign(static_cast<size_t>(n), 0);
  for (int k = 1; k < n; ++k) p->blockOffset[k] = p->blockOffset[k - 1] + p->blockBytes[k - 1];
  const size_t total = std::accumulate(p->blockBytes.begin(), p->blockBytes.end(), size_t{0});
  p->collectiveBytes = total;
  p->outputs.resize(m);
  for (size_t i = 0; i < m; ++i) {
    std::vector<int64_t> shape = rs[i]->shape;
    if (shape.empty()) shape.push_back(1);
    shape[0] = std::accumulate(rs[i]->rankDim0.begin(), rs[i]->rankDim0.end(), int64_t{0});
    p->outputs[i].bytes = static_cast<size_t>(shape[0]) * rowBytes(*rs[i]);
    p->outputs[i].shape = std::move(shape);
  }
  p->fused = m > 1;
  if (!p->fused) return Status::ok();
  p->bufferBytes = total;
  size_t off = p->blockOffset[p->me];
  for (size_t i = 0; i < m; ++i) {
    const size_t bytes = static_cast<size_t>(rs[i]->rankDim0[p->me]) * rowBytes(*rs[i]);
    p->copyIn.push_back({i, 0, off, bytes});
    off += bytes;
  }
  std::vector<size_t> cursor = p->blockOffset;  // read position inside each rank's block
  for (size_t i = 0; i < m; ++i) {
    size_t written = 0;
    for (int k = 0; k < n; ++k) {
      const size_t bytes = static_cast<size_t>(rs[i]->rankDim0[k]) * rowBytes(*rs[i]);
      p->copyOut.push_back({i, written, cursor[k], bytes});
      written += bytes;
      cursor[k] += bytes;
    }
  }
  return Status::ok();
}

Status planAlltoall(const Response& r, const TensorEntry& e, BatchPlan* p) {
  const int n = p->setSize;
  const int me = p->me;
  KOLO_REQUIRE(r.splitMatrix.size() == static_cast<size_t>(n) * static_cast<size_t>(n), kInternal,
               "alltoall '" + r.name + "': a split matrix of " +
                   std::to_string(r.splitMatrix.size()) + " entries for a set of " +
                   std::to_string(n));
  const size_t row = rowBytes(r);
  p->sendBytes.resize(static_cast<size_t>(n));
  p->recvBytes.resize(static_cast<size_t>(n));
  p->receivedSplits.resize(static_cast<size_t>(n));
  int64_t rows = 0;
  for (int k = 0; k < n; ++k) {
    p->sendBytes[k] = static_cast<size_t>(r.splitMatrix[me * n + k]) * row;
    p->receivedSplits[k] = static_cast<int32_t>(r.splitMatrix[k * n + me]);
    p->recvBytes[k] = static_cast<size_t>(p->receivedSplits[k]) * row;
    rows += p->receivedSplits[k];
  }
  p->collectiveBytes = std::accumulate(p->sendBytes.begin(), p->sendBytes.end(), size_t{0});
  PlannedOutput out;
  out.shape = e.request.shape;
  if (out.shape.empty()) out.shape.push_back(1);
  out.shape[0] = rows;
  out.bytes = static_cast<size_t>(rows) * row;
  p->outputs.push_back(std::move(out));
  return Status::ok();
}

void planReducescatter(const Response& r, BatchPlan* p) {
  const size_t rowElems = rowBytes(r) / p->elemSize;
  const size_t dim0 = r.shape.empty() ? 1 : static_cast<size_t>(r.shape[0]);
  const std::vector<size_t> rows = evenSplit(dim0, p->setSize);
  p->rankCounts.resize(static_cast<size_t>(p->setSize));
  for (int k = 0; k < p->setSize; ++k) p->rankCounts[k] = rows[k] * rowElems;
  p->count = p->paddedCount = dim0 * rowElems;
  p->collectiveBytes = p->count * p->elemSize;
  p->fused = true;
  p->bufferBytes = p->count * p->elemSize;
  p->copyIn.push_back({0, 0, 0, p->bufferBytes});
  PlannedOutput out;
  out.shape = r.shape.empty() ? std::vector<int64_t>{1} : r.shape;
  out.shape[0] = static_cast<int64_t>(rows[p->me]);
  out.bytes = p->rankCounts[p->me] * p->elemSize;
  p->outputs.push_back(std::move(out));
}

}  // namespace

size_t rowBytes(const Response& r) {
  size_t row = sizeOf(r.dtype);
  for (size_t i = 1; i < r.shape.size(); ++i) row *= static_cast<size_t>(r.shape[i]);
  return row;
}

void* outputOf(const TensorEntry& e) {
  return e.output.data != nullptr ? e.output.data : e.input.data;
}

Status planBatch(const std::vector<const Response*>& responses,
                 const std::vector<TensorEntry*>& entries, int setSize, int me,
                 const PlanOptions& options, BatchPlan* out) {
  KOLO_REQUIRE(!responses.empty() && responses.size() == entries.size(), kInternal,
               "planBatch: " + std::to_string(responses.size()) + " responses, " +
                   std::to_string(entries.size()) + " entries");
  KOLO_REQUIRE(
      setSize > 0 && me >= 0 && me < setSize, kInternal,
      "planBatch: member " + std::to_string(me) + " of a set of " + std::to_string(setSize));
  const Response& first = *responses[0];
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i] == nullptr && first.type != OpType::kAllreduce) {
      return Status(ErrorCode::kInternal, "no local op for '" + responses[i]->name + "'");
    }
  }
  BatchPlan p;
  p.type = first.type;
  p.dtype = first.dtype;
  p.op = first.reduceOp;
  p.elemSize = sizeOf(first.dtype);
  p.setSize = setSize;
  p.me = me;
  p.root = first.root;
  p.prescale = first.prescale;
  p.postscale = kernels::averagedPostscale(first.postscale, first.reduceOp, setSize);
  switch (first.type) {
    case OpType::kAllreduce:
      KOLO_RETURN_IF_ERROR(planAllreduce(responses, entries, options, &p));
      break;
    case OpType::kAllgather:
      KOLO_RETURN_IF_ERROR(planAllgather(responses, &p));
      break;
    case OpType::kBroadcast:
      p.collectiveBytes = entries[0]->input.byteSize();
      break;
    case OpType::kAlltoall:
      KOLO_RETURN_IF_ERROR(planAlltoall(first, *entries[0], &p));
      break;
    case OpType::kReducescatter:
      planReducescatter(first, &p);
      break;
    default:
      return Status(ErrorCode::kInternal,
                    std::string("execute: no data path for ") + toString(first.type));
  }
  *out = std::move(p);
  return Status::ok();
}

Status allocateOutputs(const BatchPlan& plan, const std::vector<TensorEntry*>& entries,
                       const OwnOutputFn& own, std::vector<void*>* outputs) {
  outputs->assign(entries.size(), nullptr);
  if (plan.outputs.empty()) {
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i] != nullptr) (*outputs)[i] = outputOf(*entries[i]);
    }
    return Status::ok();
  }
  for (size_t i = 0; i < plan.outputs.size() && i < entries.size(); ++i) {
    TensorEntry& e = *entries[i];
    HandleState& h = *e.handle;
    const PlannedOutput& o = plan.outputs[i];
    h.outputShape = o.shape;
    void* p = nullptr;
    if (e.allocate) {
      p = e.allocate(o.bytes, o.shape);
      if (p == nullptr && o.bytes > 0) {
        // The other ranks are already in this collective: take part with a scratch output the
        // handle owns, and fail this rank's op afterwards (returning here would skip the
        // collective and leave them waiting until the timeout).
        e.localError = Status(ErrorCode::kInvalidArgument,
                              std::string(toString(e.request.type)) + " '" + e.request.name +
                                  "' on rank " + std::to_string(e.request.rank) +
                                  ": the output allocator returned NULL for " +
                                  std::to_string(o.bytes) + " bytes");
        KOLO_RETURN_IF_ERROR(own(h, o.bytes, &p));
      }
    } else {
      KOLO_RETURN_IF_ERROR(own(h, o.bytes, &p));
    }
    h.outputData = p;
    (*outputs)[i] = p;
  }
  if (plan.type == OpType::kAlltoall) entries[0]->handle->receivedSplits = plan.receivedSplits;
  return Status::ok();
}

}  // namespace kolo::ops
