// SPDX-License-Identifier: Apache-2.0
// HostStagedExecutor: CUDA tensors reduced on the host (KOLO_GPU_OPERATIONS=host; Horovod's
// HOROVOD_GPU_OPERATIONS=MPI or GLOO; every CUDA tensor in a build without NCCL). For jobs where NCCL cannot be used -- typically several
// ranks sharing one GPU, which NCCL refuses -- at the cost of two copies over PCIe per batch.
//
// A batch, on the coordinator thread:
//  1. planned with ops::planBatch (the same plan both other backends carry out);
//  2. a private CUDA stream waits on each entry's ready event (the producer's work, not the
//     device), then copies every input into pinned host memory (cudaMemcpyAsync), and the host
//     waits for those copies;
//  3. the host backend (ops::executeOnHost) runs the batch over the set's CPU transport on host
//     proxies of the entries (inputs in pinned memory, results in place or in pinned outputs);
//  4. device outputs are allocated (the entry's allocator, else cudaMalloc owned by the handle),
//     the results are copied back on the same stream, and a completion event recorded after
//     them goes to every handle (HandleState::completionEvent), as on the NCCL path.
// The call returns once that event completed (asynchronous completion does not apply: the host
// collective already blocked the coordinator, and the pinned buffer is reused by the next batch).
//
// Ownership: the executor owns its stream and the grow-only pinned buffer. Threads: prepare() on
// submitting threads (CudaDeviceBase), execute() on the coordinator thread. Blocking: execute()
// waits for its copies, each wait bounded by the set transport's timeout (kTimeout). Errors: CUDA
// failures are kIo (they abort the runtime, as on the NCCL path), the transport's own errors
// pass through, an output allocator returning null is kInvalidArgument naming the op.
#pragma once

#include <memory>

#include "base/config.h"
#include "base/status.h"
#include "ops/device/cuda_device.h"
#include "ops/device_executor.h"

namespace kolo {

// Creates the executor; makes no CUDA call (the device is looked at on the first device tensor).
// `choice` (optional) is a device choice shared with other executors of this rank.
Status createHostStagedExecutor(const Config& cfg, std::unique_ptr<ops::DeviceExecutor>* out,
                                std::shared_ptr<CudaDeviceChoice> choice = nullptr);

}  // namespace kolo
