// SPDX-License-Identifier: Apache-2.0
// BatchPlan: what one batch does on this rank, worked out once from the agreed responses and this
// rank's entries before a byte moves -- the fusion-buffer slots and the copies into and out of
// them, the zero slots of a joined rank, the output shapes and sizes, the scale factors, the
// allgather blocks, the alltoall splits, the reducescatter shares. Two backends carry a plan out:
// the host one (ops/execute.cc: memcpy and the set's Transport) and the device one
// (ops/device/nccl_collectives.cc: CUDA kernels and NCCL). Neither computes a layout of its own,
// so a tensor gives the same result on either path. The arithmetic is explained in
// batch_plan.cc.
//
// Ownership: a plan is a plain value; it holds no pointer to memory (tensors are named by their
// index in the batch, the buffer by offsets). allocateOutputs writes into the entries' handles.
// Thread safety: pure functions (allocateOutputs runs the entries' allocators, which the engine
// calls on the coordinator thread only). Blocking: none. Errors: planBatch returns kInternal for
// a batch that cannot come out of the negotiation (a missing local op outside an allreduce,
// malformed allgather/alltoall metadata); allocateOutputs returns kInvalidArgument naming the op
// when an allocator returns null, or what the backend's `own` returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "base/types.h"
#include "ops/entry.h"
#include "ops/message.h"

namespace kolo::ops {

// One copy between a tensor of the batch and the working buffer, in bytes.
struct PlanCopy {
  size_t tensor = 0;        // index in the batch
  size_t tensorOffset = 0;  // into the tensor's input (copy in) or output (copy out)
  size_t bufferOffset = 0;  // into the working buffer
  size_t bytes = 0;
};

// An output whose size is known only now (allgather, alltoall, reducescatter).
struct PlannedOutput {
  std::vector<int64_t> shape;
  size_t bytes = 0;
};

// What a backend asks of the layout (allreduce only; the host backend takes the defaults).
struct PlanOptions {
  // Each fused tensor's slot starts at a multiple of this many bytes (rounded to whole elements;
  // 0 or 1: packed back to back). The device aligns to 16 so its copy kernel moves 16-byte words.
  size_t slotAlignBytes = 0;
  // The reduced element count is rounded up to a multiple of this (the equal shards of the
  // device's hierarchical reduce-scatter). A padded batch is always fused.
  int padParts = 1;
};

struct BatchPlan {
  OpType type = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t elemSize = 0;
  int setSize = 0;  // members of the process set
  int me = 0;       // this rank's index in the set
  int root = 0;     // broadcast
  // Scale factors. prescale multiplies the working buffer before the collective; postscale
  // (already times 1/setSize for AVERAGE, joined ranks included) the result after it.
  double prescale = 1.0;
  double postscale = 1.0;

  // The working buffer the collective runs in: the fusion buffer (bufferBytes of it) when
  // `fused`, else tensor 0's own output (allreduce: its output, or its input when in place;
  // allgather: its allocated output). Reducescatter is always fused: the caller's input is
  // read-only, so a staged copy is scaled and reduced. Broadcast and alltoall use no buffer.
  bool fused = false;
  size_t bufferBytes = 0;
  std::vector<PlanCopy> copyIn;  // input + tensorOffset -> buffer + bufferOffset
  // A joined rank's slots (buffer + bufferOffset, bytes): zeros, or for min, max and product the
  // op's identity (kernels::identityElement), written after the prescale.
  std::vector<PlanCopy> zeroFill;
  std::vector<PlanCopy> copyOut;  // buffer + bufferOffset -> output + tensorOffset
  // One per tensor when the op allocates its outputs (allgather, alltoall, reducescatter);
  // empty otherwise (allreduce writes its output or input, broadcast its input).
  std::vector<PlannedOutput> outputs;
  // Bytes the collective moves, as the algorithm choice (ops::plannedStep) counts them.
  size_t collectiveBytes = 0;

  // Allreduce: elements of each tensor, the element offset of its slot in the buffer, the
  // elements from the buffer's start to the end of the last slot (what is scaled and, flat,
  // reduced), and that count padded to PlanOptions::padParts.
  std::vector<size_t> counts;
  std::vector<size_t> slots;
  size_t count = 0;
  size_t paddedCount = 0;
  // Allgather: rank k's block in the buffer holds every tensor's rows from k, tensor after
  // tensor; its size and its offset.
  std::vector<size_t> blockBytes;
  std::vector<size_t> blockOffset;
  // Alltoall: bytes to and from each rank, and the rows received from each (the handle's
  // receivedSplits).
  std::vector<size_t> sendBytes;
  std::vector<size_t> recvBytes;
  std::vector<int32_t> receivedSplits;
  // Reducescatter: the elements of each rank's share (rows split as evenly as possible, the
  // first ranks one row more); this rank's output holds rankCounts[me] of them.
  std::vector<size_t> rankCounts;
};

// Bytes of one row (every dimension after the first) of a response's tensor.
size_t rowBytes(const Response& r);

// Where an allreduce's result goes: the output, or the input when the op runs in place.
void* outputOf(const TensorEntry& e);

// Plans a batch: responses[i] is the i-th agreed response, entries[i] this rank's op for it
// (null on a rank that joined: allowed for allreduce only). Broadcast, alltoall and
// reducescatter batches hold one tensor. setSize / me: the process set's size and this rank's
// index in it.
Status planBatch(const std::vector<const Response*>& responses,
                 const std::vector<TensorEntry*>& entries, int setSize, int me,
                 const PlanOptions& options, BatchPlan* out);

// Storage for an output the handle owns (the entry has no allocator): the host backend resizes
// HandleState::ownedOutput, the device one allocates device memory into ownedDeviceOutput.
using OwnOutputFn = std::function<Status(HandleState& handle, size_t bytes, void** out)>;

// Allocates the plan's outputs: through each entry's allocator, else `own`; writes each
// handle's outputShape and outputData (and receivedSplits for alltoall). (*outputs)[i] is
// tensor i's output: allocated, or outputOf(entry) for an op that allocates none (null for a
// joined rank's slot).
Status allocateOutputs(const BatchPlan& plan, const std::vector<TensorEntry*>& entries,
                       const OwnOutputFn& own, std::vector<void*>* outputs);

}  // namespace kolo::ops
