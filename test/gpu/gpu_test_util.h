// SPDX-License-Identifier: Apache-2.0
// Helpers of the GPU tests: device arrays, the "skip without a device" entry point.
#pragma once

#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <vector>

namespace kolo::gputest {

// Device memory holding n elements of T, freed on destruction.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (n > 0) REQUIRE(cudaMalloc(&p_, n * sizeof(T)) == cudaSuccess);
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return static_cast<T*>(p_); }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == n_);
    if (n_ > 0) {
      REQUIRE(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
    }
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0) {
      REQUIRE(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    }
    return host;
  }

 private:
  void* p_ = nullptr;
  size_t n_;
};

template <typename T>
std::vector<T> downloadRaw(const void* device, size_t n) {
  std::vector<T> host(n);
  if (n > 0) {
    REQUIRE(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  }
  return host;
}

// The number of visible devices; prints the skip line and returns 0 when there is none (or
// fewer than `needed`).
inline int devicesOrSkip(const char* program, int needed) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) n = 0;
  if (n < needed) {
    std::printf(
        "SKIPPED: %s needs %d CUDA device(s); %d visible (%s). No GPU test ran; this is not a "
        "pass of the GPU path.\n",
        program, needed, n, e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount");
    std::fflush(stdout);
    return 0;
  }
  return n;
}

}  // namespace kolo::gputest
