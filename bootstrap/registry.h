// SPDX-License-Identifier: Apache-2.0
// The transport registry (part of bootstrap/): which transports this build contains, where this
// process was launched from, and the one factory that turns a Config into a connected Transport
// (and the one that makes the device executor). The only file of kolo that looks at
// KOLO_HAVE_* (registry.cc), so the rest of the engine compiles the same way with or without
// MPI and Gloo. It sits above transport/ and ops/ because it names their implementations.
//
// Thread safety: every function is safe to call from any thread (they read the environment
// through `getenv`, which is ::getenv unless a test passes its own).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/config.h"
#include "base/status.h"
#include "rendezvous/store.h"
#include "transport/transport.h"

namespace kolo {

namespace ops {
class DeviceExecutor;
}

using GetEnvFn = std::function<const char*(const char*)>;

// Whether this build contains `kind` (kAuto: whether any multi-process transport is built).
bool transportBuilt(TransportKind kind);

// True when an MPI launcher (mpirun, or srun with PMI/PMIx) started this process:
// OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK is set.
bool launchedByMpi(const GetEnvFn& getenv = {});

// What `cfg.transport` means here: kAuto becomes kMpi when launchedByMpi() and MPI is built,
// otherwise kGloo (when built). Other kinds are returned as they are.
TransportKind resolveTransportKind(const Config& cfg, const GetEnvFn& getenv = {});

// When KOLO_RANK was not given (cfg->rank < 0), fills rank and size -- and localRank/localSize
// where still unset -- from the launcher's variables: Open MPI (OMPI_COMM_WORLD_RANK, _SIZE,
// _LOCAL_RANK, _LOCAL_SIZE), MPICH/Hydra (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS)
// or Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the local size from
// SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE at SLURM_NODEID, e.g. "2(x3),1").
// Leaves *cfg unchanged when no launcher is recognized. Errors: kInvalidArgument naming a
// malformed variable.
Status detectLaunchEnvironment(Config* cfg, const GetEnvFn& getenv = {});

// Creates and connects the transport resolveTransportKind(cfg) names, as rank `rank` of `size`
// (-1: take cfg.rank / cfg.size), and sets its timeout to cfg.timeoutSeconds. Collective: every
// rank calls it, and waits at most cfg.startTimeoutSeconds for the others. MPI takes rank and
// size from MPI itself (a disagreement with the given ones is kInvalidArgument: MPI's world
// cannot change within a process, MPI_Finalize being final). Gloo needs
// `store`; it listens on cfg.glooIface when set, else on 127.0.0.1 when every rank is known to
// run on this host (localSize == size, or no local size and a loopback or absent
// KOLO_RENDEZVOUS_ADDR), else on cfg.hostname (or this host's name). Errors: kUnsupported for a
// transport this build lacks (or kLoopback, which only in-process tests create), the
// transport's own errors otherwise.
Status createTransport(const Config& cfg, std::shared_ptr<Store> store, int rank, int size,
                       std::unique_ptr<Transport>* out);

// ---- the device path (CUDA tensors: over NCCL, or staged through host memory) -----------------
// Whether this build contains it (KOLO_HAVE_CUDA; NCCL builds also have the NCCL executor).
bool deviceTransportBuilt();
// Whether it can run here: built, and a CUDA device is visible; *why (optional) says why not.
// Queries the CUDA driver (cheap, creates no context).
bool deviceTransportAvailable(std::string* why = nullptr);
// Creates the executor that runs batches of CUDA tensors (no CUDA call before the first device
// tensor), by cfg.gpuOperations: kNccl over NCCL (communicators per process set, made lazily);
// kAuto the same, except a process set whose ranks share a GPU goes host-staged
// (ops/device/auto_executor.h); kHost, or any in a build without NCCL, the host-staged one.
// Sets *out to null in a build without CUDA; kUnsupported for KOLO_GPU_OPERATIONS=nccl without
// NCCL. `store` (may be null) carries NCCL unique ids; without it they travel over the process
// set's CPU transport.
Status createDeviceExecutor(const Config& cfg, std::shared_ptr<Store> store,
                            std::unique_ptr<ops::DeviceExecutor>* out);
// Makes `stream` (a cudaStream_t; null = the default stream of `device`) wait, on the device,
// for `event` (a device handle's completion event, recorded on `device`). kUnsupported in a
// build without CUDA (where no handle has an event); kIo with CUDA's message when CUDA refuses.
Status deviceStreamWait(void* event, int device, void* stream);

}  // namespace kolo
