// SPDX-License-Identifier: Apache-2.0
// Choosing the algorithm of each collective: the transport's native one, or one of kolo's own
// over point-to-point (ring, recursive doubling, halving-doubling, binomial tree, Bruck).
//
// The rule, in order:
//  1. A configured algorithm that does not apply to the collective counts as kAuto (config.cc
//     only accepts applicable names; this covers code that sets one value for every op).
//  2. kNative: the native one if the transport has it; otherwise (loopback has none) our choice
//     by size, as for kAuto -- a job configured for "native" keeps running, and `usedName` tells
//     what actually ran.
//  3. One of ours named (ring, recursive_doubling, ...): that one, whatever the size.
//  4. kAuto: device-memory transports (NCCL) always use their native (our reductions run on the
//     host). Then the measured preferences for natives: Open MPI's allreduce collapses for large
//     messages, so "mpi" allreduces of >= 64 KiB are ours and smaller ones stay native. Gloo's
//     natives are never taken by themselves: since the Gloo transport's point-to-point runs on
//     kolo's own sockets (transport/tcp), ours are ahead of Gloo's at every size and collective
//     measured, or level within this machine's scatter (allreduce of 4-16 MiB at 4 ranks), and
//     a failure in ours names the lost rank directly. Anything else with the capability:
//     native (shm). Without a native, our choice by size and rank count: the table
//     kAllreduceTable below and the broadcast / allgather limits, measured with kolo-bench over
//     TCP (docs/algorithms.md). The allreduce crossovers of that table can be replaced
//     (AlgorithmConfig::allreduceCrossovers: KOLO_ALLREDUCE_HD_MIN_BYTES,
//     KOLO_ALLREDUCE_RING_MIN_BYTES, or the autotuner while it searches).
//     Broadcast's large shape under auto (kRing here) is the chain or scatter-allgather by
//     p2pBroadcastShape (broadcast.cc: scatter-allgather from 8 ranks while a rank's block is
//     smaller than a chain segment); a named "ring" stays the chain at every size.
// controlAllreduce / controlBroadcast (the coordinator's round) skip this rule: always ours,
// recursive doubling and the binomial tree (scatter-allgather for a long response list from 4
// ranks, the chain at 2 and 3).
// The chosen name is the timeline activity: "RING_ALLREDUCE", "<TRANSPORT>_ALLREDUCE", ...
#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

#include "ops/collectives.h"
#include "ops/ring_internal.h"

namespace kolo::ops {

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

namespace {

constexpr size_t kMpiRingMinBytes = 64 * 1024;

// Our allreduce by size, for rank counts up to maxRanks (first matching row): recursive doubling
// below rdBelow bytes, halving-doubling below hdBelow, the ring from there on.
struct AllreduceRow {
  int maxRanks;
  size_t rdBelow;
  size_t hdBelow;
};
// kolo-bench over TCP on loopback (kolo's own sockets, bench/RESULTS.md): at 2 ranks
// recursive doubling was fastest through 256 KiB, halving-doubling at 1 MiB, halving-doubling
// and the ring within a few percent of each other from 4 MiB on; at 4 ranks recursive doubling
// through 32 KiB, halving-doubling from 64 KiB, the ring or halving-doubling from 16 MiB. Past 4
// ranks (not measured: 2 cores) the alpha-beta model with the measured alpha (~25 us a step)
// and beta (~1 ns/B) puts the recursive-doubling / halving-doubling crossover at 50-100 KiB for
// 4-16 ranks: 64 KiB.
constexpr AllreduceRow kAllreduceTable[] = {
    {2, 512 * 1024, 8 * 1024 * 1024},
    {1 << 30, 64 * 1024, 8 * 1024 * 1024},
};
// Allgathers whose gathered total is below this take Bruck, larger ones the ring (measured: Bruck
// ahead or level through 256 KiB at np 3 and 4; the two are one step alike at np 2).
constexpr size_t kBruckMaxBytes = 512 * 1024;

bool nativeCapable(const Capabilities& caps, OpType op) {
  switch (op) {
    case OpType::kAllreduce:
      return caps.nativeAllreduce;
    case OpType::kAllgather:
      return caps.nativeAllgatherv;
    case OpType::kBroadcast:
      return caps.nativeBroadcast;
    case OpType::kAlltoall:
      return caps.nativeAlltoallv;
    case OpType::kReducescatter:
      return caps.nativeReducescatter;
    default:
      return false;
  }
}

// kAuto with a native available: whether to take it.
bool preferNative(const Transport& t, OpType op, size_t bytes) {
  if (t.capabilities().deviceMemory) return true;
  const char* name = t.name();
  if (std::strcmp(name, "mpi") == 0) return op != OpType::kAllreduce || bytes < kMpiRingMinBytes;
  if (std::strcmp(name, "gloo") == 0) return false;
  return true;
}

// Ours, by size and rank count (allreduce: the crossovers, configured or from the table).
Algorithm ourChoice(const AlgorithmConfig& cfg, OpType op, int ranks, size_t bytes) {
  switch (op) {
    case OpType::kAllreduce: {
      const AllreduceCrossovers c = effectiveCrossovers(cfg.allreduceCrossovers, ranks);
      if (bytes >= c.ringMinBytes) return Algorithm::kRing;
      if (bytes >= c.hdMinBytes) return Algorithm::kHalvingDoubling;
      return Algorithm::kRecursiveDoubling;
    }
    case OpType::kAllgather:
      return bytes < kBruckMaxBytes ? Algorithm::kBruck : Algorithm::kRing;
    case OpType::kBroadcast:
      return bytes < internal::kTreeBroadcastMaxBytes ? Algorithm::kTree : Algorithm::kRing;
    default:
      return Algorithm::kRing;
  }
}

Algorithm configured(const AlgorithmConfig& cfg, OpType op) {
  switch (op) {
    case OpType::kAllreduce:
      return cfg.allreduce;
    case OpType::kAllgather:
      return cfg.allgather;
    case OpType::kBroadcast:
      return cfg.broadcast;
    case OpType::kAlltoall:
      return cfg.alltoall;
    case OpType::kReducescatter:
      return cfg.reducescatter;
    default:
      return Algorithm::kAuto;
  }
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

// The timeline name of `a` (already resolved: not kAuto) running `op` (broadcast, whose name
// depends on more than `a`: broadcastStepName).
std::string stepName(const Transport& t, OpType op, Algorithm a) {
  switch (op) {
    case OpType::kAllreduce:
      if (a == Algorithm::kNative) return nativeName(t, "ALLREDUCE");
      if (a == Algorithm::kRecursiveDoubling) return "RECURSIVE_DOUBLING_ALLREDUCE";
      if (a == Algorithm::kHalvingDoubling) return "HALVING_DOUBLING_ALLREDUCE";
      return "RING_ALLREDUCE";
    case OpType::kAllgather:
      if (a == Algorithm::kNative) return nativeName(t, "ALLGATHER");
      return a == Algorithm::kBruck ? "BRUCK_ALLGATHER" : "RING_ALLGATHER";
    case OpType::kAlltoall:
      return a == Algorithm::kNative ? nativeName(t, "ALLTOALL") : "P2P_ALLTOALL";
    case OpType::kReducescatter:
      return a == Algorithm::kNative ? nativeName(t, "REDUCESCATTER") : "RING_REDUCESCATTER";
    default:
      return std::string(toString(op));
  }
}

// Which of our broadcast shapes runs for `a` (resolved: kTree or kRing): a named "ring" is the
// chain at every size; kRing reached by auto (or native without one) is the large shape that
// p2pBroadcast picks (bytes >= 64 KiB here, so the chain or scatter-allgather).
BroadcastShape broadcastShape(const Transport& t, const AlgorithmConfig& cfg, Algorithm a,
                              size_t bytes) {
  if (a == Algorithm::kTree) return BroadcastShape::kTree;
  if (configured(cfg, OpType::kBroadcast) == Algorithm::kRing) return BroadcastShape::kChain;
  const BroadcastShape s = p2pBroadcastShape(t.size(), bytes, cfg.segmentBytes);
  return s == BroadcastShape::kTree ? BroadcastShape::kChain : s;
}

std::string broadcastStepName(const Transport& t, const AlgorithmConfig& cfg, Algorithm a,
                              size_t bytes) {
  if (a == Algorithm::kNative) return nativeName(t, "BROADCAST");
  switch (broadcastShape(t, cfg, a, bytes)) {
    case BroadcastShape::kTree:
      return "TREE_BROADCAST";
    case BroadcastShape::kScatterAllgather:
      return "SCATTER_ALLGATHER_BROADCAST";
    default:
      return "PIPELINED_BROADCAST";
  }
}

size_t sum(const std::vector<size_t>& v) {
  size_t s = 0;
  for (size_t x : v) s += x;
  return s;
}

}  // namespace

AllreduceCrossovers effectiveCrossovers(const AllreduceCrossovers& c, int ranks) {
  AllreduceCrossovers out = c;
  for (const AllreduceRow& row : kAllreduceTable) {
    if (ranks > row.maxRanks) continue;
    if (out.hdMinBytes == 0) out.hdMinBytes = row.rdBelow;
    if (out.ringMinBytes == 0) out.ringMinBytes = row.hdBelow;
    break;
  }
  return out;
}

std::string crossoversUnfit(const AllreduceCrossovers& c, int ranks) {
  if ((c.hdMinBytes == 0) == (c.ringMinBytes == 0)) return "";
  const AllreduceCrossovers x = effectiveCrossovers(c, ranks);
  if (x.hdMinBytes <= x.ringMinBytes) return "";
  const std::string at = " for " + std::to_string(ranks) + " ranks";
  if (c.hdMinBytes != 0) {
    return "KOLO_ALLREDUCE_HD_MIN_BYTES=" + std::to_string(c.hdMinBytes) +
           " is above the table's ring crossover (" + std::to_string(x.ringMinBytes) + " B" + at +
           "): halving-doubling never runs; set KOLO_ALLREDUCE_RING_MIN_BYTES too";
  }
  return "KOLO_ALLREDUCE_RING_MIN_BYTES=" + std::to_string(c.ringMinBytes) +
         " is below the table's halving-doubling crossover (" + std::to_string(x.hdMinBytes) +
         " B" + at + "): halving-doubling never runs; set KOLO_ALLREDUCE_HD_MIN_BYTES too";
}

Algorithm selectAlgorithm(const Transport& t, const AlgorithmConfig& cfg, OpType op, size_t bytes) {
  Algorithm a = configured(cfg, op);
  if (!appliesTo(a, op)) a = Algorithm::kAuto;
  const bool capable = nativeCapable(t.capabilities(), op);
  if (a == Algorithm::kNative) return capable ? a : ourChoice(cfg, op, t.size(), bytes);
  if (a != Algorithm::kAuto) return a;
  if (capable && preferNative(t, op, bytes)) return Algorithm::kNative;
  return ourChoice(cfg, op, t.size(), bytes);
}

bool allreduceCrossoversUsed(const Transport& t, const AlgorithmConfig& cfg) {
  // The smallest size and a size past every crossover: the rule is monotone in between (a
  // native preferred below some size, ours above it), so ours is reachable iff one end takes it.
  for (size_t bytes : {size_t{1}, size_t{1} << 40}) {
    Algorithm a = selectAlgorithm(t, cfg, OpType::kAllreduce, bytes);
    if (a == Algorithm::kNative) continue;
    Algorithm named = configured(cfg, OpType::kAllreduce);
    if (appliesTo(named, OpType::kAllreduce) && named != Algorithm::kAuto &&
        named != Algorithm::kNative) {
      return false;  // one of ours, named: the crossovers are never read
    }
    return true;
  }
  return false;
}

bool spansAllreduceApplies(const Transport& t, const AlgorithmConfig& cfg, size_t bytes) {
  return t.capabilities().nativeAllreduceSpans &&
         selectAlgorithm(t, cfg, OpType::kAllreduce, bytes) == Algorithm::kNative;
}

std::string plannedStep(const Transport& t, const AlgorithmConfig& cfg, OpType op, size_t bytes) {
  const Algorithm a = selectAlgorithm(t, cfg, op, bytes);
  if (op == OpType::kBroadcast) return broadcastStepName(t, cfg, a, bytes);
  return stepName(t, op, a);
}

Status allreduce(Transport& t, const AlgorithmConfig& cfg, void* data, size_t count, DataType dtype,
                 ReduceOp op, std::string* usedName) {
  const Algorithm a = selectAlgorithm(t, cfg, OpType::kAllreduce, count * sizeOf(dtype));
  setName(usedName, stepName(t, OpType::kAllreduce, a));
  switch (a) {
    case Algorithm::kNative:
      return t.allreduce(data, count, dtype, op);
    case Algorithm::kRecursiveDoubling:
      return recursiveDoublingAllreduce(t, data, count, dtype, op);
    case Algorithm::kHalvingDoubling:
      return halvingDoublingAllreduce(t, data, count, dtype, op);
    default:
      return ringAllreduce(t, data, count, dtype, op, cfg.segmentBytes);
  }
}

Status allgatherv(Transport& t, const AlgorithmConfig& cfg, const void* send, size_t sendBytes,
                  void* recv, const std::vector<size_t>& recvBytes, std::string* usedName) {
  const Algorithm a = selectAlgorithm(t, cfg, OpType::kAllgather, sum(recvBytes));
  setName(usedName, stepName(t, OpType::kAllgather, a));
  switch (a) {
    case Algorithm::kNative:
      return t.allgatherv(send, sendBytes, recv, recvBytes);
    case Algorithm::kBruck:
      return bruckAllgatherv(t, send, sendBytes, recv, recvBytes);
    default:
      return ringAllgatherv(t, send, sendBytes, recv, recvBytes);
  }
}

Status broadcast(Transport& t, const AlgorithmConfig& cfg, void* data, size_t bytes, int root,
                 std::string* usedName) {
  const Algorithm a = selectAlgorithm(t, cfg, OpType::kBroadcast, bytes);
  setName(usedName, broadcastStepName(t, cfg, a, bytes));
  if (a == Algorithm::kNative) return t.broadcast(data, bytes, root);
  switch (broadcastShape(t, cfg, a, bytes)) {
    case BroadcastShape::kTree:
      return binomialBroadcast(t, data, bytes, root);
    case BroadcastShape::kScatterAllgather:
      return scatterAllgatherBroadcast(t, data, bytes, root);
    default:
      return chainBroadcast(t, data, bytes, root, cfg.segmentBytes);
  }
}

Status controlAllreduce(Transport& t, void* data, size_t count, DataType dtype, ReduceOp op) {
  return recursiveDoublingAllreduce(t, data, count, dtype, op);
}

Status controlBroadcast(Transport& t, void* data, size_t bytes, int root) {
  // Not p2pBroadcast's rule: from 4 ranks, not 8, and past n segments it would take the chain
  // back, n - 1 latencies (broadcast.cc's essay).
  if (bytes < internal::kTreeBroadcastMaxBytes) return binomialBroadcast(t, data, bytes, root);
  if (t.size() >= internal::kControlScatterAllgatherMinRanks) {
    return scatterAllgatherBroadcast(t, data, bytes, root);
  }
  return chainBroadcast(t, data, bytes, root, AlgorithmConfig().segmentBytes);
}

Status controlGather(Transport& t, const std::vector<uint8_t>& mine, int root,
                     std::vector<std::vector<uint8_t>>* all) {
  return binomialGatherv(t, mine, root, all);
}

Status alltoallv(Transport& t, const AlgorithmConfig& cfg, const void* send,
                 const std::vector<size_t>& sendBytes, void* recv,
                 const std::vector<size_t>& recvBytes, std::string* usedName) {
  const Algorithm a = selectAlgorithm(t, cfg, OpType::kAlltoall, sum(sendBytes));
  setName(usedName, stepName(t, OpType::kAlltoall, a));
  if (a == Algorithm::kNative) return t.alltoallv(send, sendBytes, recv, recvBytes);
  return p2pAlltoallv(t, send, sendBytes, recv, recvBytes);
}

Status reducescatter(Transport& t, const AlgorithmConfig& cfg, const void* send, void* recv,
                     const std::vector<size_t>& recvCounts, DataType dtype, ReduceOp op,
                     std::string* usedName) {
  const Algorithm a =
      selectAlgorithm(t, cfg, OpType::kReducescatter, sum(recvCounts) * sizeOf(dtype));
  setName(usedName, stepName(t, OpType::kReducescatter, a));
  if (a == Algorithm::kNative) return t.reducescatter(send, recv, recvCounts, dtype, op);
  return ringReducescatter(t, send, recv, recvCounts, dtype, op, cfg.segmentBytes);
}

}  // namespace kolo::ops
