// SPDX-License-Identifier: Apache-2.0
// Mirrors Runtime::create's launch path (config -> launcher variables -> store -> hostnames ->
// createTransport) without starting a coordinator: the benchmarks drive the transport from the
// main thread, the way the coordinator thread does inside the runtime.
#include "bench/bench_job.h"

#include <chrono>
#include <vector>

#include "bootstrap/topology.h"
#include "bootstrap/registry.h"
#include "transport/shm/shm_transport.h"

namespace kolo::bench {

Status connectBenchJob(const std::string& storePrefix, BenchJob* out, bool withoutShm) {
  Config cfg;
  KOLO_RETURN_IF_ERROR(Config::fromEnvironment(&cfg));
  if (withoutShm) cfg.shm = ShmMode::kOff;
  KOLO_RETURN_IF_ERROR(detectLaunchEnvironment(&cfg));
  if (cfg.hostname.empty()) cfg.hostname = localHostname();
  const auto startTimeout =
      std::chrono::milliseconds(static_cast<int64_t>(cfg.startTimeoutSeconds * 1000.0));

  std::shared_ptr<Store> store;
  if (cfg.size < 0) {
    // Started alone: a job of one. Gloo can rendezvous with itself through an in-memory store;
    // MPI (singleton init) needs none.
    cfg.size = 1;
    cfg.rank = 0;
    store = makeMemoryStore();
  }
  KOLO_REQUIRE(cfg.rank >= 0, kInvalidArgument,
               "KOLO_SIZE=" + std::to_string(cfg.size) + " is set but KOLO_RANK is not");
  if (!cfg.rendezvousAddr.empty()) {
    KOLO_REQUIRE(cfg.rendezvousPort > 0, kInvalidArgument,
                 "KOLO_RENDEZVOUS_ADDR is set but KOLO_RENDEZVOUS_PORT is not");
    KOLO_RETURN_IF_ERROR(
        makeTcpStore(cfg.rendezvousAddr, cfg.rendezvousPort, startTimeout, &store));
  } else if (!cfg.rendezvousDir.empty()) {
    KOLO_RETURN_IF_ERROR(makeFileStore(cfg.rendezvousDir, &store));
  }
  if (store && !storePrefix.empty()) store = makePrefixStore(store, storePrefix);

  if (store) {
    // The topology decides where Gloo listens (loopback for a one-host job); mpirun already
    // told us through OMPI_COMM_WORLD_LOCAL_SIZE.
    std::vector<std::string> hosts;
    KOLO_RETURN_IF_ERROR(
        exchangeHostnames(*store, cfg.rank, cfg.size, cfg.hostname, startTimeout, &hosts));
    Topology topo;
    KOLO_RETURN_IF_ERROR(computeTopology(hosts, cfg.rank, &topo));
    if (cfg.localSize < 0) cfg.localSize = topo.localSize;
    if (cfg.localRank < 0) cfg.localRank = topo.localRank;
  }

  std::unique_ptr<Transport> transport;
  KOLO_RETURN_IF_ERROR(createTransport(cfg, store, cfg.rank, cfg.size, &transport));
  out->config = cfg;
  out->store = std::move(store);
  out->transport = std::move(transport);
  return Status::ok();
}

std::string describeTransport(const Transport& t) {
  const Transport& base = controlTransport(t);
  if (&base == &t) return t.name();
  return std::string(t.name()) + " (over " + base.name() + ")";
}

}  // namespace kolo::bench
