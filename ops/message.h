// SPDX-License-Identifier: Apache-2.0
// Request / Response: what ranks tell the coordinator rank about the ops they want to run, and
// what the coordinator rank answers. Plus the binary codec that carries them over the transport.
//
// Ownership: plain value types. Thread safety: none needed (values); the codec functions are pure
// and may be called from any thread.
//
// Wire format (version 2): little-endian, fixed width. Every list starts with a 4-byte magic
// ("KOLQ" for a RequestList, "KOLR" for a ResponseList) and a version byte. Integers and enums are
// int32 (counts and string lengths uint32), doubles are IEEE-754 bit patterns in 8 bytes, bools one
// byte (0 or 1), strings and vectors a uint32 count followed by the elements. Decoding checks
// every count against the bytes that remain (so a hostile length never triggers a big
// allocation), every enum against its known values, and rejects trailing bytes. It checks
// structure only: value ranges (negative dims, ranks outside a set) are the Negotiator's job.
// A response list ends with a bool "has tuning" and, when 1, the TuningParams (int64, f64,
// int64, int64, bool, then the hierarchical setting as an enum).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/algorithm.h"
#include "base/status.h"
#include "base/types.h"

namespace kolo {

// The fixed name of every join request and of the join response.
inline constexpr const char* kJoinName = "__join";

// What identifies an op in flight: its process set and its name. The same name in two sets is
// two ops (Horovod keeps one table of pending tensors per set), so every table of ops (the
// TensorQueue, the Negotiator, the ResponseCache) is keyed by this pair.
struct OpKey {
  int32_t processSet = 0;
  std::string name;

  bool operator<(const OpKey& o) const {
    return processSet != o.processSet ? processSet < o.processSet : name < o.name;
  }
  bool operator==(const OpKey& o) const { return processSet == o.processSet && name == o.name; }
  bool operator!=(const OpKey& o) const { return !(*this == o); }
};

struct OpKeyHash {
  size_t operator()(const OpKey& k) const {
    return std::hash<std::string>()(k.name) * 31u + static_cast<size_t>(k.processSet);
  }
};

// How messages and timeline rows show an op: "name" in the global set, "name@ps3" in set 3.
std::string displayName(const OpKey& key);
// How an error message names an op: "allreduce 'grad'", and " in process set 2" outside the
// global set.
std::string opLabel(OpType type, const OpKey& key);

// OpSpec: what one op is, the part a rank's Request and the agreed Response share (same fields,
// same wire order in both messages). Request and Response embed it as their base, so a response
// made from a request (or a cached request from a response) copies one OpSpec, not ten fields.
struct OpSpec {
  OpType type = OpType::kAllreduce;
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;  // Response: the first rank's shape (allgather/alltoall: dims 1..)
  ReduceOp reduceOp = ReduceOp::kSum;
  double prescale = 1.0, postscale = 1.0;
  int32_t root = 0;     // broadcast: set rank of the root
  int32_t device = -1;  // -1 CPU, >= 0 CUDA ordinal (Response: the lowest submitting rank's;
                        // only its kind is agreed on)
  int32_t processSet = 0;

  const OpSpec& spec() const { return *this; }
  OpSpec& spec() { return *this; }
};

inline OpKey keyOf(const OpSpec& s) { return {s.processSet, s.name}; }

struct Request : OpSpec {
  int32_t rank = 0;  // global rank of the sender
  std::vector<int64_t> splits;  // alltoall: rows sent to each set rank (exactly set-size entries,
                                // summing to at most shape[0]); kAddProcessSet: the rank list;
                                // kRemoveProcessSet: {set id}
  int32_t groupId = -1, groupSize = 0;  // grouped allreduce: members share groupId (per rank
                                        // counter); groupSize = number of members
  // Non-empty: this rank cannot take part, for this reason (a check of its own input that the
  // Negotiator cannot repeat failed: a NULL buffer, an output of the wrong shape, a framework's
  // dtype or layout check). The request then carries no tensor (dtype, shape, scales and splits
  // are defaults) and the op fails on every rank naming this one, instead of the others
  // waiting for it (Runtime::refuse).
  std::string refusal;
};


struct RequestList {
  int32_t rank = 0;
  bool shutdown = false;
  std::vector<Request> requests;
};

struct Response : OpSpec {
  enum class Kind : int32_t { kOk = 0, kError = 1 };
  Kind kind = Kind::kOk;
  std::vector<int64_t> rankDim0;     // allgather: dim 0 of every set rank, in set-rank order
  std::vector<int64_t> splitMatrix;  // alltoall: setSize x setSize, row = sender's splits
  std::vector<int32_t> joinedRanks;  // allreduce/barrier during a join: global ranks that did
                                     // not submit and contribute zeros, ascending
  int32_t lastJoinedRank = -1;       // join
  ErrorCode errorCode = ErrorCode::kOk;
  std::string error;
  // Grouped ops: every response of one released group carries the same id (assigned by the
  // Negotiator, identical on every rank because it travels in the response); -1 = not grouped.
  // The FusionPlanner keeps a group in one batch when it fits.
  int32_t group = -1;
};


// The knobs the autotuner (core/autotune.h) moves. Rank 0 puts a new set in the response list
// of a round; every rank applies it in that round, before executing the round's responses.
struct TuningParams {
  int64_t fusionThresholdBytes = 0;
  double cycleTimeMs = 0;
  int64_t allreduceHdMinBytes = 0;  // ops::AllreduceCrossovers
  int64_t allreduceRingMinBytes = 0;
  bool active = false;  // false: the search is over, these are the fixed values
  // AlgorithmConfig::hierarchicalAllreduce (host tensors): kAuto (hierarchical where the set's
  // hosts allow it) or kOff (flat) while it is tuned; otherwise the configured value.
  ops::Hierarchical hierarchicalAllreduce = ops::Hierarchical::kAuto;
  bool operator==(const TuningParams& o) const {
    return fusionThresholdBytes == o.fusionThresholdBytes && cycleTimeMs == o.cycleTimeMs &&
           allreduceHdMinBytes == o.allreduceHdMinBytes &&
           allreduceRingMinBytes == o.allreduceRingMinBytes && active == o.active &&
           hierarchicalAllreduce == o.hierarchicalAllreduce;
  }
};

struct ResponseList {
  bool shutdown = false;
  std::string shutdownReason;
  std::vector<Response> responses;
  bool hasTuning = false;  // the list carries new autotune parameters
  TuningParams tuning;
};

const char* toString(Response::Kind kind);  // "ok", "error"

// Encoding never fails. The vectors are self-contained (no pointers into the input).
std::vector<uint8_t> encode(const RequestList& list);
std::vector<uint8_t> encode(const ResponseList& list);

// Decode a whole buffer. On failure returns kInternal "malformed request list from rank R: ..."
// (R = fromRank when >= 0, else the rank field if it was already read) and leaves *out untouched.
// Never reads outside [data, data + n); data may be null when n == 0.
Status decode(const uint8_t* data, size_t n, RequestList* out, int32_t fromRank = -1);
// Same for a response list; fromRank names the sender in the message ("the coordinator" if < 0).
Status decode(const uint8_t* data, size_t n, ResponseList* out, int32_t fromRank = -1);

}  // namespace kolo
