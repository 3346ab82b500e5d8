// SPDX-License-Identifier: Apache-2.0
// The baselines of kolo-runtime-bench: the same work as the runtime cases, run directly on a
// transport this process creates itself (bench_job.h, store keys under
// "kolo-runtime-bench/"), without the runtime -- once with the transport's native allreduce and
// once with kolo's ring algorithm. On a Gloo transport the 4-byte allreduce also runs with
// Gloo's own ring and halving-doubling called directly (gloo_algorithms.h). Over shared memory
// the bulk case also runs on the launcher's transport without shm (MPI_Allreduce or Gloo's of
// one buffer: what a user who fuses by hand gets), from a second transport of its own.
//
// Blocking and collectivity: every rank calls measureTransportBaseline with the same options;
// it connects, measures and disconnects (the transport is destroyed before it returns).
// Thread safety: main thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "bench/bench_util.h"
#include "base/status.h"

namespace kolo::bench {

struct BaselineOptions {
  long latencyIters = 1000;  // 4-byte allreduces timed
  long latencyWarmup = 50;
  long steps = 20;  // bulk allreduces timed
  long warmupSteps = 3;
  size_t bulkCount = 0;  // float32 elements of the bulk allreduce
};

struct BaselineResult {
  std::string transport;  // describeTransport(): "mpi", "gloo", "shm (over mpi)"
  int ranks = 0;
  bool nativeAvailable = false;               // the transport has a native allreduce
  std::string nativeName;                     // e.g. "MPI_ALLREDUCE"
  SampleStats latNative, latRing;             // us per 4-byte allreduce, slowest rank per iteration
  bool glooAlgorithms = false;                // Gloo's ring and halving-doubling were measured
  SampleStats latGlooRing, latGlooHd;         // ... called directly (gloo_algorithms.h)
  double bulkNativeMs = -1, bulkRingMs = -1;  // mean ms per bulk allreduce, slowest rank
  int64_t bulkNativeWrong = -1, bulkRingWrong = -1;  // wrong elements after one checked run
  // When the transport is shared memory over MPI or Gloo: the same bytes as one buffer by that
  // launcher transport's native allreduce (MPI_Allreduce, Gloo's), a transport of its own
  // created without shm: the hand-fused baseline of the same job.
  std::string plainTransport, plainNativeName;  // empty when not measured
  double bulkPlainNativeMs = -1;
  int64_t bulkPlainNativeWrong = -1;
};

// Errors: the job's (connect) and the collectives' own.
Status measureTransportBaseline(const BaselineOptions& o, BaselineResult* out);

}  // namespace kolo::bench
