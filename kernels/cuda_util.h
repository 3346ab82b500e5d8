// SPDX-License-Identifier: Apache-2.0
// Small CUDA runtime helpers for the NCCL transport and the device executor: errors as Status,
// a scoped current device, grow-only device and pinned host buffers, shared events.
//
// Ownership: buffers and events free their memory in their destructors (errors there are
// ignored: the process may be exiting). Thread safety: a buffer is used by one thread at a time
// (the coordinator); the functions are safe from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace kolo::cuda {

// kIo "<what> on cuda:<device>: <cudaGetErrorName>: <cudaGetErrorString>" unless e is
// cudaSuccess. CUDA errors after a launch leave the context in an unknown state, so the device
// path treats them as fatal for the runtime (kIo aborts it).
Status check(cudaError_t e, const std::string& what, int device = -1);

// Number of visible CUDA devices; 0 (and the reason in *why) when CUDA reports none or fails.
int deviceCount(std::string* why = nullptr);

// Makes `device` current for this thread for the guard's lifetime, restoring the previous one
// (so a caller's own current device is never changed behind its back).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  Status status_;
};

// Grow-only device memory on one device. Growth frees the old block first (cudaFree waits for
// the device), so callers grow only between batches, never while the contents are in use.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(int device = -1) : device_(device) {}
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void setDevice(int device) { device_ = device; }
  // *out: at least `bytes` of device memory (contents not preserved across growth).
  Status reserve(size_t bytes, void** out);
  size_t capacity() const { return capacity_; }

 private:
  int device_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// Grow-only page-locked host memory (fast, asynchronous device<->host copies).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  Status reserve(size_t bytes, void** out);
  size_t capacity() const { return capacity_; }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// A timing-free event on `device`, destroyed with its last owner. The void pointer is the
// cudaEvent_t (what HandleState::completionEvent and TensorEntry::readyEvent hold).
Status makeEvent(int device, std::shared_ptr<void>* out);
inline cudaEvent_t eventOf(const std::shared_ptr<void>& e) {
  return static_cast<cudaEvent_t>(e.get());
}

// One look at `event`: *done when the work before it completed, false while it runs; a failure
// of that work is check()'s kIo naming `what` (the runtime's last error is cleared, so it is not
// reported again by the caller's next call). `what` becomes a string only on failure: the call
// is cheap enough for a polling loop. The waits that poll events (the NCCL transport's, the
// host-staged executor's) add their own deadline and checks around it.
Status queryEvent(cudaEvent_t event, bool* done, const char* what, int device = -1);

// Device memory waiting for device work that may still use it: add() takes the memory and the
// event of that work from any thread; reclaim() releases (so frees) the memory whose event
// completed, never blocking. What is left when it is destroyed is released then.
class DeferredFrees {
 public:
  void add(std::shared_ptr<void> mem, std::shared_ptr<void> event);
  void reclaim();

 private:
  std::mutex mu_;
  std::vector<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>> items_;  // mem, event
};

// cudaMalloc'ed memory owned by a shared_ptr (handle-owned outputs of device ops).
Status allocateShared(int device, size_t bytes, std::shared_ptr<void>* out);

}  // namespace kolo::cuda
