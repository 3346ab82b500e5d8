// SPDX-License-Identifier: Apache-2.0
#include "base/config.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace kolo {

std::string formatDouble(double v) {
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string localHostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

const char* toString(TransportKind k) {
  switch (k) {
    case TransportKind::kAuto: return "auto";
    case TransportKind::kLoopback: return "loopback";
    case TransportKind::kMpi: return "mpi";
    case TransportKind::kGloo: return "gloo";
  }
  return "unknown";
}

const char* toString(ShmMode m) {
  switch (m) {
    case ShmMode::kAuto: return "auto";
    case ShmMode::kOn: return "on";
    case ShmMode::kOff: return "off";
  }
  return "unknown";
}

const char* toString(GpuOperations g) {
  switch (g) {
    case GpuOperations::kAuto: return "auto";
    case GpuOperations::kNccl: return "nccl";
    case GpuOperations::kHost: return "host";
  }
  return "unknown";
}

namespace {

// Looks up KOLO_<name>, then each fallback (HOROVOD_<name> first).
class EnvReader {
 public:
  explicit EnvReader(const std::function<const char*(const char*)>& getenv) : getenv_(getenv) {}

  // Returns the raw value and the variable it came from, or nullptr.
  const char* find(const std::string& name, std::string* from,
                   std::initializer_list<const char*> extra = {}) const {
    std::vector<std::string> names = {"KOLO_" + name, "HOROVOD_" + name};
    for (const char* e : extra) names.push_back(e);
    for (const auto& n : names) {
      const char* v = getenv_(n.c_str());
      if (v != nullptr && *v != '\0') {
        *from = n;
        return v;
      }
    }
    return nullptr;
  }

  Status getInt(const std::string& name, int64_t lo, int64_t hi, int64_t* out,
                std::initializer_list<const char*> extra = {}) const {
    std::string from;
    const char* v = find(name, &from, extra);
    if (v == nullptr) return Status::ok();
    errno = 0;
    char* end = nullptr;
    long long x = std::strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
      return bad(from, v, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    *out = x;
    return Status::ok();
  }

  Status getInt(const std::string& name, int lo, int hi, int* out,
                std::initializer_list<const char*> extra = {}) const {
    int64_t x = *out;
    KOLO_RETURN_IF_ERROR(getInt(name, static_cast<int64_t>(lo), static_cast<int64_t>(hi), &x, extra));
    *out = static_cast<int>(x);
    return Status::ok();
  }

  Status getDouble(const std::string& name, double lo, double hi, double* out) const {
    std::string from;
    const char* v = find(name, &from);
    if (v == nullptr) return Status::ok();
    errno = 0;
    char* end = nullptr;
    double x = std::strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || !std::isfinite(x) || x < lo || x > hi) {
      std::ostringstream range;
      range << "a number in [" << lo << ", " << hi << "]";
      return bad(from, v, range.str());
    }
    *out = x;
    return Status::ok();
  }

  Status getBool(const std::string& name, bool* out,
                 std::initializer_list<const char*> extra = {}) const {
    std::string from;
    const char* v = find(name, &from, extra);
    if (v == nullptr) return Status::ok();
    std::string s(v);
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == "1" || s == "true" || s == "yes" || s == "on") {
      *out = true;
    } else if (s == "0" || s == "false" || s == "no" || s == "off") {
      *out = false;
    } else {
      return bad(from, v, "a boolean (1/0, true/false, yes/no, on/off)");
    }
    return Status::ok();
  }

  void getString(const std::string& name, std::string* out,
                 std::initializer_list<const char*> extra = {}) const {
    std::string from;
    if (const char* v = find(name, &from, extra)) *out = v;
  }

  Status getChoice(const std::string& name, std::initializer_list<const char*> choices,
                   std::string* out, std::initializer_list<const char*> extra = {}) const {
    std::string from;
    const char* v = find(name, &from, extra);
    if (v == nullptr) return Status::ok();
    std::string s(v);
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string list;
    for (const char* c : choices) {
      if (s == c) {
        *out = s;
        return Status::ok();
      }
      list += list.empty() ? c : std::string("|") + c;
    }
    return bad(from, v, "one of " + list);
  }

 private:
  static Status bad(const std::string& var, const char* value, const std::string& expected) {
    return Status(ErrorCode::kInvalidArgument,
                  "invalid " + var + "='" + value + "': expected " + expected);
  }
  const std::function<const char*(const char*)>& getenv_;
};

// Each collective accepts the names of the algorithms it has (ops/collectives.h).
Status readAlgorithm(const EnvReader& env, const std::string& op, ops::Algorithm* out) {
  std::string text = ops::toString(*out);
  const std::string var = op + "_ALGORITHM";
  if (op == "ALLREDUCE") {
    KOLO_RETURN_IF_ERROR(env.getChoice(
        var, {"auto", "ring", "recursive_doubling", "halving_doubling", "native"}, &text));
  } else if (op == "BROADCAST") {
    KOLO_RETURN_IF_ERROR(env.getChoice(var, {"auto", "ring", "tree", "native"}, &text));
  } else if (op == "ALLGATHER") {
    KOLO_RETURN_IF_ERROR(env.getChoice(var, {"auto", "ring", "bruck", "native"}, &text));
  } else {
    KOLO_RETURN_IF_ERROR(env.getChoice(var, {"auto", "ring", "native"}, &text));
  }
  ops::parseAlgorithm(text, out);
  return Status::ok();
}

}  // namespace

Status Config::fromEnvironment(Config* out,
                               const std::function<const char*(const char*)>& getenvFn) {
  std::function<const char*(const char*)> get =
      getenvFn ? getenvFn : [](const char* n) -> const char* { return std::getenv(n); };
  EnvReader env(get);
  Config c;

  std::string transport = "auto";
  KOLO_RETURN_IF_ERROR(
      env.getChoice("CONTROLLER", {"auto", "mpi", "gloo", "loopback"}, &transport));
  c.transport = transport == "mpi"        ? TransportKind::kMpi
                : transport == "gloo"     ? TransportKind::kGloo
                : transport == "loopback" ? TransportKind::kLoopback
                                          : TransportKind::kAuto;
  constexpr int kMaxRanks = 1 << 20;
  KOLO_RETURN_IF_ERROR(env.getInt("RANK", 0, kMaxRanks, &c.rank));
  KOLO_RETURN_IF_ERROR(env.getInt("SIZE", 1, kMaxRanks, &c.size));
  KOLO_RETURN_IF_ERROR(env.getInt("LOCAL_RANK", 0, kMaxRanks, &c.localRank));
  KOLO_RETURN_IF_ERROR(env.getInt("LOCAL_SIZE", 1, kMaxRanks, &c.localSize));
  KOLO_RETURN_IF_ERROR(env.getInt("CROSS_RANK", 0, kMaxRanks, &c.crossRank));
  KOLO_RETURN_IF_ERROR(env.getInt("CROSS_SIZE", 1, kMaxRanks, &c.crossSize));
  if (c.rank >= 0 && c.size > 0 && c.rank >= c.size) {
    return Status(ErrorCode::kInvalidArgument,
                  "KOLO_RANK=" + std::to_string(c.rank) + " is not below KOLO_SIZE=" +
                      std::to_string(c.size));
  }
  env.getString("HOSTNAME", &c.hostname);
  env.getString("RENDEZVOUS_ADDR", &c.rendezvousAddr, {"HOROVOD_GLOO_RENDEZVOUS_ADDR"});
  KOLO_RETURN_IF_ERROR(
      env.getInt("RENDEZVOUS_PORT", 1, 65535, &c.rendezvousPort, {"HOROVOD_GLOO_RENDEZVOUS_PORT"}));
  env.getString("RENDEZVOUS_DIR", &c.rendezvousDir);
  KOLO_RETURN_IF_ERROR(
      env.getInt("RENDEZVOUS_ROUND", int64_t{0}, int64_t{1} << 40, &c.rendezvousRound));
  env.getString("GLOO_IFACE", &c.glooIface);
  KOLO_RETURN_IF_ERROR(env.getDouble("START_TIMEOUT", 1, 86400, &c.startTimeoutSeconds));
  std::string shm = "auto";
  KOLO_RETURN_IF_ERROR(env.getChoice("SHM", {"auto", "on", "off"}, &shm));
  c.shm = shm == "on" ? ShmMode::kOn : shm == "off" ? ShmMode::kOff : ShmMode::kAuto;

  KOLO_RETURN_IF_ERROR(env.getInt("FUSION_THRESHOLD", int64_t{0}, int64_t{1} << 40,
                                  &c.fusionThresholdBytes));
  KOLO_RETURN_IF_ERROR(env.getInt("FUSION_DIRECT_BYTES", int64_t{0}, int64_t{1} << 40,
                                  &c.fusionDirectBytes));
  KOLO_RETURN_IF_ERROR(env.getDouble("CYCLE_TIME", 0, 60000, &c.cycleTimeMs));
  KOLO_RETURN_IF_ERROR(env.getBool("CALLER_ROUNDS", &c.callerRounds));
  KOLO_RETURN_IF_ERROR(env.getInt("CACHE_CAPACITY", 0, 1 << 20, &c.cacheCapacity));
  KOLO_RETURN_IF_ERROR(
      env.getInt("CONTROL_PIGGYBACK_BYTES", int64_t{0}, int64_t{1} << 20, &c.controlPiggybackBytes));
  bool stallDisable = false;
  KOLO_RETURN_IF_ERROR(env.getBool("STALL_CHECK_DISABLE", &stallDisable));
  c.stallCheck = !stallDisable;
  KOLO_RETURN_IF_ERROR(env.getDouble("STALL_CHECK_TIME_SECONDS", 0.001, 1e7, &c.stallCheckSeconds));
  KOLO_RETURN_IF_ERROR(
      env.getDouble("STALL_SHUTDOWN_TIME_SECONDS", 0, 1e7, &c.stallShutdownSeconds));
  KOLO_RETURN_IF_ERROR(env.getDouble("TIMEOUT_SECONDS", 0.1, 1e7, &c.timeoutSeconds));
  KOLO_RETURN_IF_ERROR(env.getDouble("HEARTBEAT_SECONDS", 0.001, 3600, &c.heartbeatSeconds));
  // Unset: auto for host tensors (ops/hierarchical.h), off for CUDA tensors; set: forced.
  std::string hierarchical;
  KOLO_RETURN_IF_ERROR(env.getChoice("HIERARCHICAL_ALLREDUCE",
                                     {"auto", "1", "true", "yes", "on", "0", "false", "no", "off"},
                                     &hierarchical));
  if (!hierarchical.empty() && hierarchical != "auto") {
    c.hierarchicalAllreduce = hierarchical == "1" || hierarchical == "true" ||
                              hierarchical == "yes" || hierarchical == "on";
    c.algorithms.hierarchicalAllreduce =
        c.hierarchicalAllreduce ? ops::Hierarchical::kOn : ops::Hierarchical::kOff;
  }
  std::string gpuOps = "auto";
  KOLO_RETURN_IF_ERROR(
      env.getChoice("GPU_OPERATIONS", {"auto", "nccl", "host", "mpi", "gloo"}, &gpuOps));
  c.gpuOperations = gpuOps == "nccl"   ? GpuOperations::kNccl
                    : gpuOps == "auto" ? GpuOperations::kAuto
                                       : GpuOperations::kHost;
  KOLO_RETURN_IF_ERROR(env.getBool("ASYNC_COMPLETION", &c.asyncCompletion,
                                   {"HOROVOD_ENABLE_ASYNC_COMPLETION"}));

  KOLO_RETURN_IF_ERROR(readAlgorithm(env, "ALLREDUCE", &c.algorithms.allreduce));
  KOLO_RETURN_IF_ERROR(readAlgorithm(env, "ALLGATHER", &c.algorithms.allgather));
  KOLO_RETURN_IF_ERROR(readAlgorithm(env, "BROADCAST", &c.algorithms.broadcast));
  KOLO_RETURN_IF_ERROR(readAlgorithm(env, "ALLTOALL", &c.algorithms.alltoall));
  KOLO_RETURN_IF_ERROR(readAlgorithm(env, "REDUCESCATTER", &c.algorithms.reducescatter));
  int64_t segment = static_cast<int64_t>(c.algorithms.segmentBytes);
  KOLO_RETURN_IF_ERROR(env.getInt("SEGMENT_BYTES", int64_t{4096}, int64_t{1} << 30, &segment));
  c.algorithms.segmentBytes = static_cast<size_t>(segment);
  int64_t hdMin = 0, ringMin = 0;
  KOLO_RETURN_IF_ERROR(env.getInt("ALLREDUCE_HD_MIN_BYTES", int64_t{1}, int64_t{1} << 40, &hdMin));
  KOLO_RETURN_IF_ERROR(
      env.getInt("ALLREDUCE_RING_MIN_BYTES", int64_t{1}, int64_t{1} << 40, &ringMin));
  if (hdMin != 0 && ringMin != 0 && hdMin > ringMin) {
    return Status(ErrorCode::kInvalidArgument,
                  "KOLO_ALLREDUCE_HD_MIN_BYTES=" + std::to_string(hdMin) +
                      " is above KOLO_ALLREDUCE_RING_MIN_BYTES=" + std::to_string(ringMin) +
                      ": halving-doubling would never run (set them equal to skip it)");
  }
  c.algorithms.allreduceCrossovers.hdMinBytes = static_cast<size_t>(hdMin);
  c.algorithms.allreduceCrossovers.ringMinBytes = static_cast<size_t>(ringMin);

  auto& at = c.autotune;
  KOLO_RETURN_IF_ERROR(env.getBool("AUTOTUNE", &at.enabled));
  env.getString("AUTOTUNE_LOG", &at.logPath);
  KOLO_RETURN_IF_ERROR(env.getInt("AUTOTUNE_WARMUP_SAMPLES", 0, 1 << 20, &at.warmupSamples));
  KOLO_RETURN_IF_ERROR(env.getInt("AUTOTUNE_STEPS_PER_SAMPLE", 1, 1 << 20, &at.stepsPerSample));
  KOLO_RETURN_IF_ERROR(env.getInt("AUTOTUNE_BAYES_OPT_MAX_SAMPLES", 1, 1 << 20, &at.maxSamples));
  KOLO_RETURN_IF_ERROR(env.getDouble("AUTOTUNE_GAUSSIAN_PROCESS_NOISE", 0, 1e6, &at.noise));
  std::string from;
  at.fusionThresholdSet = env.find("FUSION_THRESHOLD", &from) != nullptr;
  at.cycleTimeSet = env.find("CYCLE_TIME", &from) != nullptr;
  const bool algorithmSet = c.algorithms.allreduce != ops::Algorithm::kAuto;
  at.hdMinSet = hdMin != 0 || algorithmSet;
  at.ringMinSet = ringMin != 0 || algorithmSet;

  env.getString("TIMELINE", &c.timelinePath);
  // Horovod's HOROVOD_TIMELINE=DYNAMIC: the timeline is started later (start_timeline), no file
  // now. kolo's start_timeline needs nothing at init, so it is simply no path.
  if (c.timelinePath == "DYNAMIC") c.timelinePath.clear();
  KOLO_RETURN_IF_ERROR(env.getBool("TIMELINE_MARK_CYCLES", &c.timelineMarkCycles));
  KOLO_RETURN_IF_ERROR(env.getBool("TIMELINE_ALL_RANKS", &c.timelineAllRanks));
  KOLO_RETURN_IF_ERROR(env.getChoice(
      "LOG_LEVEL", {"trace", "debug", "info", "warning", "warn", "error", "fatal", "off"},
      &c.logLevel));
  *out = c;
  return Status::ok();
}

std::string Config::toString() const {
  std::ostringstream o;
  o << "KOLO_CONTROLLER=" << kolo::toString(transport) << "\n"
    << "KOLO_RANK=" << rank << "\nKOLO_SIZE=" << size << "\nKOLO_LOCAL_RANK=" << localRank
    << "\nKOLO_LOCAL_SIZE=" << localSize << "\nKOLO_CROSS_RANK=" << crossRank
    << "\nKOLO_CROSS_SIZE=" << crossSize << "\nKOLO_HOSTNAME=" << hostname
    << "\nKOLO_RENDEZVOUS_ADDR=" << rendezvousAddr << "\nKOLO_RENDEZVOUS_PORT=" << rendezvousPort
    << "\nKOLO_RENDEZVOUS_DIR=" << rendezvousDir << "\nKOLO_GLOO_IFACE=" << glooIface
    << "\nKOLO_START_TIMEOUT=" << startTimeoutSeconds << "\nKOLO_SHM=" << kolo::toString(shm);
  if (rendezvousRound >= 0) o << "\nKOLO_RENDEZVOUS_ROUND=" << rendezvousRound;  // unset: not printed
  o << "\nKOLO_FUSION_THRESHOLD=" << fusionThresholdBytes
    << "\nKOLO_FUSION_DIRECT_BYTES=" << fusionDirectBytes << "\nKOLO_CYCLE_TIME=" << cycleTimeMs
    << "\nKOLO_CALLER_ROUNDS=" << callerRounds
    << "\nKOLO_CACHE_CAPACITY=" << cacheCapacity
    << "\nKOLO_CONTROL_PIGGYBACK_BYTES=" << controlPiggybackBytes << "\nKOLO_STALL_CHECK_DISABLE=" << !stallCheck
    << "\nKOLO_STALL_CHECK_TIME_SECONDS=" << stallCheckSeconds
    << "\nKOLO_STALL_SHUTDOWN_TIME_SECONDS=" << stallShutdownSeconds
    << "\nKOLO_TIMEOUT_SECONDS=" << timeoutSeconds << "\nKOLO_HEARTBEAT_SECONDS=" << heartbeatSeconds
    << "\nKOLO_HIERARCHICAL_ALLREDUCE=" << ops::toString(algorithms.hierarchicalAllreduce)
    << "\nKOLO_ASYNC_COMPLETION=" << asyncCompletion
    << "\nKOLO_GPU_OPERATIONS=" << kolo::toString(gpuOperations)
    << "\nKOLO_ALLREDUCE_ALGORITHM=" << ops::toString(algorithms.allreduce)
    << "\nKOLO_ALLGATHER_ALGORITHM=" << ops::toString(algorithms.allgather)
    << "\nKOLO_BROADCAST_ALGORITHM=" << ops::toString(algorithms.broadcast)
    << "\nKOLO_ALLTOALL_ALGORITHM=" << ops::toString(algorithms.alltoall)
    << "\nKOLO_REDUCESCATTER_ALGORITHM=" << ops::toString(algorithms.reducescatter)
    << "\nKOLO_SEGMENT_BYTES=" << algorithms.segmentBytes;
  // Unset crossovers (0: the measured table) are left out: a printed config must parse again,
  // and the variables accept only a byte count >= 1.
  if (algorithms.allreduceCrossovers.hdMinBytes > 0) {
    o << "\nKOLO_ALLREDUCE_HD_MIN_BYTES=" << algorithms.allreduceCrossovers.hdMinBytes;
  }
  if (algorithms.allreduceCrossovers.ringMinBytes > 0) {
    o << "\nKOLO_ALLREDUCE_RING_MIN_BYTES=" << algorithms.allreduceCrossovers.ringMinBytes;
  }
  o << "\nKOLO_AUTOTUNE=" << autotune.enabled << "\nKOLO_AUTOTUNE_LOG=" << autotune.logPath
    << "\nKOLO_AUTOTUNE_WARMUP_SAMPLES=" << autotune.warmupSamples
    << "\nKOLO_AUTOTUNE_STEPS_PER_SAMPLE=" << autotune.stepsPerSample
    << "\nKOLO_AUTOTUNE_BAYES_OPT_MAX_SAMPLES=" << autotune.maxSamples
    << "\nKOLO_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=" << autotune.noise
    << "\nKOLO_TIMELINE=" << timelinePath << "\nKOLO_TIMELINE_MARK_CYCLES=" << timelineMarkCycles
    << "\nKOLO_TIMELINE_ALL_RANKS=" << timelineAllRanks << "\nKOLO_LOG_LEVEL=" << logLevel << "\n";
  return o.str();
}

}  // namespace kolo
