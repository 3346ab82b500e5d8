// SPDX-License-Identifier: Apache-2.0
// Gloo's own allreduce algorithms, called directly, as a baseline of kolo-runtime-bench: Gloo's
// ring (gloo::allreduce with AllreduceOptions::RING, what kolo's Gloo transport runs as its
// native allreduce) and Gloo's halving-doubling (gloo::AllreduceHalvingDoubling, the algorithm
// object of Gloo's older API, which gloo::allreduce does not offer in the Debian package
// 0.0~git20220518). Both run on a Gloo context of their own, connected over the job's store
// (keys under `keyPrefix`, new for every call), with no kolo code between the timer and Gloo.
//
// Built only with Gloo (bench/CMakeLists.txt picks gloo_algorithms.cc or
// gloo_algorithms_none.cc, so no #if here); without Gloo it returns kUnsupported.
//
// Blocking and collectivity: every rank of the job calls it with the same arguments; it
// connects (waits at most the job's KOLO_START_TIMEOUT), runs both loops, and disconnects.
// Gloo's waits are bounded by KOLO_TIMEOUT_SECONDS; a Gloo exception becomes kPeerLost /
// kTimeout naming the algorithm. Thread safety: main thread only.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bench/bench_job.h"
#include "base/status.h"

namespace kolo::bench {

struct GlooAlgorithmTimes {
  std::vector<double> ringUs;             // this rank's microseconds per allreduce
  std::vector<double> halvingDoublingUs;  // (the caller takes MAX over ranks)
};

// Times `iters` float32 sum allreduces of `count` elements (after `warmup` untimed ones) with
// each algorithm, on a job whose transport is Gloo (job.store set). Errors: kUnsupported
// (built without Gloo), the rendezvous' and Gloo's.
Status timeGlooAlgorithms(const BenchJob& job, const std::string& keyPrefix, size_t count,
                          long warmup, long iters, GlooAlgorithmTimes* out);

}  // namespace kolo::bench
