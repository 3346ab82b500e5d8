// SPDX-License-Identifier: Apache-2.0
// Config: every KOLO_* knob, read once from the environment, validated and printable.
// Each KOLO_X is also accepted as HOROVOD_X (KOLO_ wins when both are set), so Horovod job
// scripts keep working. A bad value is an init error naming the variable and the value.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "base/algorithm.h"

namespace kolo {

enum class TransportKind { kAuto = 0, kLoopback = 1, kMpi = 2, kGloo = 3 };
const char* toString(TransportKind k);

// KOLO_SHM: put a shared-memory transport over the base one when every rank is on this host.
enum class ShmMode { kAuto = 0, kOn = 1, kOff = 2 };
const char* toString(ShmMode m);

// KOLO_GPU_OPERATIONS: how CUDA tensors are reduced. kNccl: on the device over NCCL; kHost: staged
// through pinned host memory and run over the CPU transport (ops/device/host_staged_executor.h);
// kAuto: NCCL when built.
enum class GpuOperations { kAuto = 0, kNccl = 1, kHost = 2 };
const char* toString(GpuOperations g);

struct Config {
  // --- who am I (set by kolorun, mpirun or srun; -1 = unknown) --------------------------------
  TransportKind transport = TransportKind::kAuto;  // KOLO_CONTROLLER=auto|mpi|gloo
  int rank = -1, size = -1;                        // KOLO_RANK, KOLO_SIZE
  int localRank = -1, localSize = -1;              // KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE
  int crossRank = -1, crossSize = -1;              // KOLO_CROSS_RANK, KOLO_CROSS_SIZE
  std::string hostname;                            // KOLO_HOSTNAME (default: gethostname)
  std::string rendezvousAddr;                      // KOLO_RENDEZVOUS_ADDR (TCP store)
  int rendezvousPort = 0;                          // KOLO_RENDEZVOUS_PORT
  std::string rendezvousDir;                       // KOLO_RENDEZVOUS_DIR (file store)
  int64_t rendezvousRound = -1;  // KOLO_RENDEZVOUS_ROUND: this init's rendezvous round, which
                                 //   keeps its store keys apart from other rounds' (-1 = the
                                 //   number of earlier inits in this process; bootstrap/)
  std::string glooIface;                           // KOLO_GLOO_IFACE (network interface)
  double startTimeoutSeconds = 120;                // KOLO_START_TIMEOUT
  ShmMode shm = ShmMode::kAuto;                    // KOLO_SHM=auto|on|off

  // --- the coordinator ---------------------------------------------------------------------
  int64_t fusionThresholdBytes = 128ll << 20;  // KOLO_FUSION_THRESHOLD (0 = no fusion)
  int64_t fusionDirectBytes = 1ll << 20;       // KOLO_FUSION_DIRECT_BYTES: tensors this big skip
                                               //   the fusion buffer (0 = fuse whatever fits)
  double cycleTimeMs = 1.0;                    // KOLO_CYCLE_TIME
  bool callerRounds = true;                    // KOLO_CALLER_ROUNDS: a thread waiting for its
                                               //   op runs the rounds itself (core/coordinator.h)
  int cacheCapacity = 1024;                    // KOLO_CACHE_CAPACITY (0 = off)
  int64_t controlPiggybackBytes = 4096;        // KOLO_CONTROL_PIGGYBACK_BYTES: small cached
                                               //   allreduces ride in the control round (0 = off)
  bool stallCheck = true;                      // KOLO_STALL_CHECK_DISABLE=1 turns it off
  double stallCheckSeconds = 60;               // KOLO_STALL_CHECK_TIME_SECONDS
  double stallShutdownSeconds = 1800;  // KOLO_STALL_SHUTDOWN_TIME_SECONDS: fail stalled ops (0 = never)
  double timeoutSeconds = 30;                  // KOLO_TIMEOUT_SECONDS: a silent peer is lost
  double heartbeatSeconds = 1.0;               // KOLO_HEARTBEAT_SECONDS: idle round cadence
  bool hierarchicalAllreduce = false;          // KOLO_HIERARCHICAL_ALLREDUCE=1 (CUDA tensors;
                                               //   host tensors: algorithms.hierarchicalAllreduce)
  bool asyncCompletion = false;                // KOLO_ASYNC_COMPLETION (HOROVOD_ENABLE_ASYNC_
                                               //   COMPLETION): CUDA ops complete when queued
  GpuOperations gpuOperations = GpuOperations::kAuto;  // KOLO_GPU_OPERATIONS=auto|nccl|host
                                               //   (HOROVOD_GPU_OPERATIONS=NCCL|MPI|GLOO; MPI
                                               //   and GLOO mean host)

  // --- algorithms ---------------------------------------------------------------------------
  ops::AlgorithmConfig algorithms;  // KOLO_{ALLREDUCE,ALLGATHER,BROADCAST,ALLTOALL,
                                    //   REDUCESCATTER}_ALGORITHM, KOLO_SEGMENT_BYTES,
                                    //   KOLO_ALLREDUCE_{HD,RING}_MIN_BYTES (0 = measured table)

  // --- autotune (core/autotune.h): rank 0 searches, every rank applies at the same round ------
  struct Autotune {
    bool enabled = false;     // KOLO_AUTOTUNE
    std::string logPath;      // KOLO_AUTOTUNE_LOG: CSV, one line per sample (rank 0)
    int warmupSamples = 3;    // KOLO_AUTOTUNE_WARMUP_SAMPLES: discarded samples at the start
    int stepsPerSample = 10;  // KOLO_AUTOTUNE_STEPS_PER_SAMPLE
    int maxSamples = 20;      // KOLO_AUTOTUNE_BAYES_OPT_MAX_SAMPLES: scored samples, then fixed
    double noise = 0.8;       // KOLO_AUTOTUNE_GAUSSIAN_PROCESS_NOISE (accepted, unused: docs/autotune.md)
    // Knobs the user set explicitly: fixed, never tuned (as in Horovod). The crossovers are also
    // fixed when KOLO_ALLREDUCE_ALGORITHM names an algorithm (they are not used then).
    bool fusionThresholdSet = false, cycleTimeSet = false;
    bool hdMinSet = false, ringMinSet = false;
  } autotune;

  // --- timeline and logging -------------------------------------------------------------------
  std::string timelinePath;         // KOLO_TIMELINE ("DYNAMIC", as Horovod: none until started)
  bool timelineMarkCycles = false;  // KOLO_TIMELINE_MARK_CYCLES
  bool timelineAllRanks = false;    // KOLO_TIMELINE_ALL_RANKS
  std::string logLevel = "warning"; // KOLO_LOG_LEVEL: trace|debug|info|warning|error|off

  // Reads every knob through `getenv` (defaults to ::getenv). Unknown KOLO_* names are ignored.
  static Status fromEnvironment(Config* out,
                                const std::function<const char*(const char*)>& getenv = {});
  // One "KOLO_X=value" line per knob (logged at debug level on rank 0).
  std::string toString() const;
};

// This machine's own host name (gethostname), or "localhost" when it cannot be read: the default
// of Config::hostname, and what names a machine where KOLO_HOSTNAME may not (one machine's GPUs).
std::string localHostname();

// The shortest text that reads back as the same double ("0.5", "1", not "0.500000"): how
// messages show a knob's or a scale factor's value.
std::string formatDouble(double v);

}  // namespace kolo
