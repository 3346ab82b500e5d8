// SPDX-License-Identifier: Apache-2.0
// Helpers of the GPU tests that drive a Runtime directly (gpu_test.cc, gpu_host_staged_test.cc):
// a TensorView of device memory on device 0, and a bounded wait on a handle.
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/runtime.h"

namespace kolo::gputest {

inline TensorView deviceView(void* data, DataType t, std::vector<int64_t> shape,
                             void* stream = nullptr) {
  TensorView v;
  v.data = data;
  v.dtype = t;
  v.shape = std::move(shape);
  v.device = 0;
  v.stream = stream;
  return v;
}

inline Status waitFor(const HandlePtr& h) {
  return h->wait(Clock::now() + std::chrono::seconds(60));
}

}  // namespace kolo::gputest
