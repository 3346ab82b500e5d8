// SPDX-License-Identifier: Apache-2.0
// DeviceExecutor: the data path for CUDA tensors, behind an interface so that core/ and ops/
// compile the same way with or without CUDA. ops/device implements it (the NCCL, host-staged and
// auto executors); the registry creates one when the build has CUDA (createDeviceExecutor,
// chosen by KOLO_GPU_OPERATIONS), and the Runtime owns it. A build without CUDA has none, and
// device tensors are rejected at submission.
//
// Threads: prepare() runs on the submitting thread (any thread, concurrently); execute() on the
// coordinator thread only. The executor outlives the coordinator (the Runtime destroys it after
// the coordinator thread ended).
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"

namespace kolo {
struct Response;
struct TensorEntry;
struct TensorView;
}  // namespace kolo

namespace kolo::ops {

struct ExecContext;

class DeviceExecutor {
 public:
  virtual ~DeviceExecutor() = default;

  // "nccl", "host" (staged through host memory) or "auto" (NCCL, or host for a process set whose
  // ranks share a GPU): for logs and tests.
  virtual const char* name() const = 0;

  // Submission side. Checks that `t` (and `output` when not null) can be used: a CUDA device
  // with its ordinal is visible, it is the device this rank uses (one device per rank: the first
  // device tensor fixes it), and the data pointer is device memory of that device. Then records,
  // on t.stream (null: the device's default stream), the event the runtime's stream waits on
  // before it touches the tensor (*readyEvent, a cudaEvent_t owned by the shared_ptr). Never
  // blocks on the device. Errors: kUnsupported (no device visible), kInvalidArgument (the rest),
  // each naming the tensor's device.
  virtual Status prepare(const TensorView& t, const TensorView* output,
                         std::shared_ptr<void>* readyEvent) = 0;

  // Coordinator side: runs one planned batch whose responses have device >= 0, with the
  // contract of ops::execute (execute.h). Creates the process set's NCCL communicators on first
  // use (collective over the set's members, which run the same batch at the same point). Each
  // handle of the batch gets the batch's completion event (HandleState::completionEvent) before
  // the call returns. By default it returns once the device work completed, failed, or the
  // transport timeout passed (kTimeout / kPeerLost / kIo abort the runtime, as with the CPU
  // transports). With asynchronous completion (Config::asyncCompletion) it returns once the
  // work is queued on the device, so the handles complete before the work does; poll() then
  // watches that work.
  virtual Status execute(const ExecContext& ctx, const std::vector<const Response*>& responses,
                         const std::vector<TensorEntry*>& entries) = 0;

  // Coordinator side, between rounds: one look, without blocking, at device work still in
  // flight (asynchronous completion only; otherwise none ever is). ok while it runs or once it
  // completed; a transport failure when some of it failed or passed the transport timeout (the
  // communicator is aborted; the coordinator aborts the runtime with that cause, so every later
  // op fails naming it).
  virtual Status poll() { return Status::ok(); }

  // Coordinator side, when it stops: waits for the device work still in flight (each batch
  // bounded by the transport timeout). A failure is returned (the coordinator logs it: the
  // handles had completed already).
  virtual Status drain() { return Status::ok(); }
};

}  // namespace kolo::ops
