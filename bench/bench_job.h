// SPDX-License-Identifier: Apache-2.0
// Joining the multi-process job a benchmark was started in, without the runtime: the same
// Config, launcher detection and transport factory (bootstrap/registry.h) the runtime uses, so
// the benchmarks measure the transports exactly as kolo creates them.
//
// Launchers: mpirun (MPI; no store needed), kolorun or any launcher that sets KOLO_RANK,
// KOLO_SIZE and KOLO_RENDEZVOUS_ADDR/PORT (or KOLO_RENDEZVOUS_DIR) for Gloo. Started alone
// (no launcher variables), the job is one rank over Gloo with an in-memory store.
//
// Thread safety: connectBenchJob is called from the main thread, once per prefix. Blocking:
// waits for the other ranks at most KOLO_START_TIMEOUT.
#pragma once

#include <memory>
#include <string>

#include "base/config.h"
#include "base/status.h"
#include "rendezvous/store.h"
#include "transport/transport.h"

namespace kolo::bench {

struct BenchJob {
  Config config;                         // from the environment, rank/size/local filled in
  std::shared_ptr<Store> store;          // null under MPI without a rendezvous
  std::unique_ptr<Transport> transport;  // connected, timeout = KOLO_TIMEOUT_SECONDS
};

// Reads the environment, publishes this rank's hostname under "<storePrefix>host/<rank>" (which
// also tells kolorun the rank connected), and creates the transport with every store key under
// `storePrefix` ("" = none), so a second transport in a process that also runs the kolo runtime
// never meets the runtime's keys. Collective: every rank calls it with the same prefix.
// withoutShm: the launcher's transport as it is (KOLO_SHM=off for this transport only), for a
// baseline of MPI or Gloo beside a shared-memory runtime in the same job.
// Errors: the Config's, the store's (kTimeout when a rank does not show up) and the transport's.
Status connectBenchJob(const std::string& storePrefix, BenchJob* out, bool withoutShm = false);

// "mpi", "gloo", or "shm (over mpi)" when KOLO_SHM put the shared-memory transport on top of
// the launcher's transport (the default on one host: set KOLO_SHM=off to measure MPI or Gloo).
std::string describeTransport(const Transport& t);

}  // namespace kolo::bench
