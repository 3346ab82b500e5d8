// SPDX-License-Identifier: Apache-2.0
#include "kernels/cuda_util.h"

#include <algorithm>
#include <iterator>

namespace kolo::cuda {

Status check(cudaError_t e, const std::string& what, int device) {
  if (e == cudaSuccess) return Status::ok();
  std::string where = device >= 0 ? " on cuda:" + std::to_string(device) : std::string();
  return Status(ErrorCode::kIo,
                what + where + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

int deviceCount(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    // The error is sticky for nothing else in this process; clear it for later calls.
    (void)cudaGetLastError();
    if (why != nullptr) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "cudaGetDeviceCount reports 0 devices";
  return n;
}

DeviceGuard::DeviceGuard(int device) {
  cudaError_t e = cudaGetDevice(&previous_);
  if (e != cudaSuccess) previous_ = -1;
  if (previous_ != device) status_ = check(cudaSetDevice(device), "cudaSetDevice", device);
  if (previous_ == device) previous_ = -1;  // nothing to restore
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) {
    DeviceGuard g(device_);
    (void)cudaFree(data_);
  }
}

Status DeviceBuffer::reserve(size_t bytes, void** out) {
  if (bytes > capacity_) {
    DeviceGuard g(device_);
    KOLO_RETURN_IF_ERROR(g.status());
    size_t cap = capacity_ ? capacity_ : size_t{1} << 20;
    while (cap < bytes) cap *= 2;
    if (data_ != nullptr) {
      KOLO_RETURN_IF_ERROR(check(cudaFree(data_), "cudaFree (fusion buffer)", device_));
      data_ = nullptr;
      capacity_ = 0;
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, cap);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // out-of-memory is not sticky; keep later calls clean
      return check(e, "cudaMalloc of a " + std::to_string(cap) + "-byte device buffer", device_);
    }
    data_ = p;
    capacity_ = cap;
  }
  *out = data_;
  return Status::ok();
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) (void)cudaFreeHost(data_);
}

Status PinnedBuffer::reserve(size_t bytes, void** out) {
  if (bytes > capacity_) {
    size_t cap = capacity_ ? capacity_ : size_t{1} << 20;
    while (cap < bytes) cap *= 2;
    if (data_ != nullptr) {
      KOLO_RETURN_IF_ERROR(check(cudaFreeHost(data_), "cudaFreeHost"));
      data_ = nullptr;
      capacity_ = 0;
    }
    void* p = nullptr;
    cudaError_t e = cudaMallocHost(&p, cap);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return check(e, "cudaMallocHost of " + std::to_string(cap) + " bytes");
    }
    data_ = p;
    capacity_ = cap;
  }
  *out = data_;
  return Status::ok();
}

Status makeEvent(int device, std::shared_ptr<void>* out) {
  DeviceGuard g(device);
  KOLO_RETURN_IF_ERROR(g.status());
  cudaEvent_t ev = nullptr;
  KOLO_RETURN_IF_ERROR(
      check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate", device));
  *out = std::shared_ptr<void>(
      ev, [](void* p) { (void)cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
  return Status::ok();
}

Status queryEvent(cudaEvent_t event, bool* done, const char* what, int device) {
  *done = false;
  const cudaError_t e = cudaEventQuery(event);
  if (e == cudaSuccess) {
    *done = true;
    return Status::ok();
  }
  if (e == cudaErrorNotReady) return Status::ok();
  (void)cudaGetLastError();
  return check(e, what, device);
}

void DeferredFrees::add(std::shared_ptr<void> mem, std::shared_ptr<void> event) {
  std::lock_guard<std::mutex> lock(mu_);
  items_.emplace_back(std::move(mem), std::move(event));
}

void DeferredFrees::reclaim() {
  std::vector<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto running = [](const auto& item) {
      return cudaEventQuery(eventOf(item.second)) == cudaErrorNotReady;
    };
    auto split = std::stable_partition(items_.begin(), items_.end(), running);
    ready.assign(std::make_move_iterator(split), std::make_move_iterator(items_.end()));
    items_.erase(split, items_.end());
  }
  // `ready` goes out of scope here: cudaFree runs outside the lock.
}

Status allocateShared(int device, size_t bytes, std::shared_ptr<void>* out) {
  out->reset();
  if (bytes == 0) return Status::ok();
  DeviceGuard g(device);
  KOLO_RETURN_IF_ERROR(g.status());
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status(ErrorCode::kInvalidArgument,
                  "cannot allocate a " + std::to_string(bytes) + "-byte output on cuda:" +
                      std::to_string(device) + ": " + cudaGetErrorString(e));
  }
  *out = std::shared_ptr<void>(p, [device](void* q) {
    DeviceGuard guard(device);
    (void)cudaFree(q);
  });
  return Status::ok();
}

}  // namespace kolo::cuda
