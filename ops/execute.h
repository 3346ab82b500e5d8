// SPDX-License-Identifier: Apache-2.0
// execute: runs one planned batch of agreed responses on this rank — pack into the fusion
// buffer, run the selected collective over the set's transport, unpack, scale — and records
// each step on the timeline. It completes no handle: the coordinator does, with the Status
// returned here (the same for every tensor of the batch).
//
// `entries[i]` is this rank's op for `responses[i]`; it is null on a rank that joined (allowed
// for allreduce only: the rank contributes zeros). Outputs whose size is known only now
// (allgather, alltoall, reducescatter) are allocated through the entry's allocator or owned by
// its handle; shapes and received splits are written into the handle before returning.
// Batches of CUDA tensors (response device >= 0) go to ctx.device (ops/device_executor.h);
// kUnsupported without one.
#pragma once

#include <vector>

#include "ops/fusion_buffer.h"
#include "ops/message.h"
#include "ops/process_set.h"
#include "ops/entry.h"
#include "ops/collectives.h"

namespace kolo {
class Timeline;
}

namespace kolo::ops {

class DeviceExecutor;
class HierarchyCache;

struct ExecContext {
  const ProcessSet* set;        // the batch's process set; this rank is a member
  const AlgorithmConfig* algorithms;
  FusionBuffer* fusion;
  Timeline* timeline;           // may be null
  DeviceExecutor* device = nullptr;  // runs batches of CUDA tensors; null: none in this build
  HierarchyCache* hierarchy = nullptr;  // host allreduces across hosts; null: always flat
};

Status execute(const ExecContext& ctx, const std::vector<const Response*>& responses,
               const std::vector<TensorEntry*>& entries);

// The host backend alone: execute() for a batch whose entries' tensors are host memory, whatever
// the responses' device says. The host-staged CUDA path (ops/device/host_staged_executor.h)
// runs it on host copies of its device tensors.
Status executeOnHost(const ExecContext& ctx, const std::vector<const Response*>& responses,
                     const std::vector<TensorEntry*>& entries);

}  // namespace kolo::ops
