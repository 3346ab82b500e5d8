// SPDX-License-Identifier: Apache-2.0
// The collective algorithms over a Transport's point-to-point API (no threads, no state between
// calls), and the one entry point per collective that picks one of them or the transport's
// native collective by size and rank count (ops/select.cc).
//
// Common contract: every rank of `t` calls the same function with compatible arguments, in the
// same order. Blocking; each internal wait uses t.deadlineFromNow(), so a lost peer gives
// kPeerLost/kTimeout naming it instead of a hang. Counts are elements, *Bytes are bytes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/types.h"
#include "base/algorithm.h"
#include "base/tensor.h"
#include "transport/transport.h"

namespace kolo::ops {

// The algorithm names and AlgorithmConfig live in base/algorithm.h (config holds them).

// The crossovers kAuto uses for `ranks` ranks: `c`'s non-zero fields, the table's elsewhere.
AllreduceCrossovers effectiveCrossovers(const AllreduceCrossovers& c, int ranks);
// Why halving-doubling never runs at `ranks` ranks when only one crossover of `c` is set and it
// lands on the wrong side of the table's other one ("" when both are set, neither is, or they
// are ordered). Config refuses the two set crossed; this is the one-set case, which depends on
// the rank count, so rank 0 warns instead of init failing.
std::string crossoversUnfit(const AllreduceCrossovers& c, int ranks);

// ---- ring / p2p algorithms (ring_*.cc, broadcast.cc, alltoallv.cc, reducescatter.cc) ----------
// In-place allreduce of `count` elements. kAverage sums (caller scales).
Status ringAllreduce(Transport& t, void* data, size_t count, DataType dtype, ReduceOp op,
                     size_t segmentBytes);
// Every rank contributes sendBytes (== recvBytes[rank]); recv holds all ranks' blocks in rank
// order. recv may alias the rank's own block position (then send is not read).
Status ringAllgatherv(Transport& t, const void* send, size_t sendBytes, void* recv,
                      const std::vector<size_t>& recvBytes);
// In place from root, by p2pBroadcastShape: the binomial tree for small messages (< 64 KiB);
// from 8 ranks, scatter-allgather while bytes / ranks < segmentBytes (or segmentBytes == 0);
// otherwise the pipelined chain (broadcast.cc's essay: the alpha-beta costs behind the rule).
Status p2pBroadcast(Transport& t, void* data, size_t bytes, int root, size_t segmentBytes);
enum class BroadcastShape { kTree, kChain, kScatterAllgather };
BroadcastShape p2pBroadcastShape(int ranks, size_t bytes, size_t segmentBytes);
// The three shapes of p2pBroadcast on their own (any root, any size, any rank count).
Status binomialBroadcast(Transport& t, void* data, size_t bytes, int root);
Status chainBroadcast(Transport& t, void* data, size_t bytes, int root, size_t segmentBytes);
// Binomial scatter of n blocks (block r = chunkRange(bytes, n, r), real rank order), then
// bruckAllgatherv in place: 2 ceil(log2 n) latencies, at most 2 (n-1)/n of the bytes in and
// out per rank. Tags: broadcast's for the scatter, allgather's for the allgather.
Status scatterAllgatherBroadcast(Transport& t, void* data, size_t bytes, int root);
// sendBytes[r] go to rank r (consecutive blocks of send); recvBytes[r] arrive from rank r.
Status p2pAlltoallv(Transport& t, const void* send, const std::vector<size_t>& sendBytes,
                    void* recv, const std::vector<size_t>& recvBytes);
// send holds sum(recvCounts) elements; rank r receives the reduced block r (recvCounts[r]).
Status ringReducescatter(Transport& t, const void* send, void* recv,
                         const std::vector<size_t>& recvCounts, DataType dtype, ReduceOp op,
                         size_t segmentBytes);

// ---- latency-optimal algorithms (recursive_doubling.cc, halving_doubling.cc, bruck.cc) -------
// Every rank ends with bitwise-identical results: partners combine in one operand order (the
// lower rank's data first), and recursive doubling and halving-doubling build the same
// combination tree, so they agree bitwise with each other too. Any rank count (a count that is
// not a power of two folds its extra ranks in first and sends them the result at the end), any
// count (0, fewer elements than ranks), every dtype and ReduceOp of reduce_cpu.h (kAverage sums;
// kBitAnd too). Small buffers are fine: the coordinator's control round may use them.
//
// In-place allreduce by recursive doubling: log2 steps, each exchanging the whole buffer.
// Scratch: count elements.
Status recursiveDoublingAllreduce(Transport& t, void* data, size_t count, DataType dtype,
                                  ReduceOp op);
// In-place allreduce by recursive halving (reduce-scatter) then recursive doubling (allgather),
// Rabenseifner's algorithm: 2 log2 steps moving 2 (p-1)/p of the buffer. Scratch: half of it
// (the whole of it on the ranks that take in a folded rank).
Status halvingDoublingAllreduce(Transport& t, void* data, size_t count, DataType dtype,
                                ReduceOp op);
// Bruck allgatherv: ceil(log2 n) steps, blocks of any (per-rank, possibly zero) size, no staging
// buffer. Same arguments and aliasing rule as ringAllgatherv.
Status bruckAllgatherv(Transport& t, const void* send, size_t sendBytes, void* recv,
                       const std::vector<size_t>& recvBytes);

// Gathers every rank's `mine` (any length, different per rank) at `root` by a binomial tree
// (gather.cc): ceil(log2 n) message latencies. On the root, (*all)[r] is rank r's block; `all`
// is untouched elsewhere (may be null there).
Status binomialGatherv(Transport& t, const std::vector<uint8_t>& mine, int root,
                       std::vector<std::vector<uint8_t>>* all);

// One independent reduction inside a recursiveDoublingAllreduceRegions buffer: `count` elements
// of `dtype` at byte `offset`, combined with `op`.
struct ReduceRegion {
  size_t offset = 0;
  size_t count = 0;
  DataType dtype = DataType::kUInt8;
  ReduceOp op = ReduceOp::kSum;
};
// Recursive doubling over `bytes` of buffer in which each region is reduced with its own dtype
// and op (bytes outside every region end up as some rank's copy). Each region gets bitwise the
// result recursiveDoublingAllreduce gives over it alone.
Status recursiveDoublingAllreduceRegions(Transport& t, void* data, size_t bytes,
                                         const std::vector<ReduceRegion>& regions);

// ---- selected entry points (select.cc) ----------------------------------------------------------
// The configured algorithm when it applies to the collective (native only where the transport
// has it), else the measured choice by size and rank count (select.cc's table, docs/algorithms.md).
// `usedName` (optional) receives the name of what ran, e.g. "RING_ALLREDUCE", "MPI_ALLREDUCE"
// (the timeline's activity names).
Status allreduce(Transport& t, const AlgorithmConfig& cfg, void* data, size_t count, DataType dtype,
                 ReduceOp op, std::string* usedName = nullptr);
Status allgatherv(Transport& t, const AlgorithmConfig& cfg, const void* send, size_t sendBytes,
                  void* recv, const std::vector<size_t>& recvBytes,
                  std::string* usedName = nullptr);
Status broadcast(Transport& t, const AlgorithmConfig& cfg, void* data, size_t bytes, int root,
                 std::string* usedName = nullptr);
Status alltoallv(Transport& t, const AlgorithmConfig& cfg, const void* send,
                 const std::vector<size_t>& sendBytes, void* recv,
                 const std::vector<size_t>& recvBytes, std::string* usedName = nullptr);
Status reducescatter(Transport& t, const AlgorithmConfig& cfg, const void* send, void* recv,
                     const std::vector<size_t>& recvCounts, DataType dtype, ReduceOp op,
                     std::string* usedName = nullptr);

// Whether an allreduce of `bytes` in all may run as t.allreduceSpans (the tensors reduced where
// they lie, no packing copies): the choice for that size is the transport's native allreduce
// and the transport has nativeAllreduceSpans (shared memory).
bool spansAllreduceApplies(const Transport& t, const AlgorithmConfig& cfg, size_t bytes);

// Whether the allreduce crossovers (AlgorithmConfig::allreduceCrossovers) decide anything on `t`:
// false when every allreduce size runs the transport's native one (shared memory, NCCL) or one
// algorithm named in `cfg`. The autotuner does not search knobs that change nothing.
bool allreduceCrossoversUsed(const Transport& t, const AlgorithmConfig& cfg);

// What the entry point above runs for `bytes` of payload (never kAuto): rule in select.cc.
// Broadcast's kRing is the chain when named; under auto (or native without one) it stands for
// both large shapes, the chain and scatter-allgather (p2pBroadcastShape): plannedStep names
// which.
Algorithm selectAlgorithm(const Transport& t, const AlgorithmConfig& cfg, OpType op, size_t bytes);
// The timeline name of what the entry point above would run for `bytes` of payload
// ("RING_ALLREDUCE", "RECURSIVE_DOUBLING_ALLREDUCE", "HALVING_DOUBLING_ALLREDUCE",
// "MPI_ALLREDUCE", "TREE_BROADCAST", "PIPELINED_BROADCAST", "SCATTER_ALLGATHER_BROADCAST",
// "BRUCK_ALLGATHER", ...), without running it.
std::string plannedStep(const Transport& t, const AlgorithmConfig& cfg, OpType op, size_t bytes);

// ---- the coordinator's control plane (select.cc) ------------------------------------------------
// kolo's own O(log n)-step algorithms whatever KOLO_<OP>_ALGORITHM says, so a failure names the
// lost or silent peer (a native collective's error often does not), and a round costs
// ceil(log2 n) latencies, not the ring's 2 (n-1). Same contract as above; no usedName.
// In-place allreduce of a small buffer (the round's bit / byte vector: kMin, kBitAnd, ...):
// recursiveDoublingAllreduce.
Status controlAllreduce(Transport& t, void* data, size_t count, DataType dtype, ReduceOp op);
// In place from root: binomialBroadcast below internal::kTreeBroadcastMaxBytes (64 KiB); from
// there (a long response list: a first round of thousands of new tensors)
// scatterAllgatherBroadcast at 4 ranks or more, whatever the size, so the round stays
// O(log n) latencies; the pipelined chain (default segment) at 2 and 3 ranks, where its n - 1
// hops are as few.
Status controlBroadcast(Transport& t, void* data, size_t bytes, int root);
// Every rank's request list to root: binomialGatherv.
Status controlGather(Transport& t, const std::vector<uint8_t>& mine, int root,
                     std::vector<std::vector<uint8_t>>* all);

// Reducescatter's split of dim0 rows: the first (rows % size) ranks get one extra row.
std::vector<size_t> evenSplit(size_t rows, int size);
// chunkRange (the ring's segment math) is in base/tensor.h: shared-memory collectives use it too.

}  // namespace kolo::ops
