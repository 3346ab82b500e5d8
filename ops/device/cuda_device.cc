// SPDX-License-Identifier: Apache-2.0
// The submission side shared by the CUDA executors (contract in cuda_device.h).
#include "ops/device/cuda_device.h"

#include <algorithm>

#include "kernels/cuda_util.h"
#include "ops/handle.h"

namespace kolo {

std::string deviceName(int device) { return "cuda:" + std::to_string(device); }

std::string devicePciBusId(int device) {
  char id[64] = {0};
  if (cudaDeviceGetPCIBusId(id, sizeof(id), device) != cudaSuccess) {
    (void)cudaGetLastError();
    return deviceName(device);
  }
  return id;
}

bool cudaDeviceVisible(std::string* why) { return cuda::deviceCount(why) > 0; }

Status cudaStreamWaitFor(void* event, int device, void* stream) {
  KOLO_REQUIRE(device >= 0, kInternal, "a completion event without its device");
  cuda::DeviceGuard g(device);  // a null stream means the default stream of the current device
  KOLO_RETURN_IF_ERROR(g.status());
  cudaError_t e =
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0);
  if (e != cudaSuccess) (void)cudaGetLastError();  // not left behind for the caller's next check
  return cuda::check(e, "cudaStreamWaitEvent (consumer stream after kolo's completion event)",
                     device);
}

Status allocateDeviceOutputs(const ops::BatchPlan& plan, const std::vector<TensorEntry*>& entries,
                             int device, std::vector<void*>* outputs) {
  return ops::allocateOutputs(
      plan, entries,
      [device](HandleState& h, size_t bytes, void** out) {
        std::shared_ptr<void> mem;
        KOLO_RETURN_IF_ERROR(cuda::allocateShared(device, bytes, &mem));
        *out = mem.get();
        h.ownedDeviceOutput = std::move(mem);
        return Status::ok();
      },
      outputs);
}

Status CudaDeviceBase::checkPointer(const TensorView& t, const char* what) const {
  if (t.data == nullptr) return Status::ok();  // zero elements: nothing is read or written
  cudaPointerAttributes attr{};
  cudaError_t e = cudaPointerGetAttributes(&attr, t.data);
  if (e != cudaSuccess) (void)cudaGetLastError();
  const bool device =
      e == cudaSuccess && (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged);
  if (!device) {
    return Status(ErrorCode::kInvalidArgument,
                  std::string(what) + " says " + deviceName(t.device) +
                      " but its data pointer is not CUDA device memory (a host tensor must use "
                      "device -1)");
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != t.device) {
    return Status(ErrorCode::kInvalidArgument, std::string(what) + " says " + deviceName(t.device) +
                                                   " but its memory is on " +
                                                   deviceName(attr.device));
  }
  return Status::ok();
}

Status CudaDeviceBase::prepare(const TensorView& t, const TensorView* output,
                               std::shared_ptr<void>* readyEvent) {
  {
    CudaDeviceChoice& c = *choice_;
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.deviceCount < 0) c.deviceCount = cuda::deviceCount(&c.noDeviceWhy);
    if (c.deviceCount == 0) {
      return Status(ErrorCode::kUnsupported,
                    "the tensor is on " + deviceName(t.device) +
                        " but no CUDA device is visible to this process (" + c.noDeviceWhy + ")");
    }
    if (t.device >= c.deviceCount) {
      return Status(ErrorCode::kInvalidArgument,
                    deviceName(t.device) + " does not exist: " + std::to_string(c.deviceCount) +
                        " CUDA device(s) are visible to this process");
    }
    if (c.device < 0) c.device = t.device;
    if (c.device != t.device) {
      return Status(ErrorCode::kInvalidArgument,
                    "the tensor is on " + deviceName(t.device) + " but this rank uses " +
                        deviceName(c.device) +
                        " (kolo drives one CUDA device per rank: run one process per device)");
    }
  }
  KOLO_RETURN_IF_ERROR(checkPointer(t, "the tensor"));
  if (output != nullptr && output->data != nullptr && output->data != t.data) {
    KOLO_REQUIRE(output->device == t.device, kInvalidArgument,
                 "the output tensor is on " + deviceName(output->device) + ", the input on " +
                     deviceName(t.device));
    KOLO_RETURN_IF_ERROR(checkPointer(*output, "the output tensor"));
  }
  KOLO_RETURN_IF_ERROR(cuda::makeEvent(t.device, readyEvent));
  cuda::DeviceGuard g(t.device);
  KOLO_RETURN_IF_ERROR(g.status());
  cudaError_t e = cudaEventRecord(cuda::eventOf(*readyEvent), static_cast<cudaStream_t>(t.stream));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    readyEvent->reset();
    return Status(ErrorCode::kInvalidArgument,
                  "cannot record the ready event on the tensor's stream (is it a stream of " +
                      deviceName(t.device) + "?): " + cudaGetErrorString(e));
  }
  return Status::ok();
}

Status CudaDeviceBase::executionDevice(int* device) {
  CudaDeviceChoice& c = *choice_;
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.device < 0) {
    // Only a rank that never submitted a device tensor gets here (it joined): pick its
    // launcher-given local device and keep it, so later submissions must agree.
    if (c.deviceCount < 0) c.deviceCount = cuda::deviceCount(&c.noDeviceWhy);
    if (c.deviceCount == 0) {
      return Status(
          ErrorCode::kUnsupported,
          "a device op reached this rank but no CUDA device is visible (" + c.noDeviceWhy + ")");
    }
    c.device = std::max(0, cfg_.localRank) % c.deviceCount;
  }
  *device = c.device;
  return Status::ok();
}

}  // namespace kolo
