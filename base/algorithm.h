// SPDX-License-Identifier: Apache-2.0
// The names of kolo's collective algorithms and the per-collective choice (AlgorithmConfig) that
// Config carries (KOLO_<OP>_ALGORITHM, the allreduce crossovers, KOLO_HIERARCHICAL_ALLREDUCE).
//
// Values only: which algorithm actually runs is decided in ops/select.cc. They live in base so
// that config (base) does not reach up into ops; the namespace stays kolo::ops, where the
// algorithms are. Ownership: plain values. Threading: none. Blocking: none. Errors:
// parseAlgorithm returns false on an unknown name.
#pragma once

#include <cstddef>
#include <string>

#include "base/types.h"

namespace kolo::ops {

// kRing is each collective's bandwidth-optimal form (for broadcast: the pipelined chain; auto's
// large broadcasts from 8 ranks take scatter-allgather, ops/broadcast.cc). The
// latency-optimal ones: kRecursiveDoubling and kHalvingDoubling (allreduce), kTree (broadcast),
// kBruck (allgather). A value that has no form for a collective (kBruck for an allreduce) is
// treated as kAuto by the entry points below.
enum class Algorithm {
  kAuto = 0,
  kRing = 1,
  kNative = 2,
  kRecursiveDoubling = 3,
  kHalvingDoubling = 4,
  kTree = 5,
  kBruck = 6,
};
const char* toString(Algorithm a);  // "auto", "ring", "native", "recursive_doubling", ...
// Any name toString gives (case-insensitive) -> Algorithm; false when unknown.
bool parseAlgorithm(const std::string& text, Algorithm* out);
// Whether `a` names something `op` can run: auto, native and ring for every collective, plus
// recursive_doubling / halving_doubling (allreduce), tree (broadcast), bruck (allgather).
bool appliesTo(Algorithm a, OpType op);

// Where kAuto switches between kolo's own allreduces (when one of ours runs, not a native):
// recursive doubling below hdMinBytes, halving-doubling from there, the ring from ringMinBytes.
// 0 = the measured table in select.cc for this rank count. Set by KOLO_ALLREDUCE_HD_MIN_BYTES /
// KOLO_ALLREDUCE_RING_MIN_BYTES, or by the autotuner (core/autotune.h) while it searches.
struct AllreduceCrossovers {
  size_t hdMinBytes = 0;
  size_t ringMinBytes = 0;
};
// KOLO_HIERARCHICAL_ALLREDUCE for host tensors (ops/hierarchical.h): kAuto (unset) takes the
// hierarchical allreduce where the set's topology has it and the measured rule says it pays;
// kOn / kOff force it (kOn still needs a topology it fits).
enum class Hierarchical { kAuto = 0, kOn = 1, kOff = 2 };
const char* toString(Hierarchical h);  // "auto", "on", "off"

// Which algorithm each collective uses, from Config (KOLO_<OP>_ALGORITHM) and tuning knobs.
struct AlgorithmConfig {
  Algorithm allreduce = Algorithm::kAuto;
  Algorithm allgather = Algorithm::kAuto;
  Algorithm broadcast = Algorithm::kAuto;
  Algorithm alltoall = Algorithm::kAuto;
  Algorithm reducescatter = Algorithm::kAuto;
  size_t segmentBytes = 256 * 1024;  // ring pipeline segment (stays in cache)
  AllreduceCrossovers allreduceCrossovers;
  Hierarchical hierarchicalAllreduce = Hierarchical::kAuto;
};

}  // namespace kolo::ops
