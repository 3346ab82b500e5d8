// Choosing between a transport's native collective and our own ring / p2p algorithm.
//
// The rule, in order:
//  1. kRing in the config: always ours.
//  2. No native capability on this transport (loopback has none): ours, whatever the config
//     says -- a job configured for "native" keeps running on a transport that cannot, and
//     `usedName` tells what actually ran.
//  3. kNative: the native one.
//  4. kAuto: device-memory transports (NCCL) always use their native (our reductions run on the
//     host). Otherwise the measured preferences: Open MPI's allreduce collapses for large
//     messages, so "mpi" allreduces of >= 64 KiB take the ring and smaller ones stay native
//     (one latency-optimized call beats 2(n-1) ring steps). Gloo's natives lose to the ring from
//     4 KiB on, for every collective that has a ring form. Anything else with the capability:
//     native.
// The chosen name is the timeline activity: "RING_ALLREDUCE", "<TRANSPORT>_ALLREDUCE", ...
#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

#include "ops/collectives.h"
#include "ops/ring_internal.h"

namespace kolo::ops {

const char* toString(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kNative:
      return "native";
  }
  return "unknown-algorithm";
}

bool parseAlgorithm(const std::string& text, Algorithm* out) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "auto") {
    *out = Algorithm::kAuto;
  } else if (lower == "ring") {
    *out = Algorithm::kRing;
  } else if (lower == "native") {
    *out = Algorithm::kNative;
  } else {
    return false;
  }
  return true;
}

std::vector<size_t> evenSplit(size_t rows, int size) {
  std::vector<size_t> out(size > 0 ? static_cast<size_t>(size) : 0);
  for (int i = 0; i < size; ++i) {
    size_t begin = 0;
    size_t end = 0;
    chunkRange(rows, size, i, &begin, &end);
    out[static_cast<size_t>(i)] = end - begin;
  }
  return out;
}

void chunkRange(size_t count, int parts, int i, size_t* begin, size_t* end) {
  if (parts <= 0 || i < 0 || i >= parts) {
    *begin = *end = 0;
    return;
  }
  const size_t p = static_cast<size_t>(parts);
  const size_t idx = static_cast<size_t>(i);
  const size_t base = count / p;
  const size_t extra = count % p;
  *begin = idx * base + std::min(idx, extra);
  *end = *begin + base + (idx < extra ? 1 : 0);
}

namespace {

constexpr size_t kMpiRingMinBytes = 64 * 1024;
constexpr size_t kGlooRingMinBytes = 4 * 1024;

enum class Collective { kAllreduce, kOther };

bool useNative(const Transport& t, Algorithm configured, bool capable, Collective which,
               size_t bytes) {
  if (configured == Algorithm::kRing || !capable) return false;
  if (configured == Algorithm::kNative) return true;
  if (t.capabilities().deviceMemory) return true;
  const char* name = t.name();
  if (std::strcmp(name, "mpi") == 0) {
    return which != Collective::kAllreduce || bytes < kMpiRingMinBytes;
  }
  if (std::strcmp(name, "gloo") == 0) return bytes < kGlooRingMinBytes;
  return true;
}

void setName(std::string* usedName, const std::string& value) {
  if (usedName != nullptr) *usedName = value;
}

std::string nativeName(const Transport& t, const char* op) {
  std::string n(t.name());
  std::transform(n.begin(), n.end(), n.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return n + "_" + op;
}

size_t sum(const std::vector<size_t>& v) {
  size_t s = 0;
  for (size_t x : v) s += x;
  return s;
}

}  // namespace

std::string plannedStep(const Transport& t, const AlgorithmConfig& cfg, OpType op, size_t bytes) {
  const Capabilities caps = t.capabilities();
  switch (op) {
    case OpType::kAllreduce:
      return useNative(t, cfg.allreduce, caps.nativeAllreduce, Collective::kAllreduce, bytes)
                 ? nativeName(t, "ALLREDUCE")
                 : "RING_ALLREDUCE";
    case OpType::kAllgather:
      return useNative(t, cfg.allgather, caps.nativeAllgatherv, Collective::kOther, bytes)
                 ? nativeName(t, "ALLGATHER")
                 : "RING_ALLGATHER";
    case OpType::kBroadcast:
      if (useNative(t, cfg.broadcast, caps.nativeBroadcast, Collective::kOther, bytes)) {
        return nativeName(t, "BROADCAST");
      }
      return bytes < internal::kTreeBroadcastMaxBytes ? "TREE_BROADCAST" : "PIPELINED_BROADCAST";
    case OpType::kAlltoall:
      return useNative(t, cfg.alltoall, caps.nativeAlltoallv, Collective::kOther, bytes)
                 ? nativeName(t, "ALLTOALL")
                 : "P2P_ALLTOALL";
    case OpType::kReducescatter:
      return useNative(t, cfg.reducescatter, caps.nativeReducescatter, Collective::kOther, bytes)
                 ? nativeName(t, "REDUCESCATTER")
                 : "RING_REDUCESCATTER";
    default:
      return std::string(toString(op));
  }
}

Status allreduce(Transport& t, const AlgorithmConfig& cfg, void* data, size_t count, DataType dtype,
                 ReduceOp op, std::string* usedName) {
  const size_t bytes = count * sizeOf(dtype);
  if (useNative(t, cfg.allreduce, t.capabilities().nativeAllreduce, Collective::kAllreduce,
                bytes)) {
    setName(usedName, nativeName(t, "ALLREDUCE"));
    return t.allreduce(data, count, dtype, op);
  }
  setName(usedName, "RING_ALLREDUCE");
  return ringAllreduce(t, data, count, dtype, op, cfg.segmentBytes);
}

Status allgatherv(Transport& t, const AlgorithmConfig& cfg, const void* send, size_t sendBytes,
                  void* recv, const std::vector<size_t>& recvBytes, std::string* usedName) {
  if (useNative(t, cfg.allgather, t.capabilities().nativeAllgatherv, Collective::kOther,
                sum(recvBytes))) {
    setName(usedName, nativeName(t, "ALLGATHER"));
    return t.allgatherv(send, sendBytes, recv, recvBytes);
  }
  setName(usedName, "RING_ALLGATHER");
  return ringAllgatherv(t, send, sendBytes, recv, recvBytes);
}

Status broadcast(Transport& t, const AlgorithmConfig& cfg, void* data, size_t bytes, int root,
                 std::string* usedName) {
  if (useNative(t, cfg.broadcast, t.capabilities().nativeBroadcast, Collective::kOther, bytes)) {
    setName(usedName, nativeName(t, "BROADCAST"));
    return t.broadcast(data, bytes, root);
  }
  setName(usedName,
          bytes < internal::kTreeBroadcastMaxBytes ? "TREE_BROADCAST" : "PIPELINED_BROADCAST");
  return p2pBroadcast(t, data, bytes, root, cfg.segmentBytes);
}

Status alltoallv(Transport& t, const AlgorithmConfig& cfg, const void* send,
                 const std::vector<size_t>& sendBytes, void* recv,
                 const std::vector<size_t>& recvBytes, std::string* usedName) {
  if (useNative(t, cfg.alltoall, t.capabilities().nativeAlltoallv, Collective::kOther,
                sum(sendBytes))) {
    setName(usedName, nativeName(t, "ALLTOALL"));
    return t.alltoallv(send, sendBytes, recv, recvBytes);
  }
  setName(usedName, "P2P_ALLTOALL");
  return p2pAlltoallv(t, send, sendBytes, recv, recvBytes);
}

Status reducescatter(Transport& t, const AlgorithmConfig& cfg, const void* send, void* recv,
                     const std::vector<size_t>& recvCounts, DataType dtype, ReduceOp op,
                     std::string* usedName) {
  const size_t bytes = sum(recvCounts) * sizeOf(dtype);
  if (useNative(t, cfg.reducescatter, t.capabilities().nativeReducescatter, Collective::kOther,
                bytes)) {
    setName(usedName, nativeName(t, "REDUCESCATTER"));
    return t.reducescatter(send, recv, recvCounts, dtype, op);
  }
  setName(usedName, "RING_REDUCESCATTER");
  return ringReducescatter(t, send, recv, recvCounts, dtype, op, cfg.segmentBytes);
}

}  // namespace kolo::ops
