// SPDX-License-Identifier: Apache-2.0
// AutoDeviceExecutor: KOLO_GPU_OPERATIONS=auto in a build with NCCL. CUDA tensors go over NCCL,
// except in a process set where two member ranks drive the same physical GPU (the same PCI bus
// id on the same machine): NCCL refuses one communicator over them ("Duplicate GPU detected"),
// so that set's batches take the host-staged path (host_staged_executor.h) instead, and its
// first member logs a warning naming the ranks and the GPU. So a job of several ranks on one GPU
// runs without KOLO_GPU_OPERATIONS=host; `nccl` forces NCCL (and its refusal), `host` the
// host-staged path for every set.
//
// The decision is made per process set at its first device batch, which every member runs at
// the same point: each member contributes "<machine>/<PCI bus id>" (the machine's own host name,
// not KOLO_HOSTNAME, which may split one machine into several kolo hosts that still share its
// GPUs) through an allgather over the set's CPU transport, and every member finds the same
// answer. It holds for the set's life (set ids are not reused).
//
// Ownership: owns both executors; they share this rank's device choice (cuda_device.h).
// Threads: prepare() on submitting threads, the rest on the coordinator thread (as every
// DeviceExecutor). Blocking: the first batch of a set adds one small allgather. Errors: the
// allgather's transport errors (they abort the runtime, as any transport failure), then those
// of the executor the set was routed to.
#pragma once

#include <memory>

#include "base/config.h"
#include "base/status.h"
#include "ops/device_executor.h"
#include "rendezvous/store.h"

namespace kolo {

// Creates the executor (no CUDA call until the first device tensor). `store` as for
// createNcclExecutor.
Status createAutoDeviceExecutor(const Config& cfg, std::shared_ptr<Store> store,
                                std::unique_ptr<ops::DeviceExecutor>* out);

}  // namespace kolo
