// SPDX-License-Identifier: Apache-2.0
// bootstrap: everything one kolo init does before the engine starts, in one call. From a Config
// (the environment, read once) to the parts a Runtime owns:
//
//   1. the launch environment (kolorun's KOLO_RANK/KOLO_SIZE, or mpirun / srun variables,
//      registry.h) -- or a job of one when no launcher set anything;
//   2. the store: TCP (KOLO_RENDEZVOUS_ADDR/PORT) or file (KOLO_RENDEZVOUS_DIR), none for a job
//      of one or a plain MPI job; seen through this init's rendezvous round (below);
//   3. the host-name exchange ("host/<rank>" in the store, or an allgather over the transport
//      when there is no store) and the Topology computed from it; the same exchange carries a
//      digest of the job-wide settings (job_settings.h: the algorithms, fusion, cache, KOLO_SHM,
//      ...), and init fails on every rank, naming the variable, the values and the ranks, when
//      any rank's differ;
//   4. the global transport (createTransport: MPI or Gloo, shm over it per KOLO_SHM; loopback
//      for a job of one; without a store, shm goes over it after the settings agree) and the
//      device executor (CUDA tensors: NCCL, auto or host-staged per KOLO_GPU_OPERATIONS;
//      host-staged in a build with CUDA but no NCCL; null without CUDA).
//
// Rendezvous rounds. bootstrap() may run many times in one process (init -> shutdown -> init,
// each time with any rank and size; the elastic launcher will rely on it). Every round sees the
// store through its own key space: round 0 uses the keys as they are (kolorun watches
// "host/<rank>"), round N > 0 prefixes every key with "round<N>/". A round's keys therefore
// never meet another round's, and Gloo's connection counter, NCCL ids and process-set keys all
// start fresh. The round is KOLO_RENDEZVOUS_ROUND when set (the launcher that restarts a job
// sets it, and every member of one round must use the same value), otherwise the number of
// earlier init attempts in this process (`initCount`), which agrees on every rank as long as
// every rank inits and shuts down the same number of times.
//
// A worker of an old round cannot join a new one: its keys live in the old round's space, so
// it never sees the new round's ranks (and they never see it); it fails at KOLO_START_TIMEOUT
// naming the key it waited for. It fails at once, with kAborted naming both rounds, when the
// store already shows a newer round: every rank records its round under "kolo/round" (outside
// every round's key space) and refuses to start below the newest one recorded there.
//
// MPI cannot change its world: MPI is initialized once per process and never re-initialized
// after MPI_Finalize (kolo's own MPI_Finalize runs at exit, as Horovod's does), so under MPI a
// re-init gets the same ranks again, and asking for another rank or size is kInvalidArgument.
// Elastic jobs use Gloo (KOLO_CONTROLLER=gloo).
//
// Blocking: collective; waits for the other ranks at most KOLO_START_TIMEOUT. Thread safety:
// no shared state; concurrent calls are independent (the C API serializes inits).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/status.h"
#include "bootstrap/topology.h"
#include "ops/device_executor.h"
#include "rendezvous/store.h"
#include "transport/transport.h"

namespace kolo {

struct BootstrapResult {
  Config config;                 // the input, completed: rank, size, hostname (launcher values)
  int64_t round = 0;             // this init's rendezvous round
  std::shared_ptr<Store> store;  // the round's view of the store; null without a store
  std::unique_ptr<Transport> transport;         // the global transport, connected
  std::vector<std::string> hosts;               // every rank's host name, by rank
  Topology topology;                            // from `hosts`
  std::unique_ptr<ops::DeviceExecutor> device;  // null in a build without CUDA
};

// The whole init path; `initCount` is the number of earlier init attempts in this process (the
// round when KOLO_RENDEZVOUS_ROUND is unset). Errors: kInvalidArgument for an inconsistent
// configuration (naming the variables; also job-wide settings that differ between ranks,
// on every rank), kAborted for a stale round, kTimeout when other ranks
// do not arrive, the transport's own errors. On error *out holds nothing that needs closing.
Status bootstrap(const Config& config, int64_t initCount, BootstrapResult* out);

// The key prefix of a round: "" for round 0, "round<N>/" otherwise.
std::string roundPrefix(int64_t round);

}  // namespace kolo
