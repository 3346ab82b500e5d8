// SPDX-License-Identifier: Apache-2.0
// The init path, step by step (bootstrap.h): launcher -> store -> round -> host names and
// job-wide settings -> transport -> topology -> device executor.
#include "bootstrap/bootstrap.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "bootstrap/job_settings.h"
#include "bootstrap/registry.h"
#include "transport/loopback/loopback_transport.h"
#include "transport/shm/shm_transport.h"

namespace kolo {
namespace {

// The newest round any rank of this store started, outside every round's key space.
constexpr const char* kRoundKey = "kolo/round";

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

// Refuses a round older than the newest one recorded in the store, then records ours. The read
// and the write are not atomic: a stale rank racing the first rank of a new round may pass here,
// and then times out in its own round's keys instead (it still never joins the new round).
Status enterRound(Store& root, int64_t round, int rank) {
  bool exists = false;
  KOLO_RETURN_IF_ERROR(root.check(kRoundKey, &exists));
  int64_t newest = -1;
  if (exists) {
    std::vector<uint8_t> v;
    KOLO_RETURN_IF_ERROR(root.get(kRoundKey, &v, std::chrono::seconds(5)));
    const std::string text(v.begin(), v.end());
    char* end = nullptr;
    newest = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0') {
      return Status(ErrorCode::kInvalidArgument, std::string("the store's ") + kRoundKey +
                                                     " holds '" + text + "', not a round number");
    }
  }
  if (newest > round) {
    return Status(ErrorCode::kAborted,
                  "rank " + std::to_string(rank) + " starts rendezvous round " +
                      std::to_string(round) + " but the job is already at round " +
                      std::to_string(newest) +
                      ": a worker of an old round cannot join a new one (KOLO_RENDEZVOUS_ROUND; "
                      "unset, it counts this process's earlier inits)");
  }
  if (newest < round) {
    const std::string text = std::to_string(round);
    KOLO_RETURN_IF_ERROR(root.set(kRoundKey, std::vector<uint8_t>(text.begin(), text.end())));
  }
  return Status::ok();
}

// Launcher variables, defaults and the checks that need no other rank.
Status resolveConfig(const Config& in, Config* cfg) {
  *cfg = in;
  KOLO_RETURN_IF_ERROR(detectLaunchEnvironment(cfg));
  if (cfg->hostname.empty()) cfg->hostname = localHostname();
  if (cfg->size < 0) {  // started without a launcher: a job of one
    cfg->size = 1;
    cfg->rank = 0;
  }
  if (cfg->rank < 0) {
    return Status(ErrorCode::kInvalidArgument,
                  "KOLO_SIZE=" + std::to_string(cfg->size) + " is set but KOLO_RANK is not");
  }
  if (cfg->heartbeatSeconds * 2 > cfg->timeoutSeconds) {
    return Status(ErrorCode::kInvalidArgument,
                  "KOLO_HEARTBEAT_SECONDS (" + formatDouble(cfg->heartbeatSeconds) +
                      " s; default 1) must be at most half of KOLO_TIMEOUT_SECONDS (" +
                      formatDouble(cfg->timeoutSeconds) + " s): set KOLO_HEARTBEAT_SECONDS=" +
                      formatDouble(cfg->timeoutSeconds / 2) + " or less, or a longer timeout");
  }
  // A rank with work pending sleeps up to a cycle between its rounds, and a peer waiting in a
  // round for it would count it lost.
  if (cfg->cycleTimeMs / 1000.0 * 2 > cfg->timeoutSeconds) {
    return Status(ErrorCode::kInvalidArgument,
                  "KOLO_CYCLE_TIME (" + formatDouble(cfg->cycleTimeMs) +
                      " ms) must be at most half of KOLO_TIMEOUT_SECONDS (" +
                      formatDouble(cfg->timeoutSeconds) + " s)");
  }
  return Status::ok();
}

// The store the configuration names (null when it names none).
Status openStore(const Config& cfg, std::shared_ptr<Store>* store) {
  store->reset();
  if (!cfg.rendezvousAddr.empty()) {
    if (cfg.rendezvousPort <= 0) {
      return Status(ErrorCode::kInvalidArgument,
                    "KOLO_RENDEZVOUS_ADDR is set but KOLO_RENDEZVOUS_PORT is not");
    }
    return makeTcpStore(cfg.rendezvousAddr, cfg.rendezvousPort, millis(cfg.startTimeoutSeconds),
                        store);
  }
  if (!cfg.rendezvousDir.empty()) return makeFileStore(cfg.rendezvousDir, store);
  return Status::ok();
}

// Topology and device executor, the last steps.
Status finish(BootstrapResult* b) {
  KOLO_RETURN_IF_ERROR(computeTopology(b->hosts, b->transport->rank(), &b->topology));
  return createDeviceExecutor(b->config, b->store, &b->device);
}

}  // namespace

std::string roundPrefix(int64_t round) {
  return round == 0 ? std::string() : "round" + std::to_string(round) + "/";
}

Status bootstrap(const Config& config, int64_t initCount, BootstrapResult* out) {
  BootstrapResult b;
  KOLO_RETURN_IF_ERROR(resolveConfig(config, &b.config));
  const Config& cfg = b.config;
  b.round = cfg.rendezvousRound >= 0 ? cfg.rendezvousRound : initCount;
  if (cfg.size == 1 && cfg.transport != TransportKind::kMpi &&
      cfg.transport != TransportKind::kGloo) {
    std::vector<std::unique_ptr<Transport>> group;
    KOLO_RETURN_IF_ERROR(createLoopbackGroup(1, &group));
    b.transport = std::move(group[0]);
    b.hosts = {cfg.hostname};
  } else {
    // The job-wide settings are compared in the host-name exchange, before anything they
    // choose (the shared-memory transport, the first collective) runs (job_settings.h).
    const std::string settings = settingsText(jobSettings(cfg));
    std::shared_ptr<Store> root;
    KOLO_RETURN_IF_ERROR(openStore(cfg, &root));
    if (root) {
      KOLO_RETURN_IF_ERROR(enterRound(*root, b.round, cfg.rank));
      b.store = b.round == 0 ? root : makePrefixStore(root, roundPrefix(b.round));
      // Publishing "host/<rank>" also tells kolorun this rank connected.
      KOLO_RETURN_IF_ERROR(exchangeHostsAndSettings(*b.store, cfg.rank, cfg.size, cfg.hostname,
                                                    settings, millis(cfg.startTimeoutSeconds),
                                                    &b.hosts));
      KOLO_RETURN_IF_ERROR(createTransport(cfg, b.store, cfg.rank, cfg.size, &b.transport));
    } else {
      // No store (a plain MPI job): the exchange runs over the base transport, so shared
      // memory goes over it only once the ranks agree on KOLO_SHM.
      Config base = cfg;
      base.shm = ShmMode::kOff;
      KOLO_RETURN_IF_ERROR(createTransport(base, nullptr, cfg.rank, cfg.size, &b.transport));
      KOLO_RETURN_IF_ERROR(
          exchangeHostsAndSettings(*b.transport, cfg.hostname, settings, &b.hosts));
      KOLO_RETURN_IF_ERROR(applyShmConfig(cfg, &b.transport));
    }
  }
  KOLO_RETURN_IF_ERROR(finish(&b));
  *out = std::move(b);
  return Status::ok();
}

}  // namespace kolo
