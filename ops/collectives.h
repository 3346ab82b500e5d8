// The collective algorithms over a Transport's point-to-point API (no threads, no state between
// calls), and the one entry point per collective that picks ring or native (ops/select.cc).
//
// Common contract: every rank of `t` calls the same function with compatible arguments, in the
// same order. Blocking; each internal wait uses t.deadlineFromNow(), so a lost peer gives
// kPeerLost/kTimeout naming it instead of a hang. Counts are elements, *Bytes are bytes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/types.h"
#include "transport/transport.h"

namespace kolo::ops {

enum class Algorithm { kAuto = 0, kRing = 1, kNative = 2 };
const char* toString(Algorithm a);
// "auto" | "ring" | "native" -> Algorithm; false when unknown.
bool parseAlgorithm(const std::string& text, Algorithm* out);

// Which algorithm each collective uses, from Config (KOLO_<OP>_ALGORITHM) and tuning knobs.
struct AlgorithmConfig {
  Algorithm allreduce = Algorithm::kAuto;
  Algorithm allgather = Algorithm::kAuto;
  Algorithm broadcast = Algorithm::kAuto;
  Algorithm alltoall = Algorithm::kAuto;
  Algorithm reducescatter = Algorithm::kAuto;
  size_t segmentBytes = 256 * 1024;  // ring pipeline segment (stays in cache)
};

// ---- ring / p2p algorithms (ring_*.cc, broadcast.cc, alltoallv.cc, reducescatter.cc) ----------
// In-place allreduce of `count` elements. kAverage sums (caller scales).
Status ringAllreduce(Transport& t, void* data, size_t count, DataType dtype, ReduceOp op,
                     size_t segmentBytes);
// Every rank contributes sendBytes (== recvBytes[rank]); recv holds all ranks' blocks in rank
// order. recv may alias the rank's own block position (then send is not read).
Status ringAllgatherv(Transport& t, const void* send, size_t sendBytes, void* recv,
                      const std::vector<size_t>& recvBytes);
// In place from root: pipelined chain for large messages, binomial tree for small ones.
Status p2pBroadcast(Transport& t, void* data, size_t bytes, int root, size_t segmentBytes);
// sendBytes[r] go to rank r (consecutive blocks of send); recvBytes[r] arrive from rank r.
Status p2pAlltoallv(Transport& t, const void* send, const std::vector<size_t>& sendBytes,
                    void* recv, const std::vector<size_t>& recvBytes);
// send holds sum(recvCounts) elements; rank r receives the reduced block r (recvCounts[r]).
Status ringReducescatter(Transport& t, const void* send, void* recv,
                         const std::vector<size_t>& recvCounts, DataType dtype, ReduceOp op,
                         size_t segmentBytes);

// ---- selected entry points (select.cc): native when allowed and available, else ring ---------
// `usedName` (optional) receives the name of what ran, e.g. "RING_ALLREDUCE", "MPI_ALLREDUCE"
// (the timeline's activity names).
Status allreduce(Transport& t, const AlgorithmConfig& cfg, void* data, size_t count,
                 DataType dtype, ReduceOp op, std::string* usedName = nullptr);
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

// The timeline name of what the entry point above would run for `bytes` of payload
// ("RING_ALLREDUCE", "MPI_ALLREDUCE", "TREE_BROADCAST", ...), without running it.
std::string plannedStep(const Transport& t, const AlgorithmConfig& cfg, OpType op, size_t bytes);

// Reducescatter's split of dim0 rows: the first (rows % size) ranks get one extra row.
std::vector<size_t> evenSplit(size_t rows, int size);
// The ring's segment math: [begin, end) elements of chunk `i` when `count` is cut into `parts`
// nearly-equal chunks (the first count % parts chunks one element longer). Chunks may be empty.
void chunkRange(size_t count, int parts, int i, size_t* begin, size_t* end);

}  // namespace kolo::ops
