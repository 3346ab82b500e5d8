// SPDX-License-Identifier: Apache-2.0
// createRuntimeOver: a Runtime over a transport the test made (thread ranks over loopback, one
// NCCL rank), without a launcher, a store or a rendezvous. Test code (issue 13: test-only code
// lives under test/): the library has only Runtime::create (bootstrap() from the environment)
// and Runtime::createFrom (the engine over a filled BootstrapResult), which this fills.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/config.h"
#include "base/status.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/registry.h"
#include "bootstrap/topology.h"
#include "core/runtime.h"
#include "transport/transport.h"

namespace kolo {

// `config` as given except rank and size (the transport's); `hosts` gives every rank's host
// name for the topology (empty: every rank on "localhost"); the device executor as
// bootstrap() makes it (null in a build without CUDA); no store.
inline Status createRuntimeOver(const Config& config, std::unique_ptr<Transport> transport,
                                const std::vector<std::string>& hosts,
                                std::unique_ptr<Runtime>* out) {
  KOLO_REQUIRE(transport != nullptr, kInvalidArgument, "createRuntimeOver: the transport is null");
  BootstrapResult b;
  b.config = config;
  b.config.rank = transport->rank();
  b.config.size = transport->size();
  b.hosts = hosts;
  if (b.hosts.empty()) b.hosts.assign(transport->size(), "localhost");
  b.transport = std::move(transport);
  KOLO_RETURN_IF_ERROR(computeTopology(b.hosts, b.config.rank, &b.topology));
  KOLO_RETURN_IF_ERROR(createDeviceExecutor(b.config, b.store, &b.device));
  return Runtime::createFrom(std::move(b), out);
}

}  // namespace kolo
