// SPDX-License-Identifier: Apache-2.0
// The transport registry. The #if blocks below are the only build-configuration switches of the
// engine; everything else asks transportBuilt() or goes through createTransport().
#include "bootstrap/registry.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "kolo/build_config.h"
#include "transport/shm/shm_transport.h"

#if KOLO_HAVE_MPI
#include "transport/mpi/mpi_transport.h"
#endif
#if KOLO_HAVE_GLOO
#include "transport/gloo/gloo_transport.h"
#endif
#if KOLO_HAVE_CUDA
#include "ops/device/cuda_device.h"
#include "ops/device/host_staged_executor.h"
#endif
#if KOLO_HAVE_NCCL
#include "ops/device/auto_executor.h"
#include "ops/device/nccl_executor.h"
#endif
#include "ops/device_executor.h"

namespace kolo {
namespace {

GetEnvFn orDefault(const GetEnvFn& getenv) {
  if (getenv) return getenv;
  return [](const char* name) -> const char* { return std::getenv(name); };
}

bool present(const GetEnvFn& getenv, const char* name) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0';
}

// Reads an optional integer variable in [lo, hi]; *found says whether it was there.
Status readInt(const GetEnvFn& getenv, const char* name, long lo, long hi, int* out, bool* found) {
  *found = false;
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return Status::ok();
  errno = 0;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
    return Status(ErrorCode::kInvalidArgument,
                  std::string("invalid ") + name + "='" + v + "': expected an integer in [" +
                      std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  *out = static_cast<int>(x);
  *found = true;
  return Status::ok();
}

// Slurm's compressed tasks-per-node list, "2(x3),1": node i's task count. The whole list is
// validated, not just the part before node i.
Status slurmTasksOnNode(const std::string& name, const std::string& text, int node, int* out) {
  const Status bad(ErrorCode::kInvalidArgument,
                   "invalid " + name + "='" + text + "': expected a list like 2(x3),1");
  std::vector<std::pair<long, long>> runs;  // (tasks, nodes)
  size_t pos = 0;
  for (;;) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    char* stop = nullptr;
    errno = 0;
    const long tasks = std::strtol(item.c_str(), &stop, 10);
    if (errno != 0 || stop == item.c_str() || tasks < 1 || tasks > INT_MAX) return bad;
    long repeat = 1;
    if (*stop == '(') {
      if (stop[1] != 'x') return bad;
      char* rstop = nullptr;
      repeat = std::strtol(stop + 2, &rstop, 10);
      if (rstop == stop + 2 || repeat < 1 || repeat > INT_MAX || *rstop != ')' ||
          rstop[1] != '\0') {
        return bad;
      }
    } else if (*stop != '\0') {
      return bad;
    }
    runs.emplace_back(tasks, repeat);
    if (end == text.size()) break;
    pos = end + 1;
  }
  long first = 0;
  for (const auto& run : runs) {
    if (node < first + run.second) {
      *out = static_cast<int>(run.first);
      return Status::ok();
    }
    first += run.second;
  }
  return Status(ErrorCode::kInvalidArgument,
                name + "='" + text + "' has no entry for node " + std::to_string(node));
}

// Fills one launcher's rank/size/local rank/local size; *matched when its variables are there.
Status readLauncher(const GetEnvFn& getenv, const char* rankVar, const char* sizeVar,
                    const char* localRankVar, const char* localSizeVar, Config* cfg,
                    bool* matched) {
  int rank = -1, size = -1;
  bool hasRank = false, hasSize = false;
  KOLO_RETURN_IF_ERROR(readInt(getenv, sizeVar, 1, 1 << 24, &size, &hasSize));
  KOLO_RETURN_IF_ERROR(readInt(getenv, rankVar, 0, 1 << 24, &rank, &hasRank));
  *matched = hasRank && hasSize;
  if (!*matched) return Status::ok();
  KOLO_REQUIRE(rank < size, kInvalidArgument,
               std::string(rankVar) + "=" + std::to_string(rank) + " is not below " + sizeVar +
                   "=" + std::to_string(size));
  cfg->rank = rank;
  cfg->size = size;
  bool found = false;
  int value = -1;
  if (cfg->localRank < 0 && localRankVar != nullptr) {
    KOLO_RETURN_IF_ERROR(readInt(getenv, localRankVar, 0, 1 << 24, &value, &found));
    if (found) cfg->localRank = value;
  }
  if (cfg->localSize < 0 && localSizeVar != nullptr) {
    KOLO_RETURN_IF_ERROR(readInt(getenv, localSizeVar, 1, 1 << 24, &value, &found));
    if (found) cfg->localSize = value;
  }
  return Status::ok();
}

// "", "localhost", 127.x.x.x or ::1: a rendezvous on this host only.
bool isLoopbackAddress(const std::string& addr) {
  return addr.empty() || addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

}  // namespace

bool transportBuilt(TransportKind kind) {
  switch (kind) {
    case TransportKind::kLoopback:
      return true;
    case TransportKind::kMpi:
      return KOLO_HAVE_MPI != 0;
    case TransportKind::kGloo:
      return KOLO_HAVE_GLOO != 0;
    case TransportKind::kAuto:
      return KOLO_HAVE_MPI != 0 || KOLO_HAVE_GLOO != 0;
  }
  return false;
}

bool launchedByMpi(const GetEnvFn& getenvIn) {
  GetEnvFn getenv = orDefault(getenvIn);
  return present(getenv, "OMPI_COMM_WORLD_SIZE") || present(getenv, "PMI_SIZE") ||
         present(getenv, "PMIX_RANK");
}

TransportKind resolveTransportKind(const Config& cfg, const GetEnvFn& getenv) {
  if (cfg.transport != TransportKind::kAuto) return cfg.transport;
  if (transportBuilt(TransportKind::kMpi) && launchedByMpi(getenv)) return TransportKind::kMpi;
  if (transportBuilt(TransportKind::kGloo)) return TransportKind::kGloo;
  return transportBuilt(TransportKind::kMpi) ? TransportKind::kMpi : TransportKind::kAuto;
}

Status detectLaunchEnvironment(Config* cfg, const GetEnvFn& getenvIn) {
  if (cfg->rank >= 0) return Status::ok();  // KOLO_RANK given: the launcher is kolorun
  GetEnvFn getenv = orDefault(getenvIn);
  bool matched = false;
  KOLO_RETURN_IF_ERROR(readLauncher(getenv, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", cfg,
                                    &matched));
  if (matched) return Status::ok();
  KOLO_RETURN_IF_ERROR(readLauncher(getenv, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                                    "MPI_LOCALNRANKS", cfg, &matched));
  if (matched) return Status::ok();
  const char* ntasks = present(getenv, "SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  KOLO_RETURN_IF_ERROR(
      readLauncher(getenv, "SLURM_PROCID", ntasks, "SLURM_LOCALID", nullptr, cfg, &matched));
  if (!matched || cfg->localSize >= 0) return Status::ok();
  const char* perNode = present(getenv, "SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE"
                                                                     : "SLURM_TASKS_PER_NODE";
  int node = 0;
  bool hasNode = false;
  KOLO_RETURN_IF_ERROR(readInt(getenv, "SLURM_NODEID", 0, 1 << 24, &node, &hasNode));
  if (hasNode && present(getenv, perNode)) {
    int tasks = 0;
    KOLO_RETURN_IF_ERROR(slurmTasksOnNode(perNode, getenv(perNode), node, &tasks));
    cfg->localSize = tasks;
  }
  return Status::ok();
}

Status createTransport(const Config& cfg, std::shared_ptr<Store> store, int rank, int size,
                       std::unique_ptr<Transport>* out) {
  *out = nullptr;
  if (rank < 0) rank = cfg.rank;
  if (size < 0) size = cfg.size;
  const auto startTimeout =
      std::chrono::milliseconds(static_cast<int64_t>(cfg.startTimeoutSeconds * 1000.0));
  const TransportKind kind = resolveTransportKind(cfg);
  std::unique_ptr<Transport> t;
  switch (kind) {
    case TransportKind::kAuto:
      return Status(ErrorCode::kUnsupported,
                    "kolo was built without MPI and without Gloo: no multi-process transport");
    case TransportKind::kLoopback:
      return Status(ErrorCode::kUnsupported,
                    "KOLO_CONTROLLER=loopback: the loopback transport connects threads of one "
                    "process and is created by in-process tests, not from the environment");
    case TransportKind::kMpi: {
#if KOLO_HAVE_MPI
      KOLO_RETURN_IF_ERROR(createMpiTransport(&t, startTimeout));
      if ((rank >= 0 && rank != t->rank()) || (size >= 0 && size != t->size())) {
        return Status(ErrorCode::kInvalidArgument,
                      "rank " + std::to_string(rank) + " of " + std::to_string(size) +
                          " was requested but MPI says rank " + std::to_string(t->rank()) + " of " +
                          std::to_string(t->size()) +
                          " (MPI's world cannot change within a process: MPI cannot be "
                          "initialized again after MPI_Finalize; use KOLO_CONTROLLER=gloo to "
                          "re-init with another rank or size)");
      }
      break;
#else
      return Status(ErrorCode::kUnsupported,
                    "KOLO_CONTROLLER=mpi but kolo was built without MPI (KOLO_WITH_MPI)");
#endif
    }
    case TransportKind::kGloo: {
#if KOLO_HAVE_GLOO
      KOLO_REQUIRE(store != nullptr, kInvalidArgument,
                   "the Gloo transport needs a rendezvous store (KOLO_RENDEZVOUS_ADDR/PORT or "
                   "KOLO_RENDEZVOUS_DIR)");
      KOLO_REQUIRE(rank >= 0 && size >= 1 && rank < size, kInvalidArgument,
                   "the Gloo transport needs KOLO_RANK and KOLO_SIZE (got rank " +
                       std::to_string(rank) + " of " + std::to_string(size) + ")");
      // Loopback is enough when every rank is known to share this host; otherwise listen on
      // this host's name so that ranks elsewhere can connect (KOLO_GLOO_IFACE overrides both).
      std::string host;
      const bool singleHost = (cfg.localSize > 0 && cfg.localSize == size) ||
                              (cfg.localSize <= 0 && isLoopbackAddress(cfg.rendezvousAddr));
      if (cfg.glooIface.empty() && !singleHost) {
        host = cfg.hostname.empty() ? localHostname() : cfg.hostname;
      }
      KOLO_RETURN_IF_ERROR(
          createGlooTransport(store, rank, size, cfg.glooIface, host, startTimeout, &t));
      break;
#else
      return Status(ErrorCode::kUnsupported,
                    "KOLO_CONTROLLER=gloo but kolo was built without Gloo (KOLO_WITH_GLOO)");
#endif
    }
  }
  t->setTimeout(std::chrono::milliseconds(static_cast<int64_t>(cfg.timeoutSeconds * 1000.0)));
  KOLO_RETURN_IF_ERROR(applyShmConfig(cfg, &t));  // KOLO_SHM: shared memory on one host
  *out = std::move(t);
  return Status::ok();
}

bool deviceTransportBuilt() { return KOLO_HAVE_CUDA != 0; }

bool deviceTransportAvailable(std::string* why) {
#if KOLO_HAVE_CUDA
  return cudaDeviceVisible(why);
#else
  if (why != nullptr) *why = "kolo was built without CUDA/NCCL (KOLO_WITH_CUDA, KOLO_WITH_NCCL)";
  return false;
#endif
}

Status deviceStreamWait(void* event, int device, void* stream) {
#if KOLO_HAVE_CUDA
  return cudaStreamWaitFor(event, device, stream);
#else
  (void)event;
  (void)device;
  (void)stream;
  return Status(ErrorCode::kUnsupported, "kolo was built without CUDA/NCCL");
#endif
}

Status createDeviceExecutor(const Config& cfg, std::shared_ptr<Store> store,
                            std::unique_ptr<ops::DeviceExecutor>* out) {
  out->reset();
  // KOLO_GPU_OPERATIONS=host, or CUDA without NCCL: staged through pinned host memory over the
  // CPU transport (ops/device/host_staged_executor.h).
#if KOLO_HAVE_NCCL
  // auto: NCCL, or the host-staged path for a process set whose ranks share a GPU
  // (ops/device/auto_executor.h); nccl: NCCL always.
  if (cfg.gpuOperations == GpuOperations::kAuto) {
    return createAutoDeviceExecutor(cfg, std::move(store), out);
  }
  if (cfg.gpuOperations == GpuOperations::kNccl) {
    return createNcclExecutor(cfg, std::move(store), out);
  }
#endif
#if KOLO_HAVE_CUDA
  if (cfg.gpuOperations == GpuOperations::kNccl && !KOLO_HAVE_NCCL) {
    return Status(ErrorCode::kUnsupported,
                  "KOLO_GPU_OPERATIONS=nccl but kolo was built without NCCL (KOLO_WITH_NCCL)");
  }
  return createHostStagedExecutor(cfg, out);
#else
  (void)cfg;
  (void)store;
  return Status::ok();
#endif
}

}  // namespace kolo
