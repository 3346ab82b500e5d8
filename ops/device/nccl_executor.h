// SPDX-License-Identifier: Apache-2.0
// The device executor over NCCL: what the transport registry creates for a build with NCCL.
// See ops/device_executor.h for the contract and nccl_executor_impl.h for the design.
#pragma once

#include <memory>
#include <string>

#include "base/config.h"
#include "base/status.h"
#include "rendezvous/store.h"
#include "ops/device/cuda_device.h"
#include "ops/device_executor.h"

namespace kolo {

// Creates the executor. Makes no CUDA call: the device is looked at on the first device tensor,
// communicators are made on the first batch of each process set. `store` (may be null) carries
// the NCCL unique ids; without one they travel over the set's CPU transport. `choice` (optional)
// is a device choice shared with other executors of this rank (cuda_device.h).
Status createNcclExecutor(const Config& cfg, std::shared_ptr<Store> store,
                          std::unique_ptr<ops::DeviceExecutor>* out,
                          std::shared_ptr<CudaDeviceChoice> choice = nullptr);

}  // namespace kolo
