// SPDX-License-Identifier: Apache-2.0
// CudaDeviceBase: the submission side every CUDA executor shares (the NCCL one, and the host-staged
// one of KOLO_GPU_OPERATIONS=host): which device this rank drives, the checks on a device tensor,
// and the ready event recorded on its producer's stream. Plus the two CUDA queries the registry
// answers for the runtime (a device visible; a consumer stream waiting on a completion event),
// and the device outputs of a batch both executors allocate (allocateDeviceOutputs).
//
// Ownership: the executor owns its state; events are shared_ptrs (cuda::makeEvent). The device
// choice (CudaDeviceChoice) may be shared by executors that serve one rank together (the auto
// executor and the two it routes to). Threads:
// prepare() runs on submitting threads (any, concurrently; the device fields are under a mutex);
// executionDevice() on the coordinator thread. Blocking: none (no wait on the device). Errors:
// kUnsupported when no device is visible, kInvalidArgument for a bad tensor (naming its device).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/status.h"
#include "base/tensor.h"
#include "ops/batch_plan.h"
#include "ops/device_executor.h"

namespace kolo {

// Whether a CUDA device is visible; *why (optional) says why not.
bool cudaDeviceVisible(std::string* why = nullptr);

// cudaStreamWaitEvent(stream, event): `stream` (a cudaStream_t; null = the default stream of
// `device`, the event's device) runs its later work after `event` (a cudaEvent_t) completed.
// The host does not block.
Status cudaStreamWaitFor(void* event, int device, void* stream);

// "cuda:<device>"
std::string deviceName(int device);

// "<PCI bus id>" of a CUDA device (the physical GPU, whatever CUDA_VISIBLE_DEVICES numbers it),
// or "cuda:<device>" when CUDA cannot say.
std::string devicePciBusId(int device);

// ops::allocateOutputs for a device batch: through each entry's allocator (it must return device
// memory), else cudaMalloc'ed on `device` and owned by the handle (HandleState::ownedDeviceOutput).
Status allocateDeviceOutputs(const ops::BatchPlan& plan, const std::vector<TensorEntry*>& entries,
                             int device, std::vector<void*>* outputs);

// Which device this rank drives (one per rank: the first device tensor fixes it), shared by the
// executors that serve the rank.
struct CudaDeviceChoice {
  std::mutex mu;
  int deviceCount = -1;  // -1: not looked at yet
  std::string noDeviceWhy;
  int device = -1;  // fixed by the first device tensor
};

class CudaDeviceBase : public ops::DeviceExecutor {
 public:
  // `choice` null: a choice of its own.
  explicit CudaDeviceBase(const Config& cfg, std::shared_ptr<CudaDeviceChoice> choice = nullptr)
      : cfg_(cfg),
        choice_(choice != nullptr ? std::move(choice) : std::make_shared<CudaDeviceChoice>()) {}

  // Checks that the device is visible and is this rank's (one device per rank: the first device
  // tensor fixes it), that the pointers are device memory of it, then records *readyEvent on
  // t.stream (ops/device_executor.h).
  Status prepare(const TensorView& t, const TensorView* output,
                 std::shared_ptr<void>* readyEvent) override;

 protected:
  // The device of this rank, for a batch (coordinator thread). A rank that never submitted a
  // device tensor (it joined) takes localRank % deviceCount and keeps it.
  Status executionDevice(int* device);

  const Config cfg_;
  const std::shared_ptr<CudaDeviceChoice> choice_;  // never null

 private:
  Status checkPointer(const TensorView& t, const char* what) const;
};

}  // namespace kolo
