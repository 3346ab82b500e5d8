// CudaDeviceBase: the submission side every CUDA executor shares (the NCCL one, and the host-staged
// one of KOLO_GPU_OPERATIONS=host): which device this rank drives, the checks on a device tensor,
// and the ready event recorded on its producer's stream. Plus the two CUDA queries the registry
// answers for the runtime (a device visible; a consumer stream waiting on a completion event).
//
// Ownership: the executor owns its state; events are shared_ptrs (cuda::makeEvent). Threads:
// prepare() runs on submitting threads (any, concurrently; the device fields are under mu_);
// executionDevice() on the coordinator thread. Blocking: none (no wait on the device). Errors:
// kUnsupported when no device is visible, kInvalidArgument for a bad tensor (naming its device).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "base/config.h"
#include "base/status.h"
#include "base/tensor.h"
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

class CudaDeviceBase : public ops::DeviceExecutor {
 public:
  explicit CudaDeviceBase(const Config& cfg) : cfg_(cfg) {}

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

 private:
  Status checkPointer(const TensorView& t, const char* what) const;

  mutable std::mutex mu_;  // guards the device fields (prepare() runs on user threads)
  int deviceCount_ = -1;   // -1: not looked at yet
  std::string noDeviceWhy_;
  int device_ = -1;  // this rank's device, fixed by the first device tensor
};

}  // namespace kolo
